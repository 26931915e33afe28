#!/usr/bin/env python3
"""The baseline of bench_csv_import (bench/csv_import.c): the same CSV file
parsed into typed values by Python's csv module (what a hand-written
converter does: floats for the label and I1..I13, an empty field as NaN,
the hex strings C1..C26 as integers), and, when pyarrow imports (e.g. the
parquet or bench venv's python), by pyarrow.csv with one thread. Prints
one line per reader: `baseline NAME rows R seconds S cpu C`.

usage: csv_baseline.py FILE"""
import csv
import sys
import time


def python_csv(path):
    w0, c0 = time.perf_counter(), time.process_time()
    rows = 0
    nan = float("nan")
    with open(path, newline="") as f:
        r = csv.reader(f)
        next(r)
        for rec in r:
            label = float(rec[0])
            dense = [float(x) if x else nan for x in rec[1:14]]
            ids = [int(x, 16) if x else None for x in rec[14:40]]
            rows += 1
    del label, dense, ids
    return rows, time.perf_counter() - w0, time.process_time() - c0


def pyarrow_csv(path):
    import pyarrow
    import pyarrow.csv as pc

    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)
    w0, c0 = time.perf_counter(), time.process_time()
    t = pc.read_csv(path, read_options=pc.ReadOptions(use_threads=False))
    return t.num_rows, time.perf_counter() - w0, time.process_time() - c0


def main():
    path = sys.argv[1]
    rows, wall, cpu = python_csv(path)
    print(f"baseline python-csv rows {rows} seconds {wall:.3f} cpu {cpu:.3f}", flush=True)
    try:
        rows, wall, cpu = pyarrow_csv(path)
    except ImportError:
        print("baseline pyarrow-csv unavailable (no pyarrow in this python)", flush=True)
        return
    print(f"baseline pyarrow-csv rows {rows} seconds {wall:.3f} cpu {cpu:.3f}", flush=True)


if __name__ == "__main__":
    main()
