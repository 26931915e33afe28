"""sluice.torchrec against real TorchRec (the environment of
ops/torchrec-venv; ctest python_torchrec runs this module there): the Batch
in TorchRec's train pipelines for a few hundred steps, the merged
variable-batch KJT against the expanded batch (to_dict, inverse_indices,
EmbeddingBagCollection forward and backward), DedupEmbeddingBagCollection
on the "unique" form against an EmbeddingBagCollection on the expanded
batch (unsharded, and under DistributedModelParallel on 2 gloo ranks,
table-wise and row-wise, with TrainPipelineSparseDist), and MasterDataset
with two ranks in master mode: every sample exactly once across the ranks,
and exactly once again after a resume from the ranks' saved state.
Skipped where torchrec cannot be imported (Debian's python3)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

torchrec = pytest.importorskip("torchrec")

import sluice  # noqa: E402
from procs import SCALE, USER, Master, gen_table, needs_worker  # noqa: E402
from procs import workers as procs_workers  # noqa: E402
from sluice.torch import expand_batch, merged_kjt_kwargs  # noqa: E402
from sluice.torchrec import (  # noqa: E402
    Batch,
    MasterDataset,
    rank_and_world_size,
    resume_tokens,
    to_batch,
)
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor  # noqa: E402
from torchrec.distributed.train_pipeline import TrainPipelineBase  # noqa: E402
from torchrec.streamable import Pipelineable  # noqa: E402

ROWS = 20000
TABLE_SIZE = 1000
SPARSE = ["item_id", "item_cat", "item_tags"] + USER
DENSE = ["user_age", "user_clicks", "item_clicks", "position"]


pytestmark = needs_worker

# Ids hashed into small tables, so that one EmbeddingBagCollection takes them.
TRANSFORMS = [{"op": "fill_missing", "feature": "user_age", "value": 0}] + [
    {"op": "sigrid_hash", "feature": f, "table_size": TABLE_SIZE} for f in SPARSE
]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return gen_table(tmp_path_factory.mktemp("tables") / "sessions", ROWS)


@pytest.fixture
def workers(tmp_path, table):
    """workers(dedup=True, batch=512): a new worker's address (TRANSFORMS)."""
    with procs_workers(tmp_path, table, spec={"transforms": TRANSFORMS}) as start:
        yield lambda dedup=True, batch=512: start(dedup, batch=batch)


def client(address):
    return sluice.Client(address, timeout_ms=int(30000 * SCALE))


def make_ebc(seed=0):
    torch.manual_seed(seed)
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(name="t_" + f, embedding_dim=4, num_embeddings=TABLE_SIZE,
                               feature_names=[f])
            for f in SPARSE
        ]
    )


def rows_of(jt):
    """The list of id lists of a JaggedTensor."""
    offs = jt.offsets().tolist()
    vals = jt.values().tolist()
    return [vals[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]


def test_merged_kjt_matches_expanded_batch(workers):
    checked = 0
    with client(workers(dedup=True)) as c:
        for b in c:
            kw = merged_kjt_kwargs(b)
            kjt = KeyedJaggedTensor(**kw)
            exp = KeyedJaggedTensor(**{k: v for k, v in _kw(expand_batch(b, as_torch=True)).items()})
            B = b.batch_size
            g = b.group("user")
            U = g.unique.stride
            assert U < B  # the batch really is deduplicated
            assert kjt.keys() == exp.keys() == b.sparse.keys + USER
            assert kjt.variable_stride_per_key()
            assert kjt.stride() == B
            assert kjt.stride_per_key() == [B] * len(b.sparse.keys) + [U] * len(USER)
            keys, inv = kjt.inverse_indices()
            assert keys == kjt.keys() and inv.shape == (len(keys), B) and inv.dtype == torch.int64
            d, e = kjt.to_dict(), exp.to_dict()
            for f, key in enumerate(keys):
                got = rows_of(d[key])
                want = rows_of(e[key])
                assert len(got) == (U if key in USER else B)
                assert [got[i] for i in inv[f].tolist()] == want, key
            # One EBC, the same weights: the merged KJT's pooled output
            # equals the expanded batch's, and so do the gradients.
            ebc1, ebc2 = make_ebc(), make_ebc()
            out1, out2 = ebc1(kjt), ebc2(exp)
            assert out1.keys() == out2.keys()
            torch.testing.assert_close(out1.values(), out2.values())
            assert out1.values().shape == (B, 4 * len(SPARSE))
            w = torch.randn(out1.values().shape, generator=torch.Generator().manual_seed(1))
            (out1.values() * w).sum().backward()
            (out2.values() * w).sum().backward()
            for (n1, p1), (n2, p2) in zip(ebc1.named_parameters(), ebc2.named_parameters()):
                assert n1 == n2
                # The same sums in another order (a unique row's gradient is
                # summed once over its batch rows): float32 rounding only.
                torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-4, atol=1e-4)
            checked += 1
            if checked == 3:
                break
    assert checked == 3


