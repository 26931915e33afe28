#!/usr/bin/env python3
"""Parquet + zstd read by sluice's own reader (bench_parquet_read) against
pyarrow.parquet reading the same columns of the same file, one thread each,
in the same run, rounds interleaved (docs/BENCHMARKS.md, "Parquet read").
The file is a seeded recommendation-shaped table written by pyarrow with
zstd: an int64 id, an int64 label, 13 float32 dense features and 26
list<int64> sparse features of 0-5 ids each (dictionary-encoded where
pyarrow chooses to). Prints each round and the median rows/s per core of
each reader and their ratio; figures only, never pass or fail. With
--import, the sluice rounds are `sluice table import --format parquet
--threads 1` of the file into a table instead (the import rate of issue 22:
Parquet -> sluice table, rows/s per core, against pyarrow's read).

Run in the venv of ops/parquet-venv, from the source tree:

    "$(ops/parquet-venv)/bin/python" bench/parquet_read.py --rows 1000000 \\
        --rounds 5 --bench build/bench_parquet_read"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_file(path, rows, seed):
    rng = np.random.default_rng(seed)
    cols = {"id": pa.array(np.arange(rows, dtype=np.int64)),
            "label": pa.array(rng.integers(0, 2, rows, dtype=np.int64))}
    for i in range(13):
        v = rng.lognormal(0, 2, rows).astype(np.float32)
        v[rng.random(rows) < 0.05] = np.nan
        cols[f"dense{i}"] = pa.array(v, from_pandas=True)
    for i in range(26):
        lens = rng.integers(0, 6, rows)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        card = [1000, 100000, 10**7][i % 3]
        values = rng.zipf(1.3, offsets[-1]).astype(np.int64) % card
        cols[f"sparse{i}"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    pq.write_table(pa.table(cols), path, compression="zstd", row_group_size=256 * 1024)


def pyarrow_round(path, columns):
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    t0, c0 = time.perf_counter(), time.process_time()
    t = pq.read_table(path, columns=columns, use_threads=False, pre_buffer=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return t.num_rows, wall, cpu


def import_round(sluice, path, d):
    """`sluice table import --format parquet --threads 1` of path into a new
    table: rows, wall seconds, CPU seconds of the import process."""
    table = os.path.join(d, "table")
    shutil.rmtree(table, ignore_errors=True)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sluice, "table", "import", "--format", "parquet", "--input", path,
                    "--table", table, "--threads", "1", "--quiet", "--no-sync"], check=True,
                   capture_output=True)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return pq.ParquetFile(path).metadata.num_rows, wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bench", default="build/bench_parquet_read")
    ap.add_argument("--columns", default="all",
                    help="comma-separated columns, or 'all' (the default)")
    ap.add_argument("--file", help="read this file instead of generating one")
    ap.add_argument("--import", dest="import_", action="store_true",
                    help="time `sluice table import --format parquet` instead of the reader")
    ap.add_argument("--sluice", default="build/sluice", help="the sluice program (--import)")
    ap.add_argument("--baseline-sluice",
                    help="--import: another build's sluice, one more import a round (before / "
                         "after a change, same run)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = args.file or os.path.join(d, "bench.parquet")
        if not args.file:
            t0 = time.perf_counter()
            make_file(path, args.rows, args.seed)
            print(f"wrote {path}: {args.rows} rows, seed {args.seed}, "
                  f"{os.path.getsize(path) / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s")
        columns = None if args.columns == "all" else args.columns.split(",")
        sl, py, base = [], [], []
        for k in range(args.rounds):
            if args.import_:
                runs = [("sluice", args.sluice, sl)]
                if args.baseline_sluice:
                    runs.append(("baseline", args.baseline_sluice, base))
                for name, prog, into in runs:
                    rows, wall, cpu = import_round(prog, path, d)
                    into.append(rows / cpu)
                    print(f"{name} import round {k}: {rows} rows, {wall:.3f} s wall, "
                          f"{cpu:.3f} s cpu, {rows / cpu:.0f} rows/s per core")
            else:
                out = subprocess.run([args.bench, path, args.columns, "1"], check=True,
                                     capture_output=True, text=True).stdout.strip()
                print(out.replace("round 0", f"round {k}"))
                sl.append(float(out.split(", ")[-1].split()[0]))
            rows, wall, cpu = pyarrow_round(path, columns)
            py.append(rows / cpu)
            print(f"pyarrow round {k}: {rows} rows, {wall:.3f} s wall, {cpu:.3f} s cpu, "
                  f"{rows / cpu:.0f} rows/s per core")
        s, p = statistics.median(sl), statistics.median(py)
        print(f"median rows/s per core: sluice {s:.0f}, pyarrow {p:.0f}, "
              f"sluice/pyarrow {s / p:.2f}x (pyarrow {pa.__version__})")
        if base:
            b = statistics.median(base)
            print(f"baseline import: median {b:.0f} rows/s per core, baseline/pyarrow "
                  f"{b / p:.2f}x, this build / baseline {s / b:.2f}x")


if __name__ == "__main__":
    main()
