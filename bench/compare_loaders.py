#!/usr/bin/python3
"""The same Criteo preprocessing job done by sluice and by the loaders
trainers use today, rounds interleaved; per round and peer the samples/s,
the CPU time per sample and sluice's ratio to the peer.

The peers (--peers, all by default; one Python process per peer and round,
so that one peer's threads, caches and daemons never run during another's):

  sluice       a `sluice worker` (--workers transform threads) reading the
               table, received by the Python client as torch tensors
  dataloader   PyTorch DataLoader over TSV, one shard and one loader worker
               process per --workers, every line parsed in Python (as
               TorchRec's TSV datapipe does), numpy transforms
  tf-tsv       tf.data over the same TSV: a TextLineDataset per file under
               interleave(num_parallel_calls=AUTOTUNE), batch, a map
               (AUTOTUNE) of batched tf.io.decode_csv and the transforms in
               TF ops, prefetch(AUTOTUNE); TF tensors
  tf-tfrecord  tf.data over TFRecord files (one tf.train.Example per row,
               uncompressed): a TFRecordDataset per file under the same
               interleave, batch, a map of tf.io.parse_example and the
               transforms, prefetch
  ray          Ray Data: read_parquet of Parquet + zstd files, map_batches of
               the transforms (numpy, on pyarrow batches),
               iter_torch_batches, the KJT built in the trainer loop
  numpy        TorchRec's in-memory path: the rows as .npy arrays loaded into
               memory before timing, sliced per batch, numpy transforms, KJT
               tensors built; one core
  sluice-alt   added by --alt-sluice / --alt-worker-args: the sluice peer
               with another program or worker arguments, for before/after
               pairs in one run (its ratio is to the sluice peer)
  sluice-parquet  the sluice peer's worker reading the Parquet + zstd
               files the ray peer reads, in place (source.parquet, the
               columns mapped label, I1..I13 dense, C1..C26 sparse);
               not in the default --peers (bench/ray_parquet.py runs it
               against ray, --reference sluice-parquet)

tf-* need tensorflow, ray needs ray and pyarrow, sluice-parquet pyarrow (to
write the files): a peer whose package is
missing is skipped with a message. ops/bench-venv builds an environment with
all of them:  "$(ops/bench-venv)/bin/python" bench/compare_loaders.py ...

The job, identical bits in every peer: fill_missing 0 + log1p(max(x, 0)) on
I1..I13; sigrid_hash, XXH3_64(8 LE bytes of the id, salt) % --table-size, on
C1..C26 (the numpy and TF peers compute the same 8-byte XXH3 as sluice);
batches of --batch; handed to a Python loop as dense float32 [B, 13],
labels [B] and KJT tensors (keys, int64 values key-major, int32 lengths).
Criteo's TSV has hex ids; ours are decimal, which decode_csv parses natively
(the DataLoader's int() costs the same either way).

Each round runs every peer once, in an order rotated per round. A peer's
process runs two epochs: a warm-up (page cache, Ray's workers, TF's kernels)
whose loop takes a digest of every tensor it is handed (per row a hash of
the label and the 26 ids, summed: exact and order-free; per dense column
the sum and the sum of squares, within 1e-6 since log1p may differ by an
ulp), which must equal sluice's or the script fails; then the timed epoch,
whose loop counts samples. The timed epoch starts with the peer's
per-epoch work (sluice: starting the worker process; DataLoader: forking
its workers; Ray: executing the dataset) and ends with the last batch;
what a training run does once (imports, tracing the tf.data graph,
ray.init) is outside it. CPU time is that of the peer's whole process tree
(threads, loader workers, the sluice worker, Ray's raylet and workers),
from /proc; "others" is what the rest of the machine used meanwhile, in
cores. The sluice peer's CPU is also split into its worker process and the
trainer process (the Python loop, the client library). After the summary:
the memcpy limit (a copy of the 368 bytes of one sample's tensors, in this
process) next to sluice's CPU per sample, and issue 15's target (sluice's
CPU per sample <= the numpy path's / 1.5) with its verdict.

    /usr/bin/python3 bench/compare_loaders.py --sluice build/sluice [--rows 1000000]

--shape movielens runs the replicated real-rows shape instead (sluice and
numpy only): the MovieLens ratings of ../shared/data (GroupLens terms:
research use, see its README.txt) turned into samples by
examples/movielens_sessions.py and copied --copies times as new users, as
bench_table_read --movielens does; the table is imported as
examples/movielens.sh does (--cluster --dedup-group history=user_history),
the numpy arrays are built from the same samples in Python. The job is
examples/jobs/movielens.json's transforms (first_x 50 on user_history,
sigrid_hash of movie, user_id and user_history) without its dedup groups
and shuffle; the digest hashes each row's two labels and three id lists
(ids with their positions). Each peer also prints the minor page faults
of its process tree per timed epoch.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

try:  # required, but checked in main() so that its absence is said plainly
    import torch
except ImportError:
    torch = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

DENSE = ["I%d" % i for i in range(1, 14)]
SPARSE = ["C%d" % i for i in range(1, 27)]
SALT = 0
TENSOR_BYTES = 13 * 4 + 4 + 26 * (8 + 4)  # one sample's tensors, every id present
RESULT = "compare_loaders-result "
HERE = os.path.dirname(os.path.abspath(__file__))
# The replicated real-rows shape (--shape movielens): examples/jobs/movielens.json's
# transforms (first_x 50 on the history, sigrid_hash of the three features)
# without its dedup groups and shuffle, so that both sides hand the trainer
# the same plain KJT.
ML_RATINGS = os.path.join(HERE, "..", "..", "shared", "data", "movielens-latest-small",
                          "ratings.csv")
ML_SPARSE = ["movie", "user_id", "user_history"]
ML_LABELS = ["liked", "rating"]
ML_HASH = {"movie": 100000, "user_id": 10000, "user_history": 100000}
ML_FIRST_X = 50

# name, description (%d: --workers), modules it needs beyond numpy and torch
PEERS = [
    ("sluice", "sluice worker (%d threads) + Python client", []),
    ("dataloader", "PyTorch DataLoader on TSV, %d worker processes", []),
    ("tf-tsv", "tf.data on TSV, batched decode_csv", ["tensorflow"]),
    ("tf-tfrecord", "tf.data on TFRecord, batched parse_example", ["tensorflow"]),
    ("ray", "Ray Data on Parquet + zstd, map_batches", ["ray", "pyarrow"]),
    ("numpy", "in-memory numpy arrays, 1 core", []),
    ("sluice-alt", "sluice worker (%d threads), --alt-sluice / --alt-worker-args", []),
    ("sluice-parquet", "sluice worker (%d threads) on Parquet + zstd in place + Python client",
     ["pyarrow"]),
]
# sluice-parquet's column mapping (docs/PARQUET.md): the files write_shard writes
PARQUET_COLUMNS = {"labels": ["label"], "dense": DENSE, "sparse": SPARSE, "infer": False}

# ---- sigrid_hash: XXH3_64bits_withSeed of an 8-byte id ----------------------------------
# XXH3_len_4to8_64b of the frozen XXH3 spec, as sluice's transform_sparse.c
# writes it out: the id's 32-bit halves swapped, xored with a key that
# depends on the seed (bytes 8..23 of XXH3's default secret), then rrmxmx.
SECRET_8, SECRET_16 = 0x1CAD21F72C81017C, 0xDB979083E96DD4DE
MASK64 = (1 << 64) - 1
PRIME_MX2 = 0x9FB21C651E98DF25


def xxh3_key(seed):
    lo = seed & 0xFFFFFFFF
    swapped = int.from_bytes(lo.to_bytes(4, "little"), "big")
    return ((SECRET_8 ^ SECRET_16) - ((seed ^ (swapped << 32)) & MASK64)) & MASK64


def sigrid_hash_np(ids, table_size, salt=SALT):
    """ids int64 -> XXH3_64(id, salt) % table_size, int64, computed in place
    in ids (callers pass a fresh array: st[mask] is one). In place, with one
    scratch array, it takes half the time of the same expression written
    with temporaries; the % (a 64-bit division per id) is about half of it."""
    u = np.uint64
    h = ids.view(np.uint64)
    t = h >> u(32)
    h <<= u(32)
    h |= t  # the 32-bit halves swapped
    h ^= u(xxh3_key(salt))
    r = h << u(49)
    np.right_shift(h, u(15), out=t)
    r |= t
    np.left_shift(h, u(24), out=t)
    r ^= t
    np.right_shift(h, u(40), out=t)
    r ^= t
    h ^= r
    h *= u(PRIME_MX2)
    np.right_shift(h, u(35), out=t)
    t += u(8)
    h ^= t
    h *= u(PRIME_MX2)
    np.right_shift(h, u(28), out=t)
    h ^= t
    h %= u(table_size)
    return ids


def sigrid_hash_tf(tf, ids, table_size, salt=SALT):
    """The same in TF ops (uint64 arithmetic wraps, as in C)."""
    b, c = tf.bitwise, lambda v: tf.constant(v, tf.uint64)
    rotl = lambda x, r: b.bitwise_or(b.left_shift(x, c(r)), b.right_shift(x, c(64 - r)))
    h = rotl(tf.bitcast(ids, tf.uint64), 32)
    h = b.bitwise_xor(h, c(xxh3_key(salt)))
    h = b.bitwise_xor(h, b.bitwise_xor(rotl(h, 49), rotl(h, 24)))
    h = h * c(PRIME_MX2)
    h = b.bitwise_xor(h, b.right_shift(h, c(35)) + c(8))
    h = h * c(PRIME_MX2)
    h = b.bitwise_xor(h, b.right_shift(h, c(28)))
    return tf.bitcast(tf.math.floormod(h, c(table_size)), tf.int64)


# ---- the job in numpy (dataloader, numpy, ray) ------------------------------------------


def dense_np(dense):
    """fill_missing 0 + log1p(max(x, 0)), float32."""
    return np.log1p(np.maximum(np.nan_to_num(dense, nan=0.0), 0.0))


def to_batch(dense, labels, sparse, table_size):
    """numpy rows -> the dict of torch tensors the sluice path yields.
    dense float32 [n, 13] (NaN = missing), labels float32 [n], sparse int64
    [n, 26] (-1 = empty list)."""
    st = sparse.T  # key-major, as a KJT wants
    mask = st >= 0
    return {
        "dense": torch.from_numpy(dense_np(dense)),
        "labels": torch.from_numpy(labels),
        "sparse": {
            "keys": SPARSE,
            "values": torch.from_numpy(sigrid_hash_np(st[mask], table_size)),
            "lengths": torch.from_numpy(mask.astype(np.int32).reshape(-1)),
            "weights": None,
            "stride": dense.shape[0],
        },
    }


# ---- verification: a digest of every delivered tensor -----------------------------------


def mix64(z):
    """splitmix64's finaliser on a uint64 array (wrapping)."""
    u = np.uint64
    z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
    return z ^ (z >> u(31))


