#!/usr/bin/python3
"""Train a small DLRM-style model on CPU from sluice workers, twice: once on
IKJTs (the user features of a session deduplicated: embedding lookups and
pooling on the unique rows only, expanded to the batch with the inverse
indices, as RecD does) and once on plain, expanded KJTs from the same table.
The two runs take turns of --chunk steps, the order swapped every turn.
Prints samples/s of both runs, the loss at intervals, the final loss
against the base rate, and the ratio of the runs' steady-state throughput
(the steps after --warmup).

    # generate a sessions table and start the two workers itself:
    /usr/bin/python3 examples/train_dlrm.py --sluice build/sluice
    # with TorchRec (EmbeddingBagCollection, TrainPipelineSparseDist):
    "$(ops/torchrec-venv)/bin/python" examples/train_dlrm.py --sluice build/sluice
    # or train from workers already running (the second one optional: without
    # it the two runs split the first one's batches, the KJT run expanding
    # its own on the client):
    /usr/bin/python3 examples/train_dlrm.py --worker 127.0.0.1:7077 --worker-plain 127.0.0.1:7078

With TorchRec importable (--torchrec auto, the default) the embeddings are
one torchrec EmbeddingBagCollection, sharded by DistributedModelParallel on
one CPU rank with a fused row-wise Adagrad and fed sluice.torchrec.Batch by
TrainPipelineSparseDist. The IKJT run's embeddings are a
sluice.torchrec.DedupEmbeddingBagCollection of the same tables, fed the
batches' "unique" form: the user tables look up and pool the session
group's unique rows (a KJT of stride U), and the pooled rows are expanded to
the batch by the inverse indices (docs/TRAINER.md, "Dedup groups in
TorchRec"). Without TorchRec the same model uses torch.nn.EmbeddingBag per
feature with Adagrad (Debian's python3-torch), pooling the user features
on the unique rows and expanding them with index_select.

Needs the sluice package (pip install ., or python/ of this checkout) and
libsluice_trainer.so.

What the model can learn, and the base rate. The sessions preset of `sluice
table gen` draws the click label with a probability that depends on the
FIRST id of each category list - user_cat (20 ids per session), item_cat,
item_tags (1-5 ids) - each category id having a hidden propensity
(src/warehouse/gen.c, click_probability). So the job keeps those first ids
(first_x, x=1) and hashes the category features into tables 20x their
vocabulary (few collisions); ids and histories (user_id, user_hist, item_id)
carry no signal. The embeddings start small (TorchRec's default) and learn
with Adagrad (row-wise with TorchRec), the output bias starts at the
nominal click rate.
The base rate printed is the loss of the best constant prediction on the
samples the final loss is measured on: the entropy of their click rate.
That rate is not the preset's nominal 10 %: the propensities of the few most
frequent category ids (ids are Zipf-distributed) do not average out, and
this table's rate is ~10.9 % (entropy ~0.344; the nominal rate's entropy,
0.3251, is below what even the true click probabilities reach on this
table, ~0.330).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import sluice  # noqa: E402
from sluice.torch import batch_to_torch  # noqa: E402

DENSE = ["user_age", "user_clicks", "item_clicks", "position"]
# Embedding table rows per sparse feature (ids hashed into them by the job):
# 20x the vocabulary of the category features, fewer rows than ids for the
# id features (10M users, 1M items: their ids carry no label signal).
TABLES = {
    "user_id": 200000,
    "user_hist": 100000,
    "user_cat": 20000,
    "item_id": 100000,
    "item_cat": 20000,
    "item_tags": 200000,
}
USER = ["user_id", "user_hist", "user_cat"]
NOMINAL_RATE = 0.1  # the sessions preset's positive_rate: the output bias starts there
DIM = 16


def job_spec(table, batch, dedup):
    transforms = [
        # The label depends on the first category of each list (see above).
        {"op": "first_x", "feature": "user_cat", "x": 1},
        {"op": "first_x", "feature": "item_tags", "x": 1},
        {"op": "fill_missing", "feature": "user_age", "value": 0},
    ]
    transforms += [{"op": "log1p", "feature": f} for f in DENSE]
    transforms += [
        {"op": "sigrid_hash", "feature": f, "table_size": n, "salt": 7} for f, n in TABLES.items()
    ]
    spec = {
        "id": "dlrm-" + ("ikjt" if dedup else "kjt"),
        "source": {"table": table, "features": DENSE + list(TABLES)},
        "transforms": transforms,
        "batch": {"size": batch, "drop_last": True},
    }
    if dedup:
        spec["batch"]["dedup_groups"] = {"user": USER}
    return spec


def start_worker(binary, spec_path):
    p = subprocess.Popen(
        [binary, "worker", "--job", spec_path, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True,
    )
    for line in p.stdout:
        if "listening on" in line:
            # Keep draining its output so that the worker never blocks on it.
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, line.split("listening on", 1)[1].split()[0]
    p.wait()
    raise SystemExit("worker exited (%d) before listening" % p.returncode)


class Interaction(nn.Module):
    """DLRM's dense part: bottom MLP on the dense features, pairwise dot
    products of it and every pooled embedding, top MLP to one logit."""

    def __init__(self, keys):
        super().__init__()
        self.keys = list(keys)
        self.bottom = nn.Sequential(nn.Linear(len(DENSE), 64), nn.ReLU(), nn.Linear(64, DIM), nn.ReLU())
        n = len(self.keys) + 1
        self.pairs = torch.triu_indices(n, n, offset=1)
        self.top = nn.Sequential(nn.Linear(DIM + self.pairs.shape[1], 64), nn.ReLU(), nn.Linear(64, 1))
        nn.init.constant_(self.top[-1].bias, math.log(NOMINAL_RATE / (1 - NOMINAL_RATE)))

    def forward(self, dense, pooled):
        """pooled: {key: [B, DIM]} -> logits [B]."""
        x = self.bottom(dense)
        feats = torch.stack([x] + [pooled[k] for k in self.keys], dim=1)  # [B, F+1, DIM]
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def small_init(weight):
    """TorchRec's default embedding init: U(-sqrt(1/n), sqrt(1/n))."""
    b = math.sqrt(1.0 / weight.shape[0])
    nn.init.uniform_(weight, -b, b)


