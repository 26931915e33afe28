"""The Criteo 1M synthetic rows (issue 22): a million seeded Criteo-shaped
rows (label, I1..I13 integers with missing values, C1..C26 32-bit ids as
hex, with missing values) written as a TSV and imported with `sluice table
import --format criteo`, and the same rows written as Parquet + zstd by
pyarrow and read in place by a worker (source.parquet): the same tensors,
batch by batch. Both workers are read with the Python client (numpy
views), and every batch is digested (SHA-256 of its sample ids, labels,
dense values and names, and its KJT's keys, lengths and values), so a
million rows compare in seconds; the first batch is also checked against
the generated rows. The seed is printed and taken from SLUICE_TEST_SEED;
SLUICE_CRITEO_ROWS changes the row count."""
import hashlib
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pqcompare import SLUICE, sluice
from test_source import SCALE

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import sluice as sluice_client  # noqa: E402 (the numpy client, libsluice_trainer.so)

DENSE = [f"I{i + 1}" for i in range(13)]
SPARSE = [f"C{i + 1}" for i in range(26)]
BATCH = 4096
GROUP = 16 * BATCH  # row groups a multiple of the batch: every split ends on a batch boundary


def criteo_rows(n, seed):
    """label int32 [n]; dense int64 [n, 13] and its missing mask (I2 down to
    -3, as Criteo's I2 has negative counts); ids uint64 [n, 26] < 2^32 and
    their missing mask."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n, dtype=np.int32)
    dense = rng.integers(0, 5000, (n, 13), dtype=np.int64)
    dense[:, 1] -= 3
    dense_missing = rng.random((n, 13)) < 0.2
    ids = rng.integers(0, 1 << 32, (n, 26), dtype=np.uint64)
    ids_missing = rng.random((n, 26)) < 0.1
    return label, dense, dense_missing, ids, ids_missing


def hex8(ids):
    """uint64 values < 2^32 -> 8 lower-case hex digits each (numpy 'S8')."""
    b = ids.astype(">u4").view(np.uint8).reshape(-1, 4)
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    out = np.empty((ids.size, 8), np.uint8)
    out[:, 0::2] = digits[b >> 4]
    out[:, 1::2] = digits[b & 15]
    return out.reshape(-1).view("S8")


def write_inputs(tmp_path, n, seed):
    label, dense, dmiss, ids, imiss = criteo_rows(n, seed)
    # the TSV: label, 13 integers, 26 hex ids; a missing value an empty field
    cols = {"label": pa.array(label)}
    cols.update({k: pa.array(dense[:, j], mask=dmiss[:, j]) for j, k in enumerate(DENSE)})
    cols.update({k: pa.array(hex8(ids[:, j]), pa.binary(), mask=imiss[:, j]).cast(pa.string())
                 for j, k in enumerate(SPARSE)})
    tsv = tmp_path / "day.tsv"
    pacsv.write_csv(pa.table(cols), tsv, pacsv.WriteOptions(
        include_header=False, delimiter="\t", quoting_style="none"))
    # the Parquet file: the same values, the ids as int64
    cols = {"label": pa.array(label)}
    cols.update({k: pa.array(dense[:, j], mask=dmiss[:, j]) for j, k in enumerate(DENSE)})
    cols.update({k: pa.array(ids[:, j].astype(np.int64), mask=imiss[:, j])
                 for j, k in enumerate(SPARSE)})
    path = tmp_path / "day.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=GROUP, compression="zstd")
    return tsv, path, (label, dense, dmiss, ids, imiss)


def digest_job(tmp_path, name, source):
    """Run `sluice worker --job` (one thread: batches in split order) on
    source and read it with the Python client. @return (per-batch digests
    in order, rows, the first batch's arrays)."""
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps({"id": name, "source": source, "batch": {"size": BATCH}}))
    log = tmp_path / f"{name}.log"
    with open(log, "w") as lf:
        w = subprocess.Popen([SLUICE, "worker", "--job", str(spec), "--listen", "127.0.0.1:0",
                              "--exit-when-done", "--threads", "1"], stdout=lf,
                             stderr=subprocess.STDOUT)
    digests, rows, first = [], 0, None
    try:
        addr = None
        deadline = time.time() + 30 * SCALE
        while addr is None and time.time() < deadline and w.poll() is None:
            m = re.search(r"^listening on (\S+)", log.read_text(), re.M)
            addr = m.group(1) if m else None
            time.sleep(0.02)
        assert addr, log.read_text()
        with sluice_client.Client(addr, prefetch=8, timeout_ms=int(60000 * SCALE)) as c:
            for b in c:
                with b:
                    kjt = b.sparse
                    h = hashlib.sha256()
                    for part in (b.sample_ids, b.labels, b.dense, kjt.lengths, kjt.values):
                        h.update(np.ascontiguousarray(part).tobytes())
                        h.update(b"|")
                    h.update(json.dumps([b.label_names, b.dense_names, kjt.keys]).encode())
                    assert kjt.weights is None
                    digests.append(h.hexdigest())
                    rows += b.batch_size
                    if first is None:
                        first = {"ids": b.sample_ids.copy(), "labels": b.labels.copy(),
                                 "dense": b.dense.copy(), "dense_names": list(b.dense_names),
                                 "keys": list(kjt.keys), "lengths": kjt.lengths_2d().copy(),
                                 "values": kjt.values.copy()}
        assert w.wait(timeout=30 * SCALE) == 0, log.read_text()
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
    return digests, rows, first