class Digest:
    """Order-free digest of a stream of batches: per row a hash of its label
    and its 26 ids (or their absence) in feature order, summed mod 2^64;
    per dense column the float64 sum and sum of squares."""

    def __init__(self):
        self.rows = 0
        self.row_sum = np.uint64(0)
        self.nonempty = np.zeros(len(SPARSE), np.int64)
        self.dsum = np.zeros(len(DENSE))
        self.dsq = np.zeros(len(DENSE))

    def add(self, b):
        dense = np.asarray(b["dense"])
        if "dense_names" in b:  # sluice: the table's column order
            dense = dense[:, [b["dense_names"].index(k) for k in DENSE]]
        labels = np.asarray(b["labels"])
        if labels.ndim == 2:
            labels = labels[:, b["label_names"].index("label")]
        sp = b["sparse"]
        n = dense.shape[0]
        lengths = np.asarray(sp["lengths"]).reshape(len(sp["keys"]), n)
        if lengths.max(initial=0) > 1 or lengths.min(initial=0) < 0:
            raise SystemExit("verify: a Criteo feature with a list length other than 0 or 1")
        ids = np.full(lengths.shape, -1, np.int64)
        ids[lengths == 1] = np.asarray(sp["values"])  # key-major, one id per non-empty list
        ids = ids[[list(sp["keys"]).index(k) for k in SPARSE]]
        u = np.uint64
        h = mix64(labels.astype(np.float64).view(np.uint64))
        for f in range(len(SPARSE)):
            h = mix64(h ^ ids[f].view(np.uint64) ^ u((f + 1) << 56))
        with np.errstate(over="ignore"):
            self.row_sum = self.row_sum + h.sum(dtype=np.uint64)
        self.rows += n
        self.nonempty += (lengths == 1).sum(axis=1)[[list(sp["keys"]).index(k) for k in SPARSE]]
        d = dense.astype(np.float64)
        self.dsum += d.sum(axis=0)
        self.dsq += (d * d).sum(axis=0)

    def to_json(self):
        return {"rows": self.rows, "row_hash": "%016x" % int(self.row_sum),
                "nonempty": self.nonempty.tolist(), "dense_sum": self.dsum.tolist(),
                "dense_sq": self.dsq.tolist()}


