#!/usr/bin/python3
"""Train a small DLRM-style model on CPU from sluice workers, twice: once on
IKJTs (the user features of a session deduplicated: embedding lookups and
pooling on the unique rows only, expanded to the batch with the inverse
indices, as RecD does) and once on plain, expanded KJTs from the same table.
Prints samples/s of both runs and the loss at intervals.

    # generate a sessions table and start the two workers itself:
    /usr/bin/python3 examples/train_dlrm.py --sluice build/sluice
    # or train from workers already running (the second one optional: without
    # it the IKJT run's batches are expanded on the client for the KJT run):
    /usr/bin/python3 examples/train_dlrm.py --worker 127.0.0.1:7077 --worker-plain 127.0.0.1:7078

Needs the sluice package (python/) and libsluice_trainer.so (env
SLUICE_TRAINER_LIB, or build/ of this repository).

Note on the loss: the sessions preset of `sluice table gen` draws the click
label (about 10 % positives) with a probability that depends on the
category features (user_cat, item_cat, item_tags: each category id has a
hidden propensity). Predicting the base rate alone gives the label's entropy
(~0.34, printed at the end); a model below it has learnt from the features.
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
from sluice.torch import expand_batch  # noqa: E402

DENSE = ["user_age", "user_clicks", "item_clicks", "position"]
# Embedding table rows per sparse feature (ids hashed into them by the job).
TABLES = {
    "user_id": 200000,
    "user_hist": 100000,
    "user_cat": 1000,
    "item_id": 100000,
    "item_cat": 1000,
    "item_tags": 10000,
}
USER = ["user_id", "user_hist", "user_cat"]


def job_spec(table, batch, dedup):
    transforms = [{"op": "fill_missing", "feature": "user_age", "value": 0}]
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


class DLRM(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.keys = list(TABLES)
        self.emb = nn.ModuleDict(
            {k: nn.EmbeddingBag(n, dim, mode="mean") for k, n in TABLES.items()}
        )
        self.bottom = nn.Sequential(nn.Linear(len(DENSE), 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        n = len(TABLES) + 1
        self.pairs = torch.triu_indices(n, n, offset=1)
        self.top = nn.Sequential(
            nn.Linear(dim + self.pairs.shape[1], 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def _pool(self, keys, values, lengths, stride):
        """{key: pooled [stride, dim]} for a KJT's tensors (key-major)."""
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
        B = dense.shape[0]
        pooled = self._pool(*kjt, B)
        for keys, values, lengths, U, inverse in groups:
            for k, e in self._pool(keys, values, lengths, U).items():
                pooled[k] = e.index_select(0, inverse)
        x = self.bottom(dense)
        feats = torch.stack([x] + [pooled[k] for k in self.keys], dim=1)  # [B, F+1, dim]
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def batches_ikjt(client):
    for b in client:
        with b:
            t = b.torch()
            g = b.group("user")
            inv = torch.from_numpy(g.inverse.astype(np.int64))
            gk = t["groups"]["user"]
            yield (
                t["dense"],
                t["labels"][:, 0],
                (t["sparse"]["keys"], t["sparse"]["values"], t["sparse"]["lengths"]),
                [(gk["keys"], gk["values"], gk["lengths"], gk["stride"], inv)],
            )
            del t, gk


def batches_kjt(client, expand):
    for b in client:
        with b:
            t = b.torch(expand=expand) if expand else b.torch()
            s = t["sparse"]
            yield t["dense"], t["labels"][:, 0], (s["keys"], s["values"], s["lengths"]), []
            del t, s


def train(name, source, steps, log_every, seed, lr):
    torch.manual_seed(seed)
    model = DLRM()
    sparse_params = [p for n, p in model.named_parameters() if n.startswith("emb.")]
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    opt_sparse = torch.optim.SGD(sparse_params, lr=lr * 10)
    opt_dense = torch.optim.Adam(dense_params, lr=lr)
    lossf = nn.BCEWithLogitsLoss()
    losses, samples = [], 0
    t0 = time.perf_counter()
    for step, (dense, label, kjt, groups) in enumerate(source):
        if step >= steps:
            break
        loss = lossf(model(dense, kjt, groups), label)
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
        loss.backward()
        opt_sparse.step()
        opt_dense.step()
        losses.append(loss.item())
        samples += dense.shape[0]
        if (step + 1) % log_every == 0:
            print("  %-5s step %4d  loss %.4f (avg of last %d)  %.0f samples/s" % (
                name, step + 1, np.mean(losses[-log_every:]), log_every,
                samples / (time.perf_counter() - t0)))
    secs = time.perf_counter() - t0
    return {"steps": len(losses), "samples": samples, "secs": secs, "losses": losses}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", help="the sluice program: generate a table and start workers")
    ap.add_argument("--worker", help="address of a worker serving the job with dedup group 'user'")
    ap.add_argument("--worker-plain", help="address of a worker serving the job without dedup")
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = ap.parse_args()
    if not a.sluice and not a.worker:
        ap.error("give --sluice BINARY or --worker ADDR")
    if a.threads:
        torch.set_num_threads(a.threads)

    procs = []
    tmp = tempfile.TemporaryDirectory(prefix="sluice-dlrm-")
    try:
        if a.sluice:
            table = os.path.join(tmp.name, "sessions")
            t0 = time.perf_counter()
            subprocess.run(
                [a.sluice, "table", "gen", "--preset", "sessions", "--rows", str(a.rows),
                 "--table", table, "--seed", "7", "--cluster", "--no-sync", "--quiet"],
                check=True,
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
            r_ikjt = train("ikjt", batches_ikjt(c), a.steps, a.log_every, a.seed, a.lr)
            st = c.stats()
        print("KJT run: every row's features looked up and pooled")
        with sluice.Client(a.worker_plain or a.worker, prefetch=8) as c2:
            if a.worker_plain:
                src = batches_kjt(c2, expand=False)
            else:
                # The same worker's job is used up: a second epoch would be needed;
                # expanding on the client still shows the lookup cost.
                src = batches_kjt(c2, expand=True)
            r_kjt = train("kjt", src, a.steps, a.log_every, a.seed, a.lr)

        p = 0.1
        floor = -(p * math.log(p) + (1 - p) * math.log(1 - p))
        print()
        for name, r in (("ikjt", r_ikjt), ("kjt", r_kjt)):
            n = max(1, min(20, r["steps"] // 4))
            print("%-5s %4d steps %8d samples %6.1f s  %8.0f samples/s  loss first %d: %.4f  last %d: %.4f" % (
                name, r["steps"], r["samples"], r["secs"], r["samples"] / r["secs"],
                n, np.mean(r["losses"][:n]), n, np.mean(r["losses"][-n:])))
        print("ikjt / kjt throughput: %.2fx" % (
            (r_ikjt["samples"] / r_ikjt["secs"]) / (r_kjt["samples"] / r_kjt["secs"])))
        print("received by the IKJT client: %d batches, %.1f MiB, waited %.2f s for data" % (
            st["batches"], st["bytes"] / 2**20, st["wait_ns"] / 1e9))
        print("base-rate loss (entropy of the click rate, what a model that ignores the"
              " features reaches): %.4f" % floor)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        tmp.cleanup()


if __name__ == "__main__":
    main()