def _kw(d):
    return {k: d[k] for k in ("keys", "values", "lengths", "weights", "stride")}


def test_batch_is_pipelineable_and_round_trips(workers):
    with client(workers(dedup=True)) as c:
        raw = c.next()
        b = to_batch(raw)
        assert isinstance(b, Pipelineable)
        assert b.dense_features.shape == (raw.batch_size, len(DENSE))
        assert b.labels.shape == (raw.batch_size,)
        assert b.sample_ids.tolist() == raw.sample_ids.tolist()
        # dense and labels share the received buffers: no copy.
        assert b.dense_features.data_ptr() == raw.dense.ctypes.data
        moved = b.to(torch.device("cpu"), non_blocking=True)
        assert torch.equal(moved.dense_features, b.dense_features)
        assert moved.sparse_features.stride_per_key() == b.sparse_features.stride_per_key()
        assert b.pin_memory() is b  # no accelerator here: nothing to pin for
        back = Batch.from_state(b.state())
        assert back.sparse_features.keys() == b.sparse_features.keys()
        assert torch.equal(back.sparse_features.values(), b.sparse_features.values())
        assert torch.equal(back.sparse_features.inverse_indices()[1],
                           b.sparse_features.inverse_indices()[1])
        assert back.sparse_features.stride_per_key() == b.sparse_features.stride_per_key()
        assert torch.equal(back.labels, b.labels) and torch.equal(back.sample_ids, b.sample_ids)


class TinyDLRM(torch.nn.Module):
    """EBC + a linear layer on the dense features; returns (loss, output) as
    TorchRec's pipelines want, and records the sample ids it trained on
    (seen) and each batch's order_g (seen_g)."""

    def __init__(self):
        super().__init__()
        self.ebc = make_ebc()
        self.dense = torch.nn.Linear(len(DENSE), 4)
        self.top = torch.nn.Linear(4 * (len(SPARSE) + 1), 1)
        self.seen = []
        self.seen_g = []

    def forward(self, batch):
        # TrainPipelineSparseDist traces the forward once with proxies.
        if not isinstance(batch.sample_ids, torch.fx.Proxy):
            self.seen.append(batch.sample_ids.clone())
            self.seen_g.append(batch.order_g)
        pooled = self.ebc(batch.sparse_features).values()
        x = torch.cat([pooled, self.dense(torch.log1p(batch.dense_features))], dim=1)
        logits = self.top(x).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        return loss, logits.detach()


def test_train_pipeline_base_runs_every_batch(workers, table):
    batch = 64
    model = TinyDLRM()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    pipeline = TrainPipelineBase(model, opt, torch.device("cpu"))
    steps, losses = 0, []
    with client(workers(dedup=True, batch=batch)) as c:
        it = (to_batch(b) for b in c)
        while True:
            try:
                out = pipeline.progress(it)
            except StopIteration:
                break
            assert out.shape[0] <= batch
            steps += 1
    want = (ROWS + batch - 1) // batch
    assert steps == want and steps >= 300
    ids = torch.cat(model.seen).numpy()
    assert np.array_equal(np.sort(ids), np.arange(ids.min(), ids.min() + ROWS))