def digest_mismatch(ref, got):
    """None when got matches ref, else what differs: sums of floats within
    1e-6, everything else exactly."""
    for k in ref:
        if k in ("dense_sum", "dense_sq", "label_sum"):
            if not np.allclose(got[k], ref[k], rtol=1e-6, atol=1e-6):
                return "%s: %s, sluice %s" % (k, got[k], ref[k])
        elif ref[k] != got[k]:
            return "%s: %s, sluice %s" % (k, got[k], ref[k])
    return None


# ---- CPU accounting from /proc ----------------------------------------------------------


def tree_ticks(root, first=11, end=15):
    """utime + stime + cutime + cstime of root and all its descendants,
    in clock ticks (first, end: other fields of /proc/PID/stat counted
    after the command, e.g. 7, 9: minor page faults, own and of reaped
    children). A process that exits in between is counted by its
    parent's cutime/cstime once reaped (DataLoader workers, the sluice
    worker)."""
    parent, ticks = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = s[s.rindex(")") + 2 :].split()
        parent[int(d)] = int(fields[1])
        ticks[int(d)] = sum(int(x) for x in fields[first:end])
    total, todo = 0, [root]
    children = {}
    for p, pp in parent.items():
        children.setdefault(pp, []).append(p)
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def own_ticks():
    """utime + stime of this process alone (the trainer's own loop), in
    clock ticks: the sluice peer's remainder is its worker process."""
    with open("/proc/self/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def memcpy_limit_ns(rows, nbytes=TENSOR_BYTES, reps=5):
    """ns per sample of copying the bytes one sample's tensors take (dense
    13 x 4, label 4, 26 ids x (8 + 4 length bytes): 368) from memory to
    memory in this process, best of reps: the physical limit any loader's
    CPU per sample is compared with."""
    n = int(rows * nbytes)
    src = np.ones(n, dtype=np.uint8)
    dst = np.empty_like(src)
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        t = time.perf_counter() - t0
        best = t if best is None or t < best else best
    return best / rows * 1e9


def machine_busy_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - v[3] - v[4]  # all but idle and iowait


# ---- data preparation (not timed) -------------------------------------------------------


def start_worker(binary, spec, tmp, name, threads, memory_limit=None, extra=()):
    """A `sluice worker` for spec; returns (process, address)."""
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    extra = (["--memory-limit", memory_limit] if memory_limit else []) + list(extra)
    p = subprocess.Popen([binary, "worker", "--job", path, "--listen", "127.0.0.1:0",
                          "--threads", str(threads)] + extra, stdout=subprocess.PIPE, text=True)
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
    import sluice

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


FORMATS = ["parquet", "tfrecord", "tsv"]


def shard_paths(data, fmt, workers):
    # The Parquet files in a folder of their own: sluice-parquet's dataset.
    d = os.path.join(data, "parquet") if fmt == "parquet" else data
    return [os.path.join(d, "part-%d.%s" % (w, fmt)) for w in range(workers)]


def shard_rows(data, shard, workers):
    """Rows [lo, hi) of shard `shard` of `workers`, memory-mapped."""
    dense, labels, sparse = (np.load(os.path.join(data, n + ".npy"), mmap_mode="r")
                             for n in ("dense", "labels", "sparse"))
    per = -(-labels.size // workers)
    lo, hi = shard * per, min(labels.size, (shard + 1) * per)
    return dense[lo:hi], labels[lo:hi], sparse[lo:hi]


def write_shard(fmt, data, shard, workers):
    """One input file of a peer (run in a child process per shard)."""
    dense, labels, sparse = shard_rows(data, shard, workers)
    path = shard_paths(data, fmt, workers)[shard]
    if fmt == "tsv":
        with open(path, "w") as f:
            for d, lab, s in zip(dense.tolist(), labels.tolist(), sparse.tolist()):
                f.write("%d\t%s\t%s\n" % (lab, "\t".join("" if x != x else "%.9g" % x for x in d),
                                          "\t".join("" if x < 0 else "%d" % x for x in s)))
    elif fmt == "tfrecord":
        import tensorflow as tf

        feat, fl, il = tf.train.Feature, tf.train.FloatList, tf.train.Int64List
        with tf.io.TFRecordWriter(path) as w:
            for d, lab, s in zip(dense.tolist(), labels.tolist(), sparse.tolist()):
                f = {"label": feat(float_list=fl(value=[lab]))}
                f.update((k, feat(float_list=fl(value=[x]))) for k, x in zip(DENSE, d) if x == x)
                f.update((k, feat(int64_list=il(value=[x]))) for k, x in zip(SPARSE, s) if x >= 0)
                w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        os.makedirs(os.path.dirname(path), exist_ok=True)
        cols = {"label": pa.array(labels)}
        for j, k in enumerate(DENSE):
            cols[k] = pa.array(dense[:, j], mask=np.isnan(dense[:, j]))
        for j, k in enumerate(SPARSE):
            cols[k] = pa.array(sparse[:, j], mask=sparse[:, j] < 0)
        pq.write_table(pa.table(cols), path, compression="zstd")


# ---- the replicated real-rows shape (--shape movielens) --------------------------------
# The MovieLens ratings of ../shared/data (GroupLens terms: research use;
# its README.txt) as examples/movielens_sessions.py turns them into samples,
# copied --copies times as new users, as bench_table_read --movielens does
# (bench/bench_util.c): copy k shifts sample and session ids past the
# earlier copies, user ids by k x (largest + 1) and timestamps by k weeks;
# movies, histories and ratings are the real ones.


def ml_base(ratings):
    """The real samples, once: a list of dicts (movielens_sessions.py)."""
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import movielens_sessions

    return list(movielens_sessions.samples(movielens_sessions.read_ratings(ratings), 1800.0, 100))


def ml_prepare(a, peers):
    """The jsonl, the sluice table (imported as examples/movielens.sh does:
    --cluster --dedup-group history=user_history) and the numpy peer's
    arrays, built from the samples here, not read back through sluice.
    Returns (rows, bytes of one sample's tensors on average)."""
    base = ml_base(a.ratings)
    n = len(base)
    sess = max(r["session_id"] for r in base) + 1
    users = max(r["sparse"]["user_id"][0] for r in base) + 1
    jsonl = os.path.join(a.data, "ml.jsonl")
    with open(jsonl, "w") as f:
        for k in range(a.copies):
            for r in base:
                c = dict(r)
                c["sample_id"] = r["sample_id"] + k * n
                c["session_id"] = r["session_id"] + k * sess
                c["ts"] = r["ts"] + k * 604800
                sp = dict(r["sparse"])
                sp["user_id"] = [u + k * users for u in sp["user_id"]]
                c["sparse"] = sp
                f.write(json.dumps(c, separators=(",", ":")) + "\n")
    subprocess.run([a.sluice, "table", "import", "--format", "jsonl", "--input", jsonl,
                    "--table", os.path.join(a.data, "table"), "--partition", "ds=2016-10-16",
                    "--cluster", "--dedup-group", "history=user_history", "--quiet"], check=True)
    os.unlink(jsonl)
    rows = n * a.copies
    labels = np.array([[r["labels"]["liked"], r["labels"]["rating"]] for r in base], np.float32)
    np.save(os.path.join(a.data, "ml_labels.npy"), np.tile(labels, (a.copies, 1)))
    kept = 0
    for f in ML_SPARSE:
        lens = np.array([len(r["sparse"][f]) for r in base], np.int32)
        vals = np.array([v for r in base for v in r["sparse"][f]], np.int64)
        shift = np.repeat(np.arange(a.copies, dtype=np.int64) * users, vals.size)
        allv = np.tile(vals, a.copies) + (shift if f == "user_id" else 0)
        np.save(os.path.join(a.data, "ml_%s_len.npy" % f), np.tile(lens, a.copies))
        np.save(os.path.join(a.data, "ml_%s_val.npy" % f), allv)
        kept += int(np.minimum(lens, ML_FIRST_X if f == "user_history" else lens).sum()) * a.copies
    return rows, 4 * len(ML_LABELS) + 4 * len(ML_SPARSE) + 8 * kept / rows


def ml_transforms():
    return ([{"op": "first_x", "feature": "user_history", "x": ML_FIRST_X}] +
            [{"op": "sigrid_hash", "feature": f, "table_size": ML_HASH[f], "salt": SALT}
             for f in ML_SPARSE])


def peer_numpy_ml(a):
    """The in-memory path for the real rows: labels [n, 2] and per feature
    lengths and values (row order) loaded before timing; per batch the
    values sliced, the history cut to its first 50 ids, the three features'
    values concatenated key-major (the KJT's values, a new array) and hashed
    in place."""
    labels = np.load(os.path.join(a.data, "ml_labels.npy"))
    feats = []
    for f in ML_SPARSE:
        lens = np.load(os.path.join(a.data, "ml_%s_len.npy" % f))
        offs = np.zeros(lens.size + 1, np.int64)
        np.cumsum(lens, out=offs[1:])
        feats.append((f, lens, np.load(os.path.join(a.data, "ml_%s_val.npy" % f)), offs))

    def epoch():
        for s in range(0, labels.shape[0], a.batch):
            e = min(labels.shape[0], s + a.batch)
            parts, lens = [], []
            for f, ln, val, offs in feats:
                l, v = ln[s:e], val[offs[s] : offs[e]]
                if f == "user_history":
                    pos = np.arange(v.size) - np.repeat(offs[s:e] - offs[s], l)
                    v = v[pos < ML_FIRST_X]
                    l = np.minimum(l, ML_FIRST_X)
                parts.append(v)
                lens.append(l)
            values = np.concatenate(parts)
            at = 0
            for (f, _, _, _), v in zip(feats, parts):
                sigrid_hash_np(values[at : at + v.size], ML_HASH[f])
                at += v.size
            yield {"dense": None, "labels": torch.from_numpy(labels[s:e]),
                   "sparse": {"keys": ML_SPARSE, "values": torch.from_numpy(values),
                              "lengths": torch.from_numpy(np.concatenate(lens)),
                              "weights": None, "stride": e - s}}

    return epoch, None


class MlDigest:
    """Order-free digest of the real rows' batches: per row a hash of its
    two labels and, per feature in ML_SPARSE order, its list (each id
    hashed with its position, summed, then mixed with the length), summed
    mod 2^64 over rows; the ids per feature and the labels' sums."""

    def __init__(self):
        self.rows = 0
        self.row_sum = np.uint64(0)
        self.ids = np.zeros(len(ML_SPARSE), np.int64)
        self.lsum = np.zeros(len(ML_LABELS))

    def add(self, b):
        u = np.uint64
        labels = np.asarray(b["labels"])
        if "label_names" in b:  # sluice: the table's label order
            labels = labels[:, [b["label_names"].index(k) for k in ML_LABELS]]
        sp = b["sparse"]
        keys, n = list(sp["keys"]), int(sp["stride"])
        lengths = np.asarray(sp["lengths"]).astype(np.int64).reshape(len(keys), n)
        values = np.asarray(sp["values"]).view(np.uint64)
        offs = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths.reshape(-1), out=offs[1:])
        h = mix64(labels[:, 0].astype(np.float64).view(np.uint64))
        h = mix64(h ^ labels[:, 1].astype(np.float64).view(np.uint64))
        for fi, f in enumerate(ML_SPARSE):
            k = keys.index(f)
            ln, starts = lengths[k], offs[k * n : (k + 1) * n] - offs[k * n]
            v = values[offs[k * n] : offs[(k + 1) * n]]
            pos = (np.arange(v.size) - np.repeat(starts, ln)).astype(np.uint64)
            e = mix64(v ^ (pos << u(40)) ^ u((fi + 1) << 56))
            cs = np.zeros(v.size + 1, np.uint64)
            np.cumsum(e, out=cs[1:])
            seg = cs[starts + ln] - cs[starts]  # wraps mod 2^64, as the sum does
            h = mix64(h ^ mix64(seg ^ (ln.astype(np.uint64) << u(48)) ^ u((fi + 1) << 56)))
            self.ids[fi] += v.size
        with np.errstate(over="ignore"):
            self.row_sum = self.row_sum + h.sum(dtype=np.uint64)
        self.rows += n
        self.lsum += labels.astype(np.float64).sum(axis=0)

    def to_json(self):
        return {"rows": self.rows, "row_hash": "%016x" % int(self.row_sum),
                "ids": self.ids.tolist(), "label_sum": self.lsum.tolist()}


# ---- the peers: setup (untimed), then one epoch of batches per call ---------------------


def peer_sluice(a):
    import sluice
    import sluice.torch  # imports torch now, not in the epoch

    transforms = []
    for f in DENSE:
        transforms.append({"op": "fill_missing", "feature": f, "value": 0})
        transforms.append({"op": "log1p", "feature": f})
    for f in SPARSE:
        transforms.append({"op": "sigrid_hash", "feature": f, "table_size": a.table_size,
                           "salt": SALT})
    if a.shape == "movielens":
        transforms = ml_transforms()
    source = {"table": os.path.join(a.data, "table")}
    if a.peer == "sluice-parquet":
        source = {"parquet": os.path.join(a.data, "parquet"), "columns": PARQUET_COLUMNS}
    spec = {"id": a.shape + "-bench", "source": source, "transforms": transforms,
            "batch": {"size": a.batch}}
    tmp = tempfile.mkdtemp(prefix="job-", dir=a.data)

    alt = a.peer == "sluice-alt"
    binary = a.alt_sluice or a.sluice if alt else a.sluice
    extra = (a.alt_worker_args or "").split() if alt else (a.worker_args or "").split()

    def epoch():
        p, addr = start_worker(binary, spec, tmp, "job", a.workers, a.memory_limit, extra)
        try:
            with sluice.Client(addr, prefetch=8) as c:
                for b in c:
                    with b:
                        yield sluice.torch.batch_to_torch(b)
        finally:
            p.terminate()
            p.wait()

    return epoch, None


class TsvDataset(torch.utils.data.IterableDataset if torch else object):
    """Criteo TSV shards for a DataLoader; loader worker i reads shards
    i, i + workers, ... Every line is parsed in Python, field by field."""

    def __init__(self, shards, batch, table_size):
        self.shards, self.batch, self.table_size = shards, batch, table_size

    @staticmethod
    def _rows(path):
        with open(path) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                yield (
                    float(fields[0]),
                    [float(x) if x else np.nan for x in fields[1:14]],
                    [int(x) if x else -1 for x in fields[14:40]],
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
        return to_batch(np.array(den, dtype=np.float32), np.array(lab, dtype=np.float32),
                        np.array(spa, dtype=np.int64), self.table_size)


def peer_dataloader(a):
    ds = TsvDataset(shard_paths(a.data, "tsv", a.workers), a.batch, a.table_size)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=a.workers,
                                         prefetch_factor=4)
    return (lambda: iter(loader)), None


def peer_numpy(a):
    dense, labels, sparse = (np.load(os.path.join(a.data, n + ".npy"))
                             for n in ("dense", "labels", "sparse"))

    def epoch():
        for s in range(0, labels.size, a.batch):
            yield to_batch(dense[s : s + a.batch], labels[s : s + a.batch],
                           sparse[s : s + a.batch], a.table_size)

    return epoch, None


def peer_tf(a, fmt):
    import tensorflow as tf

    auto = tf.data.AUTOTUNE

    def job(label, dense_cols, sparse_cols):
        dense = tf.math.log1p(tf.maximum(tf.stack(dense_cols, axis=1), 0.0))
        st = tf.stack(sparse_cols, axis=0)  # key-major [26, n]
        mask = st >= 0
        values = sigrid_hash_tf(tf, tf.boolean_mask(st, mask), a.table_size)
        return dense, label, values, tf.reshape(tf.cast(mask, tf.int32), [-1])

    if fmt == "tsv":
        reader = tf.data.TextLineDataset
        # Missing dense values take the default: fill_missing 0 while parsing.
        defaults = [tf.constant(0.0)] * 14 + [tf.constant(-1, tf.int64)] * 26

        def parse(lines):
            cols = tf.io.decode_csv(lines, defaults, field_delim="\t")
            return job(cols[0], cols[1:14], cols[14:])
    else:
        reader = tf.data.TFRecordDataset
        spec = {"label": tf.io.FixedLenFeature([], tf.float32)}
        spec.update((k, tf.io.FixedLenFeature([], tf.float32, 0.0)) for k in DENSE)
        spec.update((k, tf.io.FixedLenFeature([], tf.int64, -1)) for k in SPARSE)

        def parse(records):
            f = tf.io.parse_example(records, spec)
            return job(f["label"], [f[k] for k in DENSE], [f[k] for k in SPARSE])

    files = shard_paths(a.data, fmt, a.workers)
    ds = (tf.data.Dataset.from_tensor_slices(files)
          .interleave(reader, cycle_length=len(files), num_parallel_calls=auto,
                      deterministic=False)
          .batch(a.batch)
          .map(parse, num_parallel_calls=auto, deterministic=False)
          .prefetch(auto))

    def epoch():
        for dense, labels, values, lengths in ds:
            yield {"dense": dense, "labels": labels,
                   "sparse": {"keys": SPARSE, "values": values, "lengths": lengths,
                              "weights": None, "stride": int(dense.shape[0])}}

    return epoch, None


def peer_ray(a):
    import pyarrow.compute as pc
    import ray

    # A local cluster for this process alone: no token file in ~/.ray.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False,
             object_store_memory=2 << 30, _temp_dir=tempfile.mkdtemp(prefix="ray-", dir=a.data))
    ray.data.DataContext.get_current().enable_progress_bars = False
    table_size = a.table_size

    def job(t):  # a pyarrow.Table of up to --batch rows
        dense = np.stack([t.column(k).to_numpy() for k in DENSE], axis=1)  # null -> NaN
        sp = np.stack([pc.fill_null(t.column(k), -1).to_numpy() for k in SPARSE], axis=1)
        mask = sp >= 0
        sp[mask] = sigrid_hash_np(sp[mask], table_size)
        return {"dense": dense_np(dense), "labels": t.column("label").to_numpy(),
                "sparse": sp}

    ds = ray.data.read_parquet(shard_paths(a.data, "parquet", a.workers)).map_batches(
        job, batch_size=a.batch, batch_format="pyarrow")

    def epoch():
        for b in ds.iter_torch_batches(batch_size=a.batch):
            st = b["sparse"].t()  # row-major [n, 26] -> key-major
            mask = st >= 0
            yield {"dense": b["dense"], "labels": b["labels"],
                   "sparse": {"keys": SPARSE, "values": st[mask],
                              "lengths": mask.to(torch.int32).reshape(-1), "weights": None,
                              "stride": int(st.shape[1])}}

    return epoch, ray.shutdown


