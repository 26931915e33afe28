#!/usr/bin/python3
"""Train a small DLRM-style model on CPU from sluice workers, twice: once on
IKJTs (the user features of a session deduplicated: embedding lookups and
pooling on the unique rows only, expanded to the batch with the inverse
indices, as RecD does) and once on plain, expanded KJTs from the same table.
Prints samples/s of both runs, the loss at intervals, and the final loss
against the base rate.

    # generate a sessions table and start the two workers itself:
    /usr/bin/python3 examples/train_dlrm.py --sluice build/sluice
    # with TorchRec (EmbeddingBagCollection, TrainPipelineSparseDist):
    "$(ops/torchrec-venv)/bin/python" examples/train_dlrm.py --sluice build/sluice
    # or train from workers already running (the second one optional: without
    # it the IKJT run's batches are expanded on the client for the KJT run):
    /usr/bin/python3 examples/train_dlrm.py --worker 127.0.0.1:7077 --worker-plain 127.0.0.1:7078

With TorchRec importable (--torchrec auto, the default) the embeddings are
one torchrec EmbeddingBagCollection, sharded by DistributedModelParallel on
one CPU rank with a fused row-wise Adagrad and fed sluice.torchrec.Batch by
TrainPipelineSparseDist: the IKJT run gives it one variable-batch
KeyedJaggedTensor per batch (the plain features and the dedup group merged;
the embedding kernel pools each unique row once and expands with the
inverse indices). Without TorchRec the same model uses torch.nn.EmbeddingBag
per feature with Adagrad (Debian's python3-torch).

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
            t = b.torch(expand=expand)
            s = t["sparse"]
            groups = []
            for g in ([] if expand else b.groups):
                gk = t["groups"][g.name]
                inv = torch.from_numpy(g.inverse.astype(np.int64))
                groups.append((gk["keys"], gk["values"], gk["lengths"], gk["stride"], inv))
            yield t["dense"], t["labels"][:, 0], (s["keys"], s["values"], s["lengths"]), groups
            del t, s, groups


def train_plain(name, client, expand, steps, log_every, seed, lr):
    torch.manual_seed(seed)
    model = PlainDLRM()
    emb = model.embedding_parameters()
    opt_sparse = torch.optim.Adagrad(emb, lr=lr * 30)
    opt_dense = torch.optim.Adam(model.dense_arch.parameters(), lr=lr)
    lossf = nn.BCEWithLogitsLoss()
    log = Log(name, log_every)
    for step, (dense, label, kjt, groups) in enumerate(plain_batches(client, expand)):
        if step >= steps:
            break
        loss = lossf(model(dense, kjt, groups), label)
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
        loss.backward()
        opt_sparse.step()
        opt_dense.step()
        log.step(loss.item(), label)
    return log.result()


def train_torchrec(name, client, expand, steps, log_every, seed, lr):
    """The same model with a torchrec EmbeddingBagCollection, sharded by
    DistributedModelParallel (one CPU rank, gloo) with a fused row-wise
    Adagrad, trained by TrainPipelineSparseDist on sluice.torchrec.Batch."""
    import torch.distributed as dist
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    from sluice.torchrec import batches as torchrec_batches

    torch.manual_seed(seed)

    class TorchrecDLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=[
                EmbeddingBagConfig(name="t_" + k, embedding_dim=DIM, num_embeddings=n,
                                   feature_names=[k], pooling=PoolingType.MEAN)
                for k, n in TABLES.items()
            ])
            self.dense_arch = Interaction(TABLES)
            self.lossf = nn.BCEWithLogitsLoss()

        def forward(self, batch):
            pooled = self.ebc(batch.sparse_features).to_dict()
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
    pipeline = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
    log = Log(name, log_every)
    it = iter(expanded_torchrec_batches(client) if expand else torchrec_batches(client))
    for _ in range(steps):
        try:
            loss, labels = pipeline.progress(it)
        except StopIteration:
            break
        log.step(loss.item(), labels)
    return log.result()


def expanded_torchrec_batches(client):
    """Client-side expansion (no plain worker): a KJT of stride B per batch."""
    from torchrec import KeyedJaggedTensor

    from sluice.torch import expand_batch, kjt_kwargs
    from sluice.torchrec import Batch

    for b in client:
        with b:
            t = b.torch()
            yield Batch(t["dense"], KeyedJaggedTensor(**kjt_kwargs(expand_batch(b, as_torch=True))),
                        t["labels"][:, 0], t["sample_ids"])


class Log:
    """Losses, click rates and samples/s of one run."""

    def __init__(self, name, every):
        self.name, self.every = name, every
        self.losses, self.rates, self.samples = [], [], 0
        self.t0 = time.perf_counter()

    def step(self, loss, labels):
        self.losses.append(loss)
        self.rates.append(float(labels.float().mean()))
        self.samples += int(labels.shape[0])
        n = len(self.losses)
        if n % self.every == 0:
            print("  %-5s step %4d  loss %.4f (avg of last %d)  %.0f samples/s" % (
                self.name, n, np.mean(self.losses[-self.every:]), self.every,
                self.samples / (time.perf_counter() - self.t0)), flush=True)

    def result(self):
        return {"steps": len(self.losses), "samples": self.samples,
                "secs": time.perf_counter() - self.t0, "losses": self.losses, "rates": self.rates}


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
    ap.add_argument("--lr", type=float, default=0.003,
                    help="Adam's for the dense layers; the embeddings' Adagrad takes 30x")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--torchrec", choices=["auto", "yes", "no"], default="auto",
                    help="embeddings in a torchrec EmbeddingBagCollection (auto: when importable)")
    a = ap.parse_args()
    if not a.sluice and not a.worker:
        ap.error("give --sluice BINARY or --worker ADDR")
    if a.threads:
        torch.set_num_threads(a.threads)
    use_torchrec = a.torchrec == "yes" or (a.torchrec == "auto" and have_torchrec())
    train = train_torchrec if use_torchrec else train_plain
    if use_torchrec:
        quiet_torchrec()
    print("embeddings: %s" % (
        "torchrec EmbeddingBagCollection (DistributedModelParallel on CPU, TrainPipelineSparseDist)"
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

        print("IKJT run: user features pooled on unique rows, expanded by inverse indices")
        with sluice.Client(a.worker, prefetch=8) as c:
            r_ikjt = train("ikjt", c, False, a.steps, a.log_every, a.seed, a.lr)
            st = c.stats()
        print("KJT run: every row's features looked up and pooled")
        with sluice.Client(a.worker_plain or a.worker, prefetch=8) as c2:
            # Without a plain worker the same worker's job is used up: a
            # second epoch would be needed; expanding on the client still
            # shows the lookup cost.
            r_kjt = train("kjt", c2, not a.worker_plain, a.steps, a.log_every, a.seed, a.lr)

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
        print("ikjt / kjt throughput: %.2fx" % (
            (r_ikjt["samples"] / r_ikjt["secs"]) / (r_kjt["samples"] / r_kjt["secs"])))
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