def test_train_pipeline_sparse_dist_on_cpu(workers, tmp_path):
    """DistributedModelParallel shards the EBC (one rank, gloo, CPU) and
    TrainPipelineSparseDist overlaps the input distribution with training."""
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import KeyedOptimizerWrapper

    batch = 64
    torch.distributed.init_process_group(
        "gloo", store=torch.distributed.FileStore(str(tmp_path / "store"), 1), rank=0,
        world_size=1)
    try:
        model = TinyDLRM()
        apply_optimizer_in_backward(torch.optim.SGD, model.ebc.parameters(), {"lr": 0.05})
        dmp = DistributedModelParallel(model, device=torch.device("cpu"))
        opt = KeyedOptimizerWrapper(dict(dmp.named_parameters()),
                                    lambda p: torch.optim.SGD(p, lr=0.05))
        pipeline = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
        steps = 0
        with client(workers(dedup=True, batch=batch)) as c:
            it = (to_batch(b) for b in c)
            while True:
                try:
                    pipeline.progress(it)
                except StopIteration:
                    break
                steps += 1
    finally:
        torch.distributed.destroy_process_group()
    assert steps == (ROWS + batch - 1) // batch
    ids = torch.cat(model.seen).numpy()
    assert np.array_equal(np.sort(ids), np.arange(ids.min(), ids.min() + ROWS))


def test_rank_and_world_size_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert rank_and_world_size() == (3, 4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="rank 4 is not in"):
        rank_and_world_size()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert rank_and_world_size() == (0, 1)


def test_sluice_dataset_feeds_a_train_pipeline_an_epoch_per_iteration(table):
    """sluice.Dataset(torchrec=...) yields TorchRec batches: TrainPipelineBase
    runs over each epoch's iteration, every sample once per epoch."""
    batch = 256
    spec = {"id": "pipe", "transforms": TRANSFORMS,
            "batch": {"size": batch, "epochs": 2, "dedup_groups": {"user": USER}}}
    model = TinyDLRM()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    with sluice.Dataset(table, spec, torchrec="variable_batch") as ds:
        for epoch in range(2):
            # a pipeline stops for good at its iterator's end: one an epoch
            pipeline = TrainPipelineBase(model, opt, torch.device("cpu"))
            model.seen = []
            it = iter(ds)
            while True:
                try:
                    pipeline.progress(it)
                except StopIteration:
                    break
            ids = torch.cat(model.seen).numpy()
            assert np.array_equal(np.sort(ids), np.arange(ids.min(), ids.min() + ROWS)), epoch
    with pytest.raises(ValueError, match="torchrec='x' is not one of"):
        sluice.Dataset(table, spec, torchrec="x")


def test_master_dataset_form_is_checked():
    with pytest.raises(ValueError, match="MasterDataset: form 'ikjt' is not one of "
                                         "variable_batch, unique"):
        MasterDataset(master="127.0.0.1:1", job="j", rank=0, world_size=1, form="ikjt")
    d = MasterDataset(master="127.0.0.1:1", job="j", rank=0, world_size=1, form="unique",
                      unique_rows=512)
    assert (d.form, d.unique_rows) == ("unique", 512)


def test_resume_tokens_need_every_rank():
    s = {"job": "j", "world_size": 2, "rank": 0, "token": b"a"}
    with pytest.raises(ValueError, match=r"no state for rank\(s\) \[1\]"):
        resume_tokens([s])
    assert resume_tokens([dict(s, rank=1, token=b"b"), s]) == [b"a", b"b"]
    # a state that holds every rank's (state_dict with torch.distributed)
    whole = dict(s, tokens=[b"a", b"b"], pending_by_rank=[[], []])
    assert resume_tokens(whole) == [b"a", b"b"]
    with pytest.raises(ValueError, match="holds rank 0's token only"):
        resume_tokens(s)


RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrec_rank.py")


def run_ranks(master, job, out_dir, phase, steps=-1, extra_steps=0, state=None, lag=0.0,
              world=2):
    """`world` trainer processes (torch.distributed, gloo) each reading its
    rank's share of `job` through MasterDataset and TrainPipelineBase, rank
    1 `lag` seconds behind; state: the file to resume from ("%d": each
    rank's own); returns their result dicts."""
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                   SLUICE_TEST_STORE=os.path.join(out_dir, "%s.store" % phase))
        args = [sys.executable, RANK_SCRIPT, "--master", master, "--job", job,
                "--out", os.path.join(out_dir, "%s.rank%d.pt" % (phase, rank)),
                "--steps", str(steps), "--extra-steps", str(extra_steps),
                "--lag", str(lag if rank == 1 else 0.0)]
        if state:
            args += ["--state", state % rank if "%d" in state else state]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=120 * SCALE)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, "rank %d of %s: %s" % (rank, phase, out)
        results.append(torch.load(os.path.join(out_dir, "%s.rank%d.pt" % (phase, rank)),
                                  weights_only=False))
    return results


def test_master_dataset_two_ranks_exactly_once_and_resume(tmp_path, table):
    master = Master(tmp_path)
    try:
        spec = {"id": "ddp", "source": {"table": table}, "transforms": TRANSFORMS,
                "batch": {"size": 256, "dedup_groups": {"user": USER}}}
        job = master.submit(spec, ranks=2, sharding="static")
        for _ in range(2):
            master.start_worker(job)
        # Phase 1: 10 steps, a checkpoint (state_dict(pending=1): the
        # pipeline holds one batch ahead), 3 more steps, then the trainers
        # stop as if they crashed. Rank 1 runs 2 s behind: its batches are
        # committed after rank 0 took its token, which must not count
        # them (a token says what its own rank handed out) for the resume
        # not to deliver them again.
        first = run_ranks(master.address, job, str(tmp_path), "first", steps=10, extra_steps=3,
                          lag=2.0)
        before = [r["trained_at_checkpoint"] for r in first]
        for r, res in enumerate(first):
            assert res["rank"] == r and res["world_size"] == 2  # from torch.distributed
            assert len(res["trained"]) == 13 and len(res["trained_at_checkpoint"]) == 10
        ids_first = np.concatenate([np.concatenate(r["trained"]) for r in first])
        assert len(np.unique(ids_first)) == ids_first.size  # no sample on both ranks
        # Resume: the job again, from both ranks' tokens, with new workers.
        master.stop_workers()
        master.delete(job)
        tokens = resume_tokens([r["state"] for r in first])
        job = master.submit(spec, ranks=2, sharding="static", tokens=tokens)
        for _ in range(2):
            master.start_worker(job)
        second = run_ranks(master.address, job, str(tmp_path), "second",
                           state=os.path.join(str(tmp_path), "first.rank%d.pt"))
        after = [np.concatenate(r["trained"]) for r in second]
        for r, res in enumerate(second):
            # The batch pending at the checkpoint is trained first.
            pending = first[r]["state"]["pending"]
            assert len(pending) == 1
            assert res["trained"][0].tolist() == pending[0]["sample_ids"].tolist()
        ids = np.concatenate([np.concatenate(b) for b in before] + after)
        lo = ids.min()
        assert np.array_equal(np.sort(ids), np.arange(lo, lo + ROWS)), (
            "%d ids, %d distinct, %d expected" % (ids.size, np.unique(ids).size, ROWS))
    finally:
        master.stop()


DEDUP_RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "torchrec_dedup_rank.py")