class PlainDLRM(nn.Module):
    """Embeddings as one torch.nn.EmbeddingBag per feature (no TorchRec)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.ModuleDict(
            {k: nn.EmbeddingBag(n, DIM, mode="mean", sparse=True) for k, n in TABLES.items()}
        )
        for e in self.emb.values():
            small_init(e.weight)
        self.dense_arch = Interaction(TABLES)

    def embedding_parameters(self):
        return list(self.emb.parameters())

    def _pool(self, keys, values, lengths, stride):
        """{key: pooled [stride, DIM]} for a KJT's tensors (key-major)."""
        out = {}
        lengths = lengths.view(len(keys), stride).to(torch.int64)
        per_key = lengths.sum(dim=1).tolist()
        start = 0
        for f, k in enumerate(keys):
            vals = values[start : start + per_key[f]]
            start += per_key[f]
            offsets = torch.zeros(stride, dtype=torch.int64)
            torch.cumsum(lengths[f, :-1], dim=0, out=offsets[1:])
            out[k] = self.emb[k](vals, offsets)
        return out

    def forward(self, dense, kjt, groups=()):
        """kjt: (keys, values, lengths) over B rows; groups: (keys, values,
        lengths, U, inverse[B]) each - pooled over the U unique rows, then
        expanded to B rows by indexing with the inverse indices."""
        pooled = self._pool(*kjt, dense.shape[0])
        for keys, values, lengths, U, inverse in groups:
            for k, e in self._pool(keys, values, lengths, U).items():
                pooled[k] = e.index_select(0, inverse)
        return self.dense_arch(dense, pooled)


def plain_batches(client, expand):
    """(dense, labels, kjt, groups, B) per batch for PlainDLRM."""
    for b in client:
        with b:
            t = batch_to_torch(b, expand=expand)
            s = t["sparse"]
            groups = []
            for g in ([] if expand else b.groups):
                gk = t["groups"][g.name]
                inv = torch.from_numpy(g.inverse.astype(np.int64))
                groups.append((gk["keys"], gk["values"], gk["lengths"], gk["stride"], inv))
            yield t["dense"], t["labels"][:, 0], (s["keys"], s["values"], s["lengths"]), groups
            del t, s, groups


