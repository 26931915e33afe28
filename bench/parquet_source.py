#!/usr/bin/env python3
"""A Parquet dataset read in place by a sluice worker (`source.parquet`)
against the same rows imported into a sluice table and read by a worker,
and against pyarrow.parquet reading the same columns of the same file, one
thread each, in the same run, rounds interleaved (docs/BENCHMARKS.md,
"Parquet as a job source"). The file is bench/parquet_read.py's seeded
recommendation-shaped table (an id, a label, 13 float32 dense and 26
list<int64> sparse features, zstd). Each worker round is `sluice worker
--job SPEC --threads 1` serving `sluice read --json`-free (the reader only
counts), batches of 4096 (`--threads N`: the workers at --threads N);
its figure is the samples/s `sluice read`
prints. Per core: rows over the CPU seconds of the worker process (all
its threads: the split reader, the transform thread, the server) and of
pyarrow's read (`time.process_time`), the figures to compare on a machine
whose cores are shared. `--baseline-sluice` adds a round of another
build's worker on the same file (before / after a change, same run).
Prints each round and the medians; figures only, never pass or fail.
`--ab` runs only the two builds' workers on the Parquet file, a pair a
round, and prints their CPU and its ratio (a step's effect under the load
of the moment, which moves the absolute figures more than the step).
`--threads N` runs the workers at --threads N (`--baseline-threads` the
baseline's: `--ab` with the same build twice compares thread counts).
`--transforms` gives both jobs the criteo job's transforms (log1p of every
dense feature, sigrid_hash of every sparse one, examples/jobs/criteo.json):
the workers' figures then include them, pyarrow's read does not (its
comparison is like for like only without it). `--baseline-flags` adds
worker flags to the baseline's rounds (`--no-decode-maps` with the same
build as --sluice: transforms at decode against on the batches).

Run in the venv of ops/parquet-venv, from the source tree:

    "$(ops/parquet-venv)/bin/python" bench/parquet_source.py --rows 1000000 --rounds 3"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parquet_read import make_file  # noqa: E402  the same seeded file


def worker_round(sluice, spec, tmp, flags=(), threads=1):
    """samples/s of one worker (--threads threads) serving one reader, and
    the worker process's CPU seconds."""
    log = os.path.join(tmp, "w.log")
    with open(log, "w") as lf:
        w = subprocess.Popen([sluice, "worker", "--job", spec, "--listen", "127.0.0.1:0",
                              "--exit-when-done", "--threads", str(threads), *flags], stdout=lf,
                             stderr=subprocess.STDOUT)
    try:
        addr = None
        deadline = time.time() + 60
        while addr is None and time.time() < deadline:
            m = re.search(r"^listening on (\S+)", open(log).read(), re.M)
            addr = m.group(1) if m else None
            time.sleep(0.01)
        r = subprocess.run([sluice, "read", "--worker", addr], capture_output=True, text=True,
                           timeout=600)
        cpu = None
        deadline = time.time() + 60
        while cpu is None and time.time() < deadline:
            pid, status, ru = os.wait4(w.pid, os.WNOHANG)
            if pid == w.pid:
                w.returncode = os.waitstatus_to_exitcode(status)
                cpu = ru.ru_utime + ru.ru_stime
            else:
                time.sleep(0.01)
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
    m = re.search(r"([0-9.]+) samples/s", r.stdout + r.stderr)
    if m is None or cpu is None:
        raise SystemExit(f"no rate in: {r.stdout}{r.stderr}{open(log).read()}")
    return float(m.group(1)), cpu