@pytest.mark.parametrize("sharding", ["table_wise", "row_wise"])
def test_dedup_ebc_two_ranks_equals_expanded(workers, tmp_path, sharding):
    """DedupEmbeddingBagCollection under DistributedModelParallel (2 CPU
    ranks, gloo, table-wise or row-wise) and TrainPipelineSparseDist, on the
    "unique" form, trains like an EmbeddingBagCollection on the expanded
    batches: every step's logits (forward) and, after the steps, every
    table's shards and the dense weights (backward and update) are equal."""
    saved = {"features": SPARSE, "groups": {"user": USER}, "table_size": TABLE_SIZE,
             "dense_dim": len(DENSE), "unique": [], "expanded": []}
    with client(workers(dedup=True, batch=128)) as c:
        for raw in c:
            # Row-wise over gloo needs the same rows on every rank (to_batch).
            b = to_batch(raw, form="unique",
                         unique_rows=raw.batch_size if sharding == "row_wise" else None)
            if sharding == "table_wise":
                assert b.unique_features["user"].stride() < raw.batch_size
            saved["unique"].append(b.state())
            exp = KeyedJaggedTensor(**_kw(expand_batch(raw, as_torch=True)))
            saved["expanded"].append(Batch(b.dense_features, exp, b.labels, b.sample_ids).state())
            if len(saved["unique"]) == 8:
                break
    path = str(tmp_path / "batches.pt")
    torch.save(saved, path)
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                   SLUICE_TEST_STORE=str(tmp_path / "store"))
        procs.append(subprocess.Popen(
            [sys.executable, DEDUP_RANK_SCRIPT, "--batches", path, "--sharding", sharding,
             "--out", str(tmp_path / ("rank%d.pt" % rank))],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=180 * SCALE)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, "rank %d: %s" % (rank, out)
    results = [torch.load(str(tmp_path / ("rank%d.pt" % r)), weights_only=False)
               for r in range(2)]
    # Table-wise: the ranks' batches have different numbers of unique rows.
    if sharding == "table_wise":
        assert results[0]["unique_rows"] != results[1]["unique_rows"]
    for r, res in enumerate(results):
        got, want = res["unique"], res["expanded"]
        assert len(got["logits"]) == len(want["logits"]) == 4
        for step, (g, w) in enumerate(zip(got["logits"], want["logits"])):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5,
                                       msg=lambda m: "rank %d step %d: %s" % (r, step, m))
        assert sorted(got["state"]) == sorted(want["state"])
        shards = 0
        for name in want["state"]:
            for (go, gt), (wo, wt) in zip(got["state"][name], want["state"][name]):
                assert go == wo, name
                torch.testing.assert_close(gt, wt, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: "rank %d %s: %s" % (r, name, m))
                shards += 1
        assert shards > 0