class PlainTrainer:
    """PlainDLRM with sparse Adagrad on the embeddings, Adam on the rest;
    step() trains one batch of the client and returns (loss, labels)."""

    def __init__(self, name, client, expand, dedup, seed, lr):
        self.name = name
        torch.manual_seed(seed)
        self.model = PlainDLRM()
        self.opt_sparse = torch.optim.Adagrad(self.model.embedding_parameters(), lr=lr * 30)
        self.opt_dense = torch.optim.Adam(self.model.dense_arch.parameters(), lr=lr)
        self.lossf = nn.BCEWithLogitsLoss()
        self.it = plain_batches(client, expand)

    def step(self):
        dense, label, kjt, groups = next(self.it)
        loss = self.lossf(self.model(dense, kjt, groups), label)
        self.opt_sparse.zero_grad()
        self.opt_dense.zero_grad()
        loss.backward()
        self.opt_sparse.step()
        self.opt_dense.step()
        return loss.item(), label


class TorchrecTrainer:
    """The same model with TorchRec embeddings, sharded by
    DistributedModelParallel (one CPU rank, gloo) with a fused row-wise
    Adagrad, trained by TrainPipelineSparseDist on sluice.torchrec.Batch.
    On deduplicated batches (the IKJT run) the embeddings are a
    sluice.torchrec.DedupEmbeddingBagCollection fed the batches' "unique"
    form: the user tables look up and pool the U unique rows of the
    session group, then the pooled rows are expanded to the B batch rows
    by the inverse indices (RecD's IKJTs). On the plain batches (the KJT
    run) an EmbeddingBagCollection of the same tables."""

    def __init__(self, name, client, expand, dedup, seed, lr):
        import torch.distributed as dist
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
        from torchrec.distributed import DistributedModelParallel
        from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
        from torchrec.optim.keyed import KeyedOptimizerWrapper
        from torchrec.optim.optimizers import in_backward_optimizer_filter
        from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

        from sluice.torchrec import DedupEmbeddingBagCollection
        from sluice.torchrec import batches as torchrec_batches

        self.name = name
        torch.manual_seed(seed)
        tables = [EmbeddingBagConfig(name="t_" + k, embedding_dim=DIM, num_embeddings=n,
                                     feature_names=[k], pooling=PoolingType.MEAN)
                  for k, n in TABLES.items()]

        class TorchrecDLRM(nn.Module):
            def __init__(self):
                super().__init__()
                if dedup:
                    self.ebc = DedupEmbeddingBagCollection(tables, groups={"user": USER})
                else:
                    self.ebc = EmbeddingBagCollection(tables=tables)
                self.dense_arch = Interaction(TABLES)
                self.lossf = nn.BCEWithLogitsLoss()

            def forward(self, batch):
                if dedup:
                    pooled = self.ebc(batch.sparse_features, batch.unique_features,
                                      batch.inverse_indices)
                else:
                    pooled = self.ebc(batch.sparse_features)
                pooled = pooled.to_dict()
                loss = self.lossf(self.dense_arch(batch.dense_features, pooled), batch.labels)
                return loss, (loss.detach(), batch.labels)

        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        model = TorchrecDLRM()
        # Row-wise Adagrad fused into the embedding kernels' backward (fbgemm),
        # as TorchRec trains embeddings; Adam for the dense layers.
        apply_optimizer_in_backward(RowWiseAdagrad, model.ebc.parameters(), {"lr": lr * 30})
        dmp = DistributedModelParallel(model, device=torch.device("cpu"))
        opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                    lambda params: torch.optim.Adam(params, lr=lr))
        self.pipeline = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
        if expand:
            self.it = iter(expanded_torchrec_batches(client))
        else:
            self.it = iter(torchrec_batches(client, form="unique" if dedup else "variable_batch"))

    def step(self):
        loss, labels = self.pipeline.progress(self.it)
        return loss.item(), labels


