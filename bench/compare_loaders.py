#!/usr/bin/python3
"""The same Criteo preprocessing job done three ways; samples/s of each and
sluice's ratio to the other two.

  1. sluice: a `sluice worker` (one transform thread per core) serving the
     job, received by the Python client as torch tensors (dense, labels and
     KJT keyword arguments, sharing the C buffers).
  2. PyTorch DataLoader over Criteo TSV (the same rows, `sluice table cat`
     converted to TSV, one shard per loader worker), num_workers = cores,
     parsing every line in Python as TorchRec's TSV datapipe does, then the
     same transforms in numpy and the same KJT tensors.
  3. TorchRec's in-memory binary path, emulated: the rows pre-converted to
     numpy arrays (as its npy preprocessing does), sliced per batch,
     transforms in numpy, KJT tensors built; one core.

The job: fill_missing 0 + log1p on I1..I13 (TorchRec's Criteo preprocessing
also sets missing values to 0 before log), sigrid_hash into --table-size
rows on C1..C26, batches of --batch. sigrid_hash is XXH3_64(id, salt) %
table_size in sluice; the Python paths APPROXIMATE it with a vectorised
numpy 64-bit mixer (splitmix64's finaliser) + modulo - the same amount of
work per id, not the same ids.

    /usr/bin/python3 bench/compare_loaders.py --sluice build/sluice [--rows 1000000]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import sluice  # noqa: E402

DENSE = ["I%d" % i for i in range(1, 14)]
SPARSE = ["C%d" % i for i in range(1, 27)]
SALT = 0


def mix_hash(ids, table_size):
    """The numpy stand-in for sigrid_hash: splitmix64's finaliser on the id
    (xor salt), then % table_size. uint64 arithmetic wraps, as in C."""
    z = ids.astype(np.uint64) ^ np.uint64(SALT)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(table_size)).astype(np.int64)


def to_batch(dense, labels, sparse, table_size):
    """numpy rows -> the dict of torch tensors the sluice path yields.
    dense float32 [n, 13] (NaN = missing), labels float32 [n], sparse int64
    [n, 26] (-1 = empty list)."""
    d = np.log1p(np.maximum(np.nan_to_num(dense, nan=0.0), 0.0))
    st = sparse.T  # key-major, as a KJT wants
    mask = st >= 0
    lengths = mask.astype(np.int32).reshape(-1)
    values = mix_hash(st[mask], table_size)
    return {
        "dense": torch.from_numpy(d),
        "labels": torch.from_numpy(labels),
        "sparse": {
            "keys": SPARSE,
            "values": torch.from_numpy(values),
            "lengths": torch.from_numpy(lengths),
            "weights": None,
            "stride": dense.shape[0],
        },
    }


# ---- 2. TSV through a DataLoader --------------------------------------------------------


class TsvDataset(torch.utils.data.IterableDataset):
    """Criteo TSV shards; loader worker i reads shard i (of as many shards as
    workers). Every line is parsed in Python, field by field."""

    def __init__(self, shards, batch, table_size):
        super().__init__()
        self.shards, self.batch, self.table_size = shards, batch, table_size

    def _rows(self, path):
        with open(path) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                yield (
                    float(fields[0]),
                    [float(x) if x else np.nan for x in fields[1:14]],
                    [int(x, 16) if x else -1 for x in fields[14:40]],
                )

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        shards = self.shards if info is None else self.shards[info.id :: info.num_workers]
        for path in shards:
            lab, den, spa = [], [], []
            for l, d, s in self._rows(path):
                lab.append(l)
                den.append(d)
                spa.append(s)
                if len(lab) == self.batch:
                    yield self._make(lab, den, spa)
                    lab, den, spa = [], [], []
            if lab:
                yield self._make(lab, den, spa)

    def _make(self, lab, den, spa):
        return to_batch(
            np.array(den, dtype=np.float32),
            np.array(lab, dtype=np.float32),
            np.array(spa, dtype=np.int64),
            self.table_size,
        )


# ---- data preparation (not timed) -----------------------------------------------------


def start_worker(binary, spec, tmp, name, threads):
    """A `sluice worker` for spec; returns (process, address)."""
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    p = subprocess.Popen([binary, "worker", "--job", path, "--listen", "127.0.0.1:0",
                          "--threads", str(threads)], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if "listening on" in line:
            # Keep draining its output so that the worker never blocks on it.
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, line.split("listening on", 1)[1].split()[0]
    raise SystemExit("sluice worker exited (%s) before listening" % p.wait())


def load_rows(binary, table, rows, tmp, threads):
    """The table's rows as numpy arrays, in sample id order, received from a
    worker running a job without transforms (parsing `sluice table cat`'s
    JSON in Python takes ~40 s per million rows; this takes a few)."""
    dense = np.full((rows, 13), np.nan, dtype=np.float32)
    sparse = np.full((rows, 26), -1, dtype=np.int64)
    labels = np.zeros(rows, dtype=np.float32)
    spec = {"id": "criteo-raw", "source": {"table": table}, "batch": {"size": 8192}}
    p, addr = start_worker(binary, spec, tmp, "raw", threads)
    n = 0
    try:
        with sluice.Client(addr, prefetch=8) as c:
            for b in c:
                with b:
                    ids = b.sample_ids
                    if ids.min() < 0 or ids.max() >= rows:
                        raise SystemExit("sample id out of range: the table is not %d rows" % rows)
                    dcol = [b.dense_names.index(k) for k in DENSE]
                    dense[ids] = b.dense[:, dcol]
                    lab = b.labels
                    labels[ids] = lab[:, b.label_names.index("label")]
                    kjt = b.sparse
                    lengths = kjt.lengths_2d()
                    if lengths.max(initial=0) > 1:
                        raise SystemExit("a Criteo feature with more than one id")
                    offs = kjt.offsets()[:-1].reshape(lengths.shape)
                    for f, k in enumerate(kjt.keys):
                        has = lengths[f] == 1
                        sparse[ids[has], SPARSE.index(k)] = kjt.values[offs[f][has]]
                    n += b.batch_size
    finally:
        p.terminate()
        p.wait()
    if n != rows:
        raise SystemExit("the raw job delivered %d rows of %d" % (n, rows))
    return dense, labels, sparse


def write_tsv(path, dense, labels, sparse):
    with open(path, "w") as f:
        for i in range(labels.size):
            d = ["" if np.isnan(x) else "%d" % x for x in dense[i].tolist()]
            s = ["" if x < 0 else "%x" % x for x in sparse[i].tolist()]
            f.write("%d\t%s\t%s\n" % (labels[i], "\t".join(d), "\t".join(s)))


# ---- the three runs ---------------------------------------------------------------------


def run_sluice(binary, table, batch, table_size, threads, tmp):
    transforms = []
    for f in DENSE:
        transforms.append({"op": "fill_missing", "feature": f, "value": 0})
        transforms.append({"op": "log1p", "feature": f})
    for f in SPARSE:
        transforms.append({"op": "sigrid_hash", "feature": f, "table_size": table_size,
                           "salt": SALT})
    spec = {"id": "criteo-bench", "source": {"table": table}, "transforms": transforms,
            "batch": {"size": batch}}
    p, addr = start_worker(binary, spec, tmp, "job", threads)
    try:
        samples = 0
        t0 = time.perf_counter()
        with sluice.Client(addr, prefetch=8) as c:
            for b in c:
                with b:
                    t = b.torch()
                    samples += t["batch_size"]
                    del t
            st = c.stats()
        secs = time.perf_counter() - t0
    finally:
        p.terminate()
        p.wait()
    return samples, secs, st


def run_tsv(shards, batch, table_size, workers):
    ds = TsvDataset(shards, batch, table_size)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                         prefetch_factor=4 if workers else 2)
    samples = 0
    t0 = time.perf_counter()
    for b in loader:
        samples += b["dense"].shape[0]
    return samples, time.perf_counter() - t0


def run_inmem(dense, labels, sparse, batch, table_size):
    samples = 0
    t0 = time.perf_counter()
    for s in range(0, labels.size, batch):
        b = to_batch(dense[s : s + batch], labels[s : s + batch], sparse[s : s + batch], table_size)
        samples += b["dense"].shape[0]
    return samples, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", required=True, help="the sluice program")
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--tsv-rows", type=int, default=0,
                    help="rows read by the TSV DataLoader path (default: all; it is the slow one)")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--table-size", type=int, default=10000000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="sluice transform threads and DataLoader workers (default: cores)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(prefix="sluice-cmp-") as tmp:
        table = os.path.join(tmp, "criteo")
        t0 = time.perf_counter()
        subprocess.run([a.sluice, "table", "gen", "--preset", "criteo", "--rows", str(a.rows),
                        "--table", table, "--seed", str(a.seed), "--files", str(a.workers),
                        "--no-sync", "--quiet"], check=True)
        dense, labels, sparse = load_rows(a.sluice, table, a.rows, tmp, a.workers)
        tsv_rows = a.tsv_rows or a.rows
        per = -(-tsv_rows // a.workers)
        shards = [os.path.join(tmp, "day_%d.tsv" % w) for w in range(a.workers)]
        # One writer process per shard (forked: they inherit the arrays).
        procs = []
        for w, path in enumerate(shards):
            lo, hi = w * per, min(tsv_rows, (w + 1) * per)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    write_tsv(path, dense[lo:hi], labels[lo:hi], sparse[lo:hi])
                    code = 0
                finally:
                    os._exit(code)
            procs.append(pid)
        for pid in procs:
            if os.waitpid(pid, 0)[1] != 0:
                raise SystemExit("writing the TSV shards failed")
        tsv_bytes = sum(os.path.getsize(s) for s in shards)
        print("criteo: %d rows (seed %d), TSV %d rows in %d shards (%.1f MiB); prepared in %.1f s"
              % (a.rows, a.seed, tsv_rows, len(shards), tsv_bytes / 2**20, time.perf_counter() - t0))
        print("job: fill_missing 0 + log1p x13 dense, sigrid_hash %% %d x26 sparse, batch %d; "
              "%d cores" % (a.table_size, a.batch, os.cpu_count() or 1))

        n1, s1, st = run_sluice(a.sluice, table, a.batch, a.table_size, a.workers, tmp)
        r1 = n1 / s1
        print("1. sluice worker (%d threads) + Python client: %9d samples %6.2f s %10.0f samples/s"
              "  (%.1f MiB received, waited %.2f s)" % (a.workers, n1, s1, r1, st["bytes"] / 2**20,
                                                      st["wait_ns"] / 1e9))
        n2, s2 = run_tsv(shards, a.batch, a.table_size, a.workers)
        r2 = n2 / s2
        print("2. DataLoader over TSV (%d workers):           %9d samples %6.2f s %10.0f samples/s"
              % (a.workers, n2, s2, r2))
        n3, s3 = run_inmem(dense, labels, sparse, a.batch, a.table_size)
        r3 = n3 / s3
        print("3. in-memory numpy arrays (1 core):            %9d samples %6.2f s %10.0f samples/s"
              % (n3, s3, r3))
        print("sluice / TSV DataLoader: %.2fx   sluice / in-memory: %.2fx" % (r1 / r2, r1 / r3))
        if n1 != a.rows or n2 != tsv_rows or n3 != a.rows:
            raise SystemExit("sample counts differ from the rows: %d %d %d" % (n1, n2, n3))


if __name__ == "__main__":
    main()