PEER_SETUP = {"sluice": peer_sluice, "sluice-alt": peer_sluice, "sluice-parquet": peer_sluice,
              "dataloader": peer_dataloader,
              "numpy": peer_numpy,
              "tf-tsv": lambda a: peer_tf(a, "tsv"), "tf-tfrecord": lambda a: peer_tf(a, "tfrecord"),
              "ray": peer_ray}


def run_peer(a):
    """Child process: set the peer up, run a warm-up epoch through the
    trainer loop that digests every tensor it is handed, then the timed
    epoch; print the result as one JSON line."""
    torch.set_num_threads(1)
    setup = peer_numpy_ml if a.shape == "movielens" and a.peer == "numpy" else PEER_SETUP[a.peer]
    epoch, teardown = setup(a)
    digest = MlDigest() if a.shape == "movielens" else Digest()
    for b in epoch():  # warm-up: Ray's workers, TF's kernels, the page cache
        digest.add(b)
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    f0 = tree_ticks(me, 7, 9)
    o0, c0, m0, t0 = own_ticks(), tree_ticks(me), machine_busy_ticks(), time.perf_counter()
    samples = 0
    for b in epoch():  # the trainer loop
        samples += int(b["sparse"]["stride"])
    t1, c1, m1, o1 = time.perf_counter(), tree_ticks(me), machine_busy_ticks(), own_ticks()
    f1 = tree_ticks(me, 7, 9)
    if teardown:
        teardown()
    print(RESULT + json.dumps({
        "samples": samples, "secs": t1 - t0, "cpu": (c1 - c0) / tick, "own": (o1 - o0) / tick,
        "minflt": f1 - f0,
        "others": max(0, (m1 - m0) - (c1 - c0)) / tick / (t1 - t0),
        "digest": digest.to_json()}), flush=True)