def pyarrow_round(path, columns):
    """rows/s (wall) and rows/s per core (process CPU) of pyarrow's read."""
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    t0, c0 = time.perf_counter(), time.process_time()
    f = pq.ParquetFile(path)
    rows = 0
    for i in range(f.num_row_groups):
        rows += f.read_row_group(i, columns=columns, use_threads=False).num_rows
    return rows / (time.perf_counter() - t0), rows / (time.process_time() - c0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sluice", default="build/sluice")
    ap.add_argument("--baseline-sluice", help="another build's sluice, one more worker round")
    ap.add_argument("--file", help="read this file (written by parquet_read.py) instead")
    ap.add_argument("--ab", action="store_true",
                    help="only the two builds' workers on the Parquet file, a pair a round "
                         "(--baseline-sluice first, then --sluice): each one's CPU ms and their "
                         "ratio, and the median ratio (small steps, measured under the same load)")
    ap.add_argument("--transforms", action="store_true",
                    help="the criteo job's transforms in both jobs (log1p of the dense "
                         "features, sigrid_hash of the sparse ones); pyarrow reads columns only")
    ap.add_argument("--threads", type=int, default=1,
                    help="the workers' --threads (both builds'; 2: the Parquet source decodes "
                         "a row group's columns on 2 threads); pyarrow reads on 1 thread")
    ap.add_argument("--baseline-threads", type=int,
                    help="the baseline's --threads (default: --threads); with --ab and the same "
                         "build as --sluice: one thread count against another, pairs interleaved")
    ap.add_argument("--baseline-flags", default="",
                    help="worker flags of the baseline's rounds (e.g. --no-decode-maps)")
    args = ap.parse_args()
    bflags = args.baseline_flags.split()
    bthreads = args.baseline_threads or args.threads
    if args.ab and not args.baseline_sluice:
        raise SystemExit("--ab needs --baseline-sluice")
    tmp = tempfile.mkdtemp(prefix="sluice-pqsource-")
    try:
        path = args.file or os.path.join(tmp, "data.parquet")
        if not args.file:
            make_file(path, args.rows, args.seed)
        columns = [c for c in pq.ParquetFile(path).schema_arrow.names]
        mapping = {"sample_id": "id", "labels": ["label"],
                   "dense": [f"dense{i}" for i in range(13)],
                   "sparse": [f"sparse{i}" for i in range(26)], "infer": False}
        mfile = os.path.join(tmp, "map.json")
        json.dump(mapping, open(mfile, "w"))
        table = os.path.join(tmp, "table")
        subprocess.run([args.sluice, "table", "import", "--format", "parquet", "--input", path,
                        "--table", table, "--mapping", mfile, "--threads", "1", "--quiet"],
                       check=True, capture_output=True)
        specs = {}
        for name, source in (("parquet", {"parquet": path, "columns": mapping}),
                             ("table", {"table": table})):
            specs[name] = os.path.join(tmp, f"{name}.json")
            spec = {"id": name, "source": source, "batch": {"size": 4096}}
            if args.transforms:
                spec["transforms"] = (
                    [{"op": "log1p", "feature": f} for f in mapping["dense"]] +
                    [{"op": "sigrid_hash", "feature": f, "table_size": 1000000}
                     for f in mapping["sparse"]])
            json.dump(spec, open(specs[name], "w"))
        nrows = pq.ParquetFile(path).metadata.num_rows
        print(f"rows {nrows}, file {os.path.getsize(path) / 1e6:.1f} MB (zstd), "
              f"{pq.ParquetFile(path).num_row_groups} row groups; workers on {args.threads} "
              f"thread(s), pyarrow on 1; workers "
              f"{'with the criteo transforms' if args.transforms else 'without transforms'}"
              f"{'; baseline flags ' + args.baseline_flags if bflags else ''}")
        if args.ab:
            ratios, rates = [], []
            for r in range(args.rounds):
                base_rate, base_cpu = worker_round(args.baseline_sluice, specs["parquet"], tmp,
                                                   bflags, bthreads)
                rate, cpu = worker_round(args.sluice, specs["parquet"], tmp, (), args.threads)
                ratios.append(cpu / base_cpu)
                rates.append(rate / base_rate)
                print(f"round {r}: baseline {base_cpu * 1e3:.1f} ms CPU {base_rate:,.0f} "
                      f"samples/s, this build {cpu * 1e3:.1f} ms CPU ({cpu / nrows * 1e6:.3f} "
                      f"us/row) {rate:,.0f} samples/s, CPU ratio {cpu / base_cpu:.3f}, "
                      f"rate ratio {rate / base_rate:.3f}")
            print(f"median CPU ratio this build / baseline {statistics.median(ratios):.3f} "
                  f"(rounds {min(ratios):.3f}-{max(ratios):.3f}), samples/s ratio "
                  f"{statistics.median(rates):.3f} (rounds {min(rates):.3f}-{max(rates):.3f})")
            return
        runs = [("parquet", args.sluice, "parquet"), ("table", args.sluice, "table")]
        if args.baseline_sluice:
            runs.append(("baseline", args.baseline_sluice, "parquet"))
        got = {name: [] for name, _, _ in runs}
        core = {name: [] for name, _, _ in runs}
        got["pyarrow"], core["pyarrow"] = [], []
        for r in range(args.rounds):
            line = []
            for name, sluice, spec in runs:
                base = name == "baseline"
                rate, cpu = worker_round(sluice, specs[spec], tmp, bflags if base else (),
                                         bthreads if base else args.threads)
                got[name].append(rate)
                core[name].append(nrows / cpu)
                line.append(f"worker on {name} {rate:,.0f} samples/s ({nrows / cpu:,.0f}/core)")
            wall, per_core = pyarrow_round(path, columns)
            got["pyarrow"].append(wall)
            core["pyarrow"].append(per_core)
            line.append(f"pyarrow read {wall:,.0f} rows/s ({per_core:,.0f}/core)")
            print(f"round {r}: " + ", ".join(line))
        med = {k: statistics.median(v) for k, v in got.items()}
        mc = {k: statistics.median(v) for k, v in core.items()}
        print(f"median: worker on parquet {med['parquet']:,.0f} samples/s, on the table "
              f"{med['table']:,.0f} samples/s ({med['table'] / med['parquet']:.2f}x), "
              f"pyarrow read (columns only, no batches) {med['pyarrow']:,.0f} rows/s "
              f"(parquet worker / pyarrow {med['parquet'] / med['pyarrow']:.2f}x)")
        print(f"median per core: worker on parquet {mc['parquet']:,.0f}, on the table "
              f"{mc['table']:,.0f}, pyarrow read {mc['pyarrow']:,.0f} rows/s "
              f"(parquet worker / pyarrow {mc['parquet'] / mc['pyarrow']:.2f}x)")
        if args.baseline_sluice:
            print(f"baseline build on parquet: median {med['baseline']:,.0f} samples/s, "
                  f"{mc['baseline']:,.0f}/core (this build / baseline "
                  f"{mc['parquet'] / mc['baseline']:.2f}x per core)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