def test_dedup_ebc_matches_ebc_on_expanded_batch(workers):
    """Unsharded: DedupEmbeddingBagCollection on the "unique" form (with and
    without padding) gives the expanded batch's EmbeddingBagCollection
    output, key by key, and the same table gradients."""
    from sluice.torchrec import DedupEmbeddingBagCollection

    # Tables out of group order, one of them shared by two plain features,
    # so that the output's key order is the tables' and not the inner
    # collections'.
    tables = [
        EmbeddingBagConfig(name="t_user_cat", embedding_dim=3, num_embeddings=TABLE_SIZE,
                           feature_names=["user_cat"]),
        EmbeddingBagConfig(name="t_items", embedding_dim=4, num_embeddings=TABLE_SIZE,
                           feature_names=["item_id", "item_cat"]),
        EmbeddingBagConfig(name="t_user", embedding_dim=2, num_embeddings=TABLE_SIZE,
                           feature_names=["user_id", "user_hist"]),
        EmbeddingBagConfig(name="t_item_tags", embedding_dim=4, num_embeddings=TABLE_SIZE,
                           feature_names=["item_tags"]),
    ]
    keys = ["user_cat", "item_id", "item_cat", "user_id", "user_hist", "item_tags"]
    with client(workers(dedup=True)) as c:
        raw = c.next()
        B = raw.batch_size
        for rows in (None, B):
            b = to_batch(raw, form="unique", unique_rows=rows)
            U = raw.group("user").unique.stride
            assert U < B
            assert b.sparse_features.keys() == raw.sparse.keys
            assert b.unique_features["user"].stride() == (rows or U)
            assert b.inverse_indices["user"].tolist() == raw.group("user").inverse.tolist()
            torch.manual_seed(3)
            ref = EmbeddingBagCollection(tables=tables)
            dd = DedupEmbeddingBagCollection(tables, {"user": USER})
            assert dd.plain is not None and list(dd.unique) == ["user"]
            w = {n.split(".")[-2]: p for n, p in ref.named_parameters()}
            with torch.no_grad():
                for n, p in dd.named_parameters():
                    p.copy_(w[n.split(".")[-2]])
            exp = KeyedJaggedTensor(**_kw(expand_batch(raw, as_torch=True)))
            got, want = dd(b.sparse_features, b.unique_features, b.inverse_indices), ref(exp)
            assert got.keys() == want.keys() == keys
            assert got.values().shape == (B, 3 + 4 + 4 + 2 + 2 + 4)
            torch.testing.assert_close(got.values(), want.values())
            g = torch.randn(got.values().shape, generator=torch.Generator().manual_seed(2))
            (got.values() * g).sum().backward()
            (want.values() * g).sum().backward()
            gw = {n.split(".")[-2]: p.grad for n, p in dd.named_parameters()}
            for name, p in w.items():
                torch.testing.assert_close(gw[name], p.grad, rtol=1e-4, atol=1e-5)
            back = Batch.from_state(b.state())
            assert back.unique_features["user"].stride() == (rows or U)
            assert torch.equal(back.inverse_indices["user"], b.inverse_indices["user"])
            assert torch.equal(back.unique_features["user"].lengths(),
                               b.unique_features["user"].lengths())
        with pytest.raises(ValueError, match="unique_rows=3, but group 'user' of this batch "
                                             "has %d unique rows" % U):
            to_batch(raw, form="unique", unique_rows=3)
        with pytest.raises(ValueError, match="form 'unique_rows' is not one of"):
            to_batch(raw, form="unique_rows")
        with pytest.raises(KeyError, match="no dedup group 'item' in its unique form "
                                           r"\(groups: user\)"):
            to_batch(raw, form="unique").unique_features["item"]
        with pytest.raises(KeyError, match=r"no dedup group 'user' .*\(groups: none\)"):
            to_batch(raw).inverse_indices["user"]
    with pytest.raises(ValueError, match="table 'mixed' has features in different dedup groups"):
        DedupEmbeddingBagCollection(
            [EmbeddingBagConfig(name="mixed", embedding_dim=2, num_embeddings=4,
                                feature_names=["user_id", "item_id"])], {"user": USER})