def check_first_batch(first, rows):
    """The first batch against the generated rows: ids 1.., labels, dense
    values (missing: NaN, a missing dense value without fill_missing) and ids."""
    label, dense, dmiss, ids, imiss = rows
    b = len(first["ids"])
    assert b == BATCH and first["ids"].tolist() == list(range(1, b + 1))
    assert first["labels"][:, 0].tolist() == label[:b].astype(np.float32).tolist()
    want = np.where(dmiss[:b], np.nan, dense[:b]).astype(np.float32)
    got = first["dense"][:, [first["dense_names"].index(k) for k in DENSE]]
    assert np.array_equal(got, want, equal_nan=True)
    offs = np.concatenate([[0], np.cumsum(first["lengths"].reshape(-1))])
    for f, k in enumerate(first["keys"]):
        j = SPARSE.index(k)
        ln = first["lengths"][f]
        assert ln.tolist() == (~imiss[:b, j]).astype(np.int32).tolist(), k
        vals = first["values"][offs[f * b]:offs[(f + 1) * b]]
        assert vals.tolist() == ids[:b, j][~imiss[:b, j]].astype(np.int64).tolist(), k


def test_criteo_1m_parquet_zstd_same_tensors_as_tsv_import(tmp_path):
    seed = int(os.environ.get("SLUICE_TEST_SEED", "22"))
    n = int(os.environ.get("SLUICE_CRITEO_ROWS", "1000000"))
    print(f"seed {seed}, {n} rows")
    t0 = time.time()
    tsv, path, rows = write_inputs(tmp_path, n, seed)
    t1 = time.time()
    table = tmp_path / "t"
    p = sluice("table", "import", "--format", "criteo", "--input", str(tsv), "--table",
               str(table))
    assert f"{n} rows read, {n} written, 0 skipped" in p.stdout + p.stderr, p.stdout + p.stderr
    t2 = time.time()
    want, want_rows, want_first = digest_job(tmp_path, "criteo_t", {"table": str(table)})
    t3 = time.time()
    mapping = {"labels": ["label"], "dense": DENSE, "sparse": SPARSE, "infer": False}
    got, got_rows, got_first = digest_job(tmp_path, "criteo_pq",
                                          {"parquet": str(path), "columns": mapping})
    t4 = time.time()
    print(f"inputs {t1 - t0:.1f} s, TSV import {t2 - t1:.1f} s, table job {t3 - t2:.1f} s, "
          f"Parquet job {t4 - t3:.1f} s")
    assert want_rows == n and got_rows == n
    assert len(want) == -(-n // BATCH)
    check_first_batch(want_first, rows)
    check_first_batch(got_first, rows)
    bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b][:5]
    assert len(got) == len(want) and not bad, f"batches that differ: {bad}"