def train(trainers, steps, chunk, warmup, log_every):
    """Train the runs in turns of `chunk` steps, the order of the runs
    swapped every turn (so neither always runs first, on a warmer cache or
    a quieter machine); each run's time is its own steps' only. Steps from
    `warmup` on count for the steady state. Returns {name: Log.result()}."""
    logs = {t.name: Log(t.name, log_every) for t in trainers}
    active = list(trainers)
    turn = 0
    while active:
        for t in (active if turn % 2 == 0 else active[::-1]):
            log = logs[t.name]
            t0 = time.perf_counter()
            try:
                for _ in range(chunk):
                    if len(log.losses) >= steps:
                        break
                    loss, labels = t.step()
                    log.step(loss, labels, time.perf_counter() - t0, warmup)
                    t0 = time.perf_counter()
            except StopIteration:
                log.done = True
            if log.done or len(log.losses) >= steps:
                active.remove(t)
        turn += 1
    return {n: log.result() for n, log in logs.items()}


def expanded_torchrec_batches(client):
    """Client-side expansion (no plain worker): a KJT of stride B per batch."""
    from torchrec import KeyedJaggedTensor

    from sluice.torch import expand_batch, kjt_kwargs
    from sluice.torchrec import Batch

    for b in client:
        with b:
            t = batch_to_torch(b)
            yield Batch(t["dense"], KeyedJaggedTensor(**kjt_kwargs(expand_batch(b, as_torch=True))),
                        t["labels"][:, 0], t["sample_ids"])


class Log:
    """Losses, click rates and samples/s of one run: its time is the sum of
    its own steps' (the runs take turns), and from step `warmup` on also
    counted for the steady state."""

    def __init__(self, name, every):
        self.name, self.every = name, every
        self.losses, self.rates, self.samples = [], [], 0
        self.secs = 0.0
        self.steady_samples, self.steady_secs = 0, 0.0
        self.done = False

    def step(self, loss, labels, secs, warmup):
        n = len(self.losses)
        self.losses.append(loss)
        self.rates.append(float(labels.float().mean()))
        self.samples += int(labels.shape[0])
        self.secs += secs
        if n >= warmup:
            self.steady_samples += int(labels.shape[0])
            self.steady_secs += secs
        if (n + 1) % self.every == 0:
            print("  %-5s step %4d  loss %.4f (avg of last %d)  %.0f samples/s" % (
                self.name, n + 1, np.mean(self.losses[-self.every:]), self.every,
                self.samples / self.secs), flush=True)

    def result(self):
        return {"steps": len(self.losses), "samples": self.samples, "secs": self.secs,
                "steady": self.steady_samples / self.steady_secs if self.steady_secs else 0.0,
                "losses": self.losses, "rates": self.rates}