def test_master_dataset_resume_with_another_world_size(tmp_path, table):
    """Two DDP ranks (dynamic sharding, rank 1 2 s behind, no barrier) take
    a checkpoint at step 10 and run 3 steps more; the job is resumed from
    rank 0's state alone (it holds every rank's token and pending batch)
    with three ranks: the old ranks' pending batches are trained first by
    new ranks 0 and 1, and the samples trained before the checkpoint plus
    those trained after are the table, each once."""
    master = Master(tmp_path)
    try:
        spec = {"id": "resize", "source": {"table": table}, "transforms": TRANSFORMS,
                "batch": {"size": 256, "dedup_groups": {"user": USER}}}
        job = master.submit(spec, ranks=2, sharding="dynamic")
        for _ in range(2):
            master.start_worker(job)
        first = run_ranks(master.address, job, str(tmp_path), "first", steps=10, extra_steps=3,
                          lag=2.0)
        state = first[0]["state"]
        assert state["version"] == 2 and state["step"] == 10
        assert len(state["tokens"]) == 2 and len(state["pending_by_rank"]) == 2
        assert state["tokens"][1] == first[1]["state"]["token"]
        before = [r["trained_at_checkpoint"] for r in first]
        master.stop_workers()
        master.delete(job)
        job = master.submit(spec, ranks=3, sharding="dynamic", tokens=resume_tokens(state))
        for _ in range(2):
            master.start_worker(job)
        state_file = os.path.join(str(tmp_path), "first.rank0.pt")
        second = run_ranks(master.address, job, str(tmp_path), "second", state=state_file,
                           world=3)
        for r, res in enumerate(second):
            pending = state["pending_by_rank"][r] if r < 2 else []
            for k, p in enumerate(pending):
                assert res["trained"][k].tolist() == p["sample_ids"].tolist()
        after = [np.concatenate(r["trained"]) for r in second if r["trained"]]
        ids = np.concatenate([np.concatenate(b) for b in before] + after)
        lo = ids.min()
        assert np.array_equal(np.sort(ids), np.arange(lo, lo + ROWS)), (
            "%d ids, %d distinct, %d expected" % (ids.size, np.unique(ids).size, ROWS))
    finally:
        master.stop()


def test_master_dataset_deterministic_order_resumes_the_same_sequence_with_three_ranks(
        tmp_path, table):
    """A job in the deterministic order (docs/DESIGN.md "A deterministic
    order", *Resume*) read by MasterDataset on DDP ranks: an uninterrupted
    reference run with 2 ranks gives the global sequence (each rank's
    batches by their order_g: rank r gets g = r, r + 2, ..., every g once).
    Then the same job again, 2 ranks checkpointed at step 10 (state_dict,
    one batch pending) that run 3 steps more and stop; resumed from rank
    0's state with 3 ranks: the pending batches are trained first (with
    their first run's g), then new rank r gets g' = r, r + 3, ... of the
    continued sequence. What was handed out before the checkpoint (trained
    and pending), by g, followed by the continued sequence, by g', is the
    reference, batch by batch, every sample once."""
    master = Master(tmp_path)
    try:
        spec = {"id": "det", "source": {"table": table}, "transforms": TRANSFORMS,
                "order": "deterministic",
                "batch": {"size": 256, "dedup_groups": {"user": USER}}}

        def read_all(job, phase, world, state=None):
            for _ in range(2):
                master.start_worker(job)
            res = run_ranks(master.address, job, str(tmp_path), phase, state=state, world=world)
            master.stop_workers()
            master.delete(job)
            return res

        def by_g(ranks, world, replayed=()):
            """{g: sample ids} of the ranks' trained batches past the first
            replayed[r] of rank r, each rank's g's r, r + world, ... in order."""
            seq = {}
            for r, res in enumerate(ranks):
                skip = replayed[r] if r < len(replayed) else 0
                gs = res["trained_g"][skip:]
                assert gs == list(range(r, r + world * len(gs), world)), (r, gs)
                for g, ids in zip(gs, res["trained"][skip:]):
                    seq[g] = ids.tolist()
            return seq

        job = master.submit(spec, ranks=2, sharding="dynamic")
        ref = read_all(job, "ref", 2)
        reference = by_g(ref, 2)
        total = len(reference)
        assert sorted(reference) == list(range(total))
        # 5 splits of the table's stripes (4 of 4096 rows, 1 of 3616),
        # each batched from its first row: 4 x 16 + 15 batches.
        assert total == 79
        ids = np.concatenate([reference[g] for g in range(total)])
        assert np.array_equal(np.sort(ids), np.arange(ids.min(), ids.min() + ROWS))

        job = master.submit(spec, ranks=2, sharding="dynamic")
        for _ in range(2):
            master.start_worker(job)
        first = run_ranks(master.address, job, str(tmp_path), "first", steps=10, extra_steps=3)
        master.stop_workers()
        master.delete(job)
        state = first[0]["state"]
        handed = {}  # g: ids of every batch handed out before the checkpoint
        for r, res in enumerate(first):
            gs = res["trained_g_at_checkpoint"]
            assert gs == list(range(r, r + 2 * 10, 2)), (r, gs)
            for g, ids in zip(gs, res["trained_at_checkpoint"]):
                handed[g] = ids.tolist()
            pending = state["pending_by_rank"][r]
            assert [p["order_g"] for p in pending] == [r + 2 * 10]
            handed[pending[0]["order_g"]] = pending[0]["sample_ids"].tolist()
        assert sorted(handed) == list(range(22))
        for g, ids in handed.items():
            assert ids == reference[g], "batch g=%d of the first run is not the reference's" % g

        job = master.submit(spec, ranks=3, sharding="dynamic", tokens=resume_tokens(state))
        second = read_all(job, "second", 3, state=os.path.join(str(tmp_path), "first.rank0.pt"))
        # new ranks 0 and 1 train old ranks 0 and 1's pending batch first
        for r in range(2):
            assert second[r]["trained_g"][0] == r + 20
            assert second[r]["trained"][0].tolist() == handed[r + 20]
        continued = by_g(second, 3, replayed=(1, 1))
        assert sorted(continued) == list(range(total - 22))
        for k in range(total - 22):
            assert continued[k] == reference[22 + k], (
                "continued batch g'=%d is not reference batch g=%d" % (k, 22 + k))
        trained = [np.concatenate(r["trained_at_checkpoint"]) for r in first]
        trained += [np.concatenate(r["trained"]) for r in second]
        ids = np.concatenate(trained)
        assert np.array_equal(np.sort(ids), np.arange(ids.min(), ids.min() + ROWS)), (
            "%d ids, %d distinct, %d expected" % (ids.size, np.unique(ids).size, ROWS))
    finally:
        master.stop()