# ---- the parent: prepare, verify, rounds, summary ---------------------------------------


def child(a, args, what):
    """Run this script in a child process (its own process group, killed
    whole on --timeout); the result line it printed, parsed, or None."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, os.path.abspath(__file__), "--sluice", a.sluice, "--data", a.data,
           "--batch", str(a.batch), "--table-size", str(a.table_size),
           "--workers", str(a.workers), "--shape", a.shape] + args
    if a.memory_limit:
        cmd += ["--memory-limit", a.memory_limit]
    for k in ("worker_args", "alt_sluice", "alt_worker_args"):
        if getattr(a, k):
            cmd.append("--%s=%s" % (k.replace("_", "-"), getattr(a, k)))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        raise SystemExit("%s: no result within --timeout %d s" % (what, a.timeout))
    if p.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s%s" % (what, p.returncode, out[-3000:],
                                                         err[-3000:]))
    for line in out.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    return None


def run_round(a, name):
    """One peer's process: its result, checked for the sample counts."""
    r = child(a, ["--peer", name], name)
    if r is None:
        raise SystemExit("%s printed no result" % name)
    for n in (r["samples"], r["digest"]["rows"]):
        if n != a.rows:
            raise SystemExit("%s delivered %d samples of %d" % (name, n, a.rows))
    return r


