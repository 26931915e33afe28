#!/usr/bin/env python3
"""CPU a sample by thread, end to end (issue 27 item 1): `sluice worker
--threads T` serving the job of bench/threads_read.sh (a generated criteo
table, log1p x13, sigrid_hash x26, batches of 4096, 2 epochs) to `sluice
read` over shared memory, each process under `perf record -e cpu-clock`
(software events: no hardware counters needed). Each build given runs once
a round, the order turning from round to round; prints each run and, per
build, the median over rounds of every thread class's CPU in ms and in ns
a sample, the non-lane total (everything but the lanes: what two cores
share with them), samples/s, and the load average before and after.
Figures are printed, never checked. What a loaded machine changes least is
the CPU a sample, not samples/s.

Thread classes, by the names the threads set: the worker's sl-w-lane,
sl-w-reader, sl-w-xform, "server" (sl-w-recv, sl-w-send, sl-w-accept,
sl-w-shm; unnamed threads in builds before they were named) and its main
thread; `sluice read`'s main thread (sl_trainer_next, releases, ACKs) and
"conn" (sl-t-conn: receives and decodes).

usage: bench/threads_read_cpu.py [--rows N] [--rounds R] [--threads T]
                                 [--freq HZ] NAME=SLUICE_BINARY ...
  e.g. bench/threads_read_cpu.py main=/tmp/main-sluice this=build/sluice
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CLASSES = ["w:lane", "w:reader", "w:xform", "w:server", "w:main", "r:main", "r:conn"]
SERVER = {"sl-w-recv", "sl-w-send", "sl-w-accept", "sl-w-shm"}


def job(table, epochs):
    tf = [f'{{"op":"log1p","feature":"I{i}"}}' for i in range(1, 14)]
    tf += [f'{{"op":"sigrid_hash","feature":"C{i}","table_size":10000000,"salt":{i}}}'
           for i in range(1, 27)]
    return (f'{{"id":"threads-read","source":{{"table":"{table}"}},"transforms":[{",".join(tf)}],'
            f'"batch":{{"size":4096,"epochs":{epochs}}}}}\n')


def by_thread(data):
    """{(tid, comm): samples} of a perf.data file."""
    out = subprocess.run(["perf", "report", "-i", data, "--sort", "pid,comm", "--stdio",
                          "-g", "none", "-F", "sample,pid,comm"],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        f = line.split()
        if not line.strip() or line.startswith("#") or len(f) < 3:
            continue
        res[(int(f[1].split(":")[0]), f[2])] = int(f[0])
    return res


def classify(side, samples, ms_a_sample):
    """side 'w' or 'r': CPU ms by class; the lowest tid is the main thread."""
    main_tid = min(t for t, _ in samples)
    out = {}
    for (tid, comm), n in samples.items():
        if tid == main_tid:
            c = "main"
        elif comm.startswith("sl-w-") and comm not in SERVER:
            c = comm[len("sl-w-"):]
        elif side == "w":
            c = "server"
        else:
            c = "conn"
        out[f"{side}:{c}"] = out.get(f"{side}:{c}", 0.0) + n * ms_a_sample
    return out


def one(sluice, d, threads, freq):
    """One run; returns ({class: ms}, samples/s, samples)."""
    wout = open(os.path.join(d, "w.out"), "w+")
    rec = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-o"]
    w = subprocess.Popen(rec + [os.path.join(d, "w.data"), "--", sluice, "worker", "--job",
                                os.path.join(d, "job.json"), "--listen", "127.0.0.1:0",
                                "--threads", str(threads), "--exit-when-done"],
                         stdout=wout, stderr=subprocess.DEVNULL)
    addr = None
    for _ in range(200):
        wout.seek(0)
        for line in wout.read().splitlines():
            if line.startswith("listening on "):
                addr = line[len("listening on "):]
        if addr:
            break
        time.sleep(0.05)
    if not addr:
        w.kill()
        sys.exit("threads_read_cpu: the worker did not start")
    r = subprocess.run(rec + [os.path.join(d, "r.data"), "--", sluice, "read", "--worker", addr],
                       capture_output=True, text=True, timeout=600)
    w.wait(timeout=600)
    rate = samples = 0.0
    for line in r.stdout.splitlines():
        f = line.split()
        if "samples/s" in line:
            rate = float(f[0])
        if line.startswith("batches "):
            samples = float(f[3])
    ms = 1000.0 / freq
    cpu = classify("w", by_thread(os.path.join(d, "w.data")), ms)
    cpu.update(classify("r", by_thread(os.path.join(d, "r.data")), ms))
    return cpu, rate, samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2000000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--freq", type=int, default=4000)
    ap.add_argument("builds", nargs="+", help="NAME=SLUICE_BINARY")
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in a.builds]
    if shutil.which("perf") is None:
        sys.exit("threads_read_cpu: needs perf (linux-perf)")
    d = tempfile.mkdtemp(prefix="sluice-bench-threads-read-cpu-")
    try:
        subprocess.run([builds[0][1], "table", "gen", "--preset", "criteo", "--rows", str(a.rows),
                        "--table", os.path.join(d, "t"), "--files", "4"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(d, "job.json"), "w") as f:
            f.write(job(os.path.join(d, "t"), 2))
        print(f"threads_read_cpu: criteo, {a.rows} rows, 2 epochs, --threads {a.threads}, "
              f"perf -F {a.freq}, {a.rounds} interleaved rounds")
        print("load average before:", " ".join(open("/proc/loadavg").read().split()[:3]))
        one(builds[0][1], d, a.threads, a.freq)  # warms the page cache
        runs = {name: [] for name, _ in builds}
        for r in range(a.rounds):
            for k in range(len(builds)):
                name, sluice = builds[(k + r) % len(builds)]
                cpu, rate, samples = one(sluice, d, a.threads, a.freq)
                runs[name].append((cpu, rate, samples))
                print(f"  round {r + 1} {name}: {rate / 1e6:.2f} M samples/s; ms: " +
                      " ".join(f"{c} {cpu.get(c, 0):.0f}" for c in CLASSES), flush=True)
        print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
        print(f"median of {a.rounds} rounds: ms of CPU (ns a sample)")
        for name, _ in builds:
            rs = runs[name]
            n = statistics.median(s for _, _, s in rs) or 1.0
            med = {c: statistics.median(cpu.get(c, 0.0) for cpu, _, _ in rs) for c in CLASSES}
            other = statistics.median(sum(v for c, v in cpu.items() if c != "w:lane")
                                      for cpu, _, _ in rs)
            print(f"  {name}: " + "  ".join(f"{c} {v:.0f} ({v * 1e6 / n:.1f})"
                                            for c, v in med.items()) +
                  f"  | non-lane {other:.0f} ({other * 1e6 / n:.1f} ns a sample)"
                  f"  | {statistics.median(r for _, r, _ in rs) / 1e6:.2f} M samples/s")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