def test_load_state_dict_redistributes_pending_batches_to_another_world_size():
    """A state holding every rank's pending batches (state_dict with
    torch.distributed) restores on any world size: old rank r's batches go
    to new rank r % world_size, each once; a state of one rank restores
    only that rank of the same world size."""
    whole = {"version": 2, "master": "m:1", "job": "j", "rank": 0, "world_size": 3,
             "step": 7, "token": b"t0", "pending": [{"b": 0}],
             "tokens": [b"t0", b"t1", b"t2"],
             "pending_by_rank": [[{"b": 0}], [{"b": 1}], [{"b": 2}, {"b": 3}]]}
    got = []
    for rank in range(2):
        d = MasterDataset("m:1", "j", rank=rank, world_size=2)
        d.load_state_dict(whole)
        got.append(d._replay)
    assert got == [[{"b": 0}, {"b": 2}, {"b": 3}], [{"b": 1}]]
    one = MasterDataset("m:1", "j", rank=0, world_size=1)
    one.load_state_dict(whole)
    assert one._replay == [{"b": 0}, {"b": 1}, {"b": 2}, {"b": 3}]
    same = MasterDataset("m:1", "j", rank=2, world_size=3)
    same.load_state_dict(dict(whole, rank=2, pending=[{"b": 2}, {"b": 3}]))
    assert same._replay == [{"b": 2}, {"b": 3}]
    # version 1 (one rank's own state): same world size and rank only
    v1 = {"version": 1, "master": "m:1", "job": "j", "rank": 0, "world_size": 2,
          "token": b"t", "pending": [{"b": 9}]}
    d = MasterDataset("m:1", "j", rank=0, world_size=2)
    d.load_state_dict(v1)
    assert d._replay == [{"b": 9}]
    with pytest.raises(ValueError, match="must hold every rank's"):
        MasterDataset("m:1", "j", rank=0, world_size=3).load_state_dict(v1)
    with pytest.raises(ValueError, match="state of job 'j', this is job 'k'"):
        MasterDataset("m:1", "k", rank=0, world_size=2).load_state_dict(v1)