def prepare(a, peers):
    """The table, its rows as .npy, and each selected peer's input files."""
    t0 = time.perf_counter()
    if a.shape == "movielens":
        a.rows, a.tensor_bytes = ml_prepare(a, peers)
        print("movielens: %d rows (%d real ones x %d copies) prepared in %.1f s; bytes/sample: "
              "sluice table %.1f; tensors %.1f" % (a.rows, a.rows // a.copies, a.copies,
                                                   time.perf_counter() - t0,
                                                   du(os.path.join(a.data, "table")) / a.rows,
                                                   a.tensor_bytes))
        return
    a.tensor_bytes = TENSOR_BYTES
    table = os.path.join(a.data, "table")
    subprocess.run([a.sluice, "table", "gen", "--preset", "criteo", "--rows", str(a.rows),
                    "--table", table, "--seed", str(a.seed), "--files", str(a.workers),
                    "--no-sync", "--quiet"], check=True)
    dense, labels, sparse = load_rows(a.sluice, table, a.rows, a.data, a.workers)
    for name, arr in (("dense", dense), ("labels", labels), ("sparse", sparse)):
        np.save(os.path.join(a.data, name + ".npy"), arr)
    sizes = {"sluice table": du(table), "in-memory arrays": dense.nbytes + labels.nbytes + sparse.nbytes}
    need = {"dataloader": "tsv", "tf-tsv": "tsv", "tf-tfrecord": "tfrecord", "ray": "parquet",
            "sluice-parquet": "parquet"}
    fmts = sorted({need[p] for p in peers if p in need})
    failures = []

    def write(fmt, shard):
        try:
            child(a, ["--write", fmt, "--shard", str(shard)], "writing %s shard %d" % (fmt, shard))
        except SystemExit as e:
            failures.append(str(e))

    # One writer process per shard and format, --workers at a time.
    jobs = [(f, s) for f in fmts for s in range(a.workers)]
    for i in range(0, len(jobs), a.workers):
        ts = [threading.Thread(target=write, args=j) for j in jobs[i : i + a.workers]]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    if failures:
        raise SystemExit("\n".join(failures))
    for f in fmts:
        sizes[f] = sum(os.path.getsize(p) for p in shard_paths(a.data, f, a.workers))
    print("criteo: %d rows (seed %d) in %d files per format, prepared in %.1f s; bytes/sample: %s"
          % (a.rows, a.seed, a.workers, time.perf_counter() - t0,
             ", ".join("%s %.1f" % (k, v / a.rows) for k, v in sizes.items())))


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def missing_modules(mods):
    return [m for m in mods if importlib.util.find_spec(m) is None]