def entropy(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0


def quiet_torchrec():
    """One CPU rank: TorchRec's planner and DMP warn about a topology meant
    for GPU clusters; keep the example's output readable."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    for name in ("torchrec", "torch.fx", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)


def have_torchrec():
    try:
        import sluice.torchrec  # noqa: F401  (imports torchrec, fbgemm)

        return True
    except Exception:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", help="the sluice program: generate a table and start workers")
    ap.add_argument("--worker", help="address of a worker serving the job with dedup group 'user'")
    ap.add_argument("--worker-plain", help="address of a worker serving the job without dedup")
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--chunk", type=int, default=25,
                    help="steps of one run before the other takes its turn")
    ap.add_argument("--warmup", type=int, default=25,
                    help="first steps of each run left out of the steady-state throughput")
    ap.add_argument("--lr", type=float, default=0.003,
                    help="Adam's for the dense layers; the embeddings' Adagrad takes 30x")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (0: torch's default, one per core). 1 by default: the "
                         "runs' ratio is what this example measures, and on a machine whose "
                         "cores are shared torch's threads wait for each other (one run of "
                         "300 steps took 64 s instead of 8 with 2 threads on a loaded 2-core "
                         "machine)")
    ap.add_argument("--torchrec", choices=["auto", "yes", "no"], default="auto",
                    help="embeddings in a torchrec EmbeddingBagCollection (auto: when importable)")
    a = ap.parse_args()
    if not a.sluice and not a.worker:
        ap.error("give --sluice BINARY or --worker ADDR")
    if a.threads:
        torch.set_num_threads(a.threads)
    use_torchrec = a.torchrec == "yes" or (a.torchrec == "auto" and have_torchrec())
    Trainer = TorchrecTrainer if use_torchrec else PlainTrainer
    if use_torchrec:
        quiet_torchrec()
    print("embeddings: %s" % (
        "torchrec EmbeddingBagCollection (DistributedModelParallel on CPU, TrainPipelineSparseDist; "
        "the IKJT run's a sluice.torchrec.DedupEmbeddingBagCollection)"
        if use_torchrec else "torch.nn.EmbeddingBag per feature (no torchrec)"))

    procs = []
    tmp = tempfile.TemporaryDirectory(prefix="sluice-dlrm-")
    try:
        if a.sluice:
            table = os.path.join(tmp.name, "sessions")
            t0 = time.perf_counter()
            subprocess.run(
                [a.sluice, "table", "gen", "--preset", "sessions", "--rows", str(a.rows),
                 "--table", table, "--seed", "7", "--cluster", "--no-sync", "--quiet"],
                check=True, stdout=subprocess.DEVNULL,
            )
            print("generated %d sessions rows in %.1f s (clustered by session)" % (
                a.rows, time.perf_counter() - t0))
            addrs = {}
            for dedup in (True, False):
                path = os.path.join(tmp.name, "job-%s.json" % ("dedup" if dedup else "plain"))
                with open(path, "w") as f:
                    json.dump(job_spec(table, a.batch, dedup), f, indent=1)
                p, addr = start_worker(a.sluice, path)
                procs.append(p)
                addrs[dedup] = addr
            a.worker, a.worker_plain = addrs[True], addrs[False]

        print("two runs, in turns of %d steps, the order swapped every turn:" % a.chunk)
        print("  ikjt: user features pooled on unique rows, expanded by inverse indices")
        print("  kjt:  every row's features looked up and pooled")
        # Without a plain worker both runs read the one worker, which
        # splits its batches between them; the KJT run expands its
        # batches on the client.
        with sluice.Client(a.worker, prefetch=8) as c, \
                sluice.Client(a.worker_plain or a.worker, prefetch=8) as c2:
            trainers = [Trainer("ikjt", c, False, True, a.seed, a.lr),
                        Trainer("kjt", c2, not a.worker_plain, False, a.seed, a.lr)]
            res = train(trainers, a.steps, a.chunk, a.warmup, a.log_every)
            st = c.stats()
        r_ikjt, r_kjt = res["ikjt"], res["kjt"]

        print()
        for name, r in (("ikjt", r_ikjt), ("kjt", r_kjt)):
            n = max(1, min(20, r["steps"] // 4))
            final = np.mean(r["losses"][-n:])
            # The best constant prediction on those samples: their click rate.
            base = entropy(float(np.mean(r["rates"][-n:])))
            print("%-5s %4d steps %8d samples %6.1f s  %8.0f samples/s  loss first %d: %.4f  "
                  "last %d: %.4f  base rate %.4f: %s" % (
                      name, r["steps"], r["samples"], r["secs"], r["samples"] / r["secs"],
                      n, np.mean(r["losses"][:n]), n, final, base,
                      "learned (%.4f below)" % (base - final) if final < base else "NOT below"))
        if r_ikjt["steady"] and r_kjt["steady"]:
            print("ikjt / kjt throughput, steady state (steps after the first %d): %.2fx "
                  "(%.0f / %.0f samples/s; all steps: %.2fx)" % (
                      a.warmup, r_ikjt["steady"] / r_kjt["steady"], r_ikjt["steady"],
                      r_kjt["steady"], (r_ikjt["samples"] / r_ikjt["secs"])
                      / (r_kjt["samples"] / r_kjt["secs"])))
        print("received by the IKJT client: %d batches, %.1f MiB, waited %.2f s for data" % (
            st["batches"], st["bytes"] / 2**20, st["wait_ns"] / 1e9))
        print("base rate: the loss of predicting the click rate of the last batches "
              "(%.3f) for every sample; a model below it has learnt from the features"
              % float(np.mean(r_ikjt["rates"][-max(1, min(20, r_ikjt["steps"] // 4)):])))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        tmp.cleanup()


if __name__ == "__main__":
    main()