def fmt_range(vals, f):
    return "%s (%s–%s)" % (f(statistics.median(vals)), f(min(vals)), f(max(vals)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--sluice", required=True, help="the sluice program")
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--table-size", type=int, default=10000000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="sluice transform threads, DataLoader workers, Ray CPUs and input files "
                         "per format (default: cores)")
    ap.add_argument("--memory-limit", help="the sluice worker's --memory-limit (default: "
                    "the worker's own); its read-ahead touches that many fresh bytes per epoch")
    ap.add_argument("--worker-args", help="more arguments for the sluice peer's worker, one "
                    "string: --worker-args='--max-queued 8'")
    ap.add_argument("--alt-sluice", help="adds the peer sluice-alt: the same job with this "
                    "sluice program (default --sluice), for before/after pairs in one run")
    ap.add_argument("--alt-worker-args", help="adds the peer sluice-alt, whose worker gets these "
                    "arguments instead of --worker-args")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape", choices=["criteo", "movielens"], default="criteo",
                    help="criteo: generated Criteo-shaped rows (--rows); movielens: the "
                    "replicated real rows (--copies x the MovieLens samples; sluice and numpy "
                    "only)")
    ap.add_argument("--copies", type=int, default=10, help="movielens: copies of the real rows")
    ap.add_argument("--ratings", default=ML_RATINGS, help="movielens: the ratings.csv")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peers", default=",".join(p[0] for p in PEERS
                                                if p[0] not in ("sluice-alt", "sluice-parquet")),
                    help="comma-separated, from: " + ", ".join(p[0] for p in PEERS))
    ap.add_argument("--reference", default="sluice", choices=["sluice", "sluice-parquet"],
                    help="the peer whose digest the others must match and to which the ratios "
                         "are (sluice-parquet: sluice on the Parquet files, bench/ray_parquet.py)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for one child process")
    # Internal: what a child process does.
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--write", choices=FORMATS, help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.write:
        return write_shard(a.write, a.data, a.shard, a.workers)
    if a.peer:
        return run_peer(a)

    if a.workers < 1 or a.rows < 1 or a.batch < 1 or a.rounds < 1:
        raise SystemExit("--workers, --rows, --batch and --rounds must be at least 1")
    names = [p[0] for p in PEERS]
    wanted = [p.strip() for p in a.peers.split(",") if p.strip()]
    if (a.alt_sluice or a.alt_worker_args) and "sluice-alt" not in wanted:
        wanted.insert(1, "sluice-alt")
    bad = [p for p in wanted if p not in names]
    if bad or a.reference not in wanted:
        raise SystemExit("--peers: %s (from %s; %s is the reference and must be in it)"
                         % ("unknown " + ", ".join(bad) if bad else "no " + a.reference,
                            ", ".join(names), a.reference))
    if torch is None:
        raise SystemExit("compare_loaders needs torch: %s cannot import it" % sys.executable)
    if a.shape == "movielens":
        if a.reference != "sluice":
            raise SystemExit("--shape movielens: the reference is the sluice peer")
        if a.copies < 1 or not os.path.exists(a.ratings):
            raise SystemExit("--shape movielens needs --copies >= 1 and the ratings file %s"
                             % a.ratings)
        other = [p for p in wanted if p not in ("sluice", "numpy", "sluice-alt")]
        if other:
            print("%s: skipped: --shape movielens has the sluice and numpy peers only"
                  % ", ".join(other))
            wanted = [p for p in wanted if p in ("sluice", "numpy", "sluice-alt")]
    peers = []
    for name, _, mods in PEERS:
        if name not in wanted:
            continue
        miss = missing_modules(mods)
        if miss:
            print("%s: skipped: %s cannot import %s (ops/bench-venv builds a Python that can: "
                  "\"$(ops/bench-venv)/bin/python\" bench/compare_loaders.py ...)"
                  % (name, sys.executable, ", ".join(miss)))
        else:
            peers.append(name)
    desc = {n: d.replace("%d", str(a.workers)) for n, d, _ in PEERS}

    with tempfile.TemporaryDirectory(prefix="sluice-cmp-") as tmp:
        a.data = tmp
        load0 = os.getloadavg()
        prepare(a, peers)
        if a.shape == "movielens":
            print("job: first_x %d on user_history, sigrid_hash %% %s, batch %d; %d cores; %s"
                  % (ML_FIRST_X, ", ".join("%d %s" % (ML_HASH[f], f) for f in ML_SPARSE),
                     a.batch, os.cpu_count() or 1, sys.executable))
        else:
            print("job: fill_missing 0 + log1p x13 dense, sigrid_hash %% %d x26 sparse, batch %d; "
                  "%d cores; %s" % (a.table_size, a.batch, os.cpu_count() or 1, sys.executable))

        res, ref = {n: [] for n in peers}, None
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % len(peers)
            order = peers[k:] + peers[:k]
            print("round %d" % rnd)
            got = {}
            for name in order:
                got[name] = run_round(a, name)
            ref = ref or got[a.reference]["digest"]
            s = got[a.reference]
            for name in order:
                r = got[name]
                bad = digest_mismatch(ref, r["digest"])
                if bad:
                    raise SystemExit("%s: the tensors differ from sluice's: %s" % (name, bad))
                r["sps"] = r["samples"] / r["secs"]
                r["us"] = r["cpu"] / r["samples"] * 1e6
                r["x_sps"] = s["samples"] / s["secs"] / r["sps"]
                r["x_cpu"] = r["cpu"] / r["samples"] / (s["cpu"] / s["samples"])
                res[name].append(r)
                r["us_own"] = r.get("own", 0.0) / r["samples"] * 1e6
                split = (" [worker %.3f + trainer process %.3f]" % (r["us"] - r["us_own"],
                                                                     r["us_own"])
                         if name.startswith("sluice") else "")
                print("  %-12s %10.0f samples/s %7.3f CPU-us/sample%s (%.2f cores; others %.2f)"
                      "   %s x%.2f by samples/s, x%.2f by CPU; %.0f page faults; digest %s" % (
                          name, r["sps"], r["us"], split, r["cpu"] / r["secs"], r["others"],
                          a.reference,
                          r["x_sps"], r["x_cpu"], r["minflt"], r["digest"]["row_hash"]))
        print("verified: %d peers handed the trainer identical tensors in every round (digest %s)"
              % (len(peers), ref["row_hash"]))

        load1 = os.getloadavg()
        others = [r["others"] for n in peers for r in res[n]]
        print("\nmachine: %d cores; load average %.2f at the start, %.2f at the end; other "
              "processes used %.2f cores (median; %.2f–%.2f) during the timed epochs"
              % (os.cpu_count() or 1, load0[0], load1[0], statistics.median(others),
                 min(others), max(others)))
        print("%d rows, batch %d; median (min–max) of %d interleaved rounds:\n" % (
            a.rows, a.batch, a.rounds))
        print("| loader | samples/s | CPU-µs per sample | %s's ratio, samples/s | "
              "%s's ratio, CPU per sample |" % (a.reference, a.reference))
        print("| --- | --- | --- | --- | --- |")
        for name in peers:
            rs = res[name]
            x = (lambda k, f: fmt_range([r[k] for r in rs], f))
            ratio = (lambda v: "%.2f×" % v)
            print("| %s | %s | %s | %s | %s |" % (
                desc[name], x("sps", lambda v: "{:,.0f}".format(v)),
                x("us", lambda v: "%.3f" % v),
                "1" if name == a.reference else x("x_sps", ratio),
                "1" if name == a.reference else x("x_cpu", ratio)))
        limit = memcpy_limit_ns(a.rows, a.tensor_bytes)
        su = statistics.median(r["us"] for r in res[a.reference])
        sw = statistics.median(r["us"] - r["us_own"] for r in res[a.reference])
        print("\nlimit: a memcpy of the %.0f bytes of one sample's tensors takes %.1f ns here; "
              "%s %.0f ns per sample (%.1fx the limit; its worker process %.0f ns, %.1fx)"
              % (a.tensor_bytes, limit, a.reference, su * 1e3, su * 1e3 / limit, sw * 1e3,
                 sw * 1e3 / limit))
        if "numpy" in res and a.reference == "sluice":
            xs = sorted(r["x_cpu"] for r in res["numpy"])
            med = statistics.median(xs)
            print("target (issue 15): sluice >= 1.5x the in-memory numpy path by CPU per sample: "
                  "%s (median %.2fx, rounds %.2fx-%.2fx)"
                  % ("met" if med >= 1.5 else "not met", med, xs[0], xs[-1]))
        if "ray" in res and a.reference == "sluice-parquet":
            xs = sorted(r["x_sps"] for r in res["ray"])
            med = statistics.median(xs)
            print("target (issue 22): sluice on the Parquet files >= 15x Ray Data on the same "
                  "files by samples/s: %s (median %.2fx, rounds %.2fx-%.2fx)"
                  % ("met" if med >= 15 else "not met", med, xs[0], xs[-1]))
        for name in [n for n in ("sluice", "sluice-alt", "sluice-parquet") if n in res]:
            rs = res[name]
            line = "%s: %s CPU-us per sample (worker %s), %s minor page faults per epoch" % (
                name, fmt_range([r["us"] for r in rs], lambda v: "%.3f" % v),
                fmt_range([r["us"] - r["us_own"] for r in rs], lambda v: "%.3f" % v),
                fmt_range([r["minflt"] for r in rs], lambda v: "%.0f" % v))
            if "numpy" in res:
                xs = [n["us"] / r["us"] for n, r in zip(res["numpy"], rs)]
                line += "; numpy's CPU / its CPU per round: %s" % fmt_range(xs, lambda v: "%.2fx" % v)
            print(line)


if __name__ == "__main__":
    main()
