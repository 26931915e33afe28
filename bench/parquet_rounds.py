#!/usr/bin/env python3
"""Round by round: bench/compare_loaders.py's sluice-parquet peer alone (a
`sluice worker --threads N` on a job, the Python client of this checkout,
prefetch 8, each batch made torch tensors by sluice.torch.batch_to_torch),
one worker process per round as there, for many short rounds, so that the
spread of the rates between rounds is seen in minutes (docs/BENCHMARKS.md,
"Parquet source into Python: the two rates").

Per round it prints the rate, the time the trainer loop spent in next()
(waiting for a batch) and converting, and for the steady part of the round
(batches 20 to 220) each worker and client thread's CPU time, its time
runnable but waiting for a CPU (/proc/<pid>/task/<tid>/schedstat) and how
often it was found on the same CPU as the worker's reader thread (sampled
every 4th batch). The Parquet decode helper beside the reader (docs/PARQUET.md,
"Decoding on several threads") is the thread named like the process that is
not its main thread.

With several --sluice binaries (or --threads values) the rounds alternate
between them, in a turning order.

  "$(ops/ray-venv)/bin/python" bench/parquet_rounds.py --job /tmp/rayq/pq.json \\
      --sluice /tmp/a/sluice --sluice build/sluice --rounds 8

Figures only: nothing passes or fails on time.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import sluice  # noqa: E402
import sluice.torch  # noqa: E402
import torch  # noqa: E402

WINDOW = (20, 220)  # the batches between which the threads are measured
PLACE_EVERY = 4  # sample the threads' CPUs every this many batches


def threads_of(pid):
    """tid -> (name, run ns, runnable-waiting ns, last CPU)."""
    out = {}
    base = "/proc/%d/task" % pid
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for t in tids:
        try:
            with open("%s/%s/comm" % (base, t)) as f:
                name = f.read().strip()
            with open("%s/%s/schedstat" % (base, t)) as f:
                run, wait = (int(x) for x in f.read().split()[:2])
            with open("%s/%s/stat" % (base, t)) as f:
                cpu = int(f.read().rsplit(")", 1)[1].split()[36])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
        out[t] = (name, run, wait, cpu)
    return out


def role(pid, tid, name, exe):
    if int(tid) == pid:
        return "main"
    if name == exe[:15]:
        return "pq-helper"  # an unnamed thread: the Parquet decode helper
    return name


def start_worker(binary, job, threads, extra):
    p = subprocess.Popen([binary, "worker", "--job", job, "--listen", "127.0.0.1:0",
                          "--threads", str(threads)] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        if "listening on" in line:
            lines = []
            t = threading.Thread(target=lambda: [lines.append(x) for x in p.stdout], daemon=True)
            t.start()
            return p, line.split("listening on", 1)[1].split()[0], lines, t
    raise SystemExit("sluice worker exited (%s) before listening" % p.wait())


def pin(pid, exe, how):
    """Pin the reader and the Parquet decode helper to one CPU (together)
    or to two (apart); every other thread stays free. @return whether both
    threads were found."""
    ts = threads_of(pid)
    rd = [t for t, v in ts.items() if v[0] == "sl-w-reader"]
    hp = [t for t, v in ts.items() if role(pid, t, v[0], exe) == "pq-helper"]
    if not rd or not hp:
        return False
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(int(rd[0]), {cpus[0]})
    for t in hp:
        os.sched_setaffinity(int(t), {cpus[0] if how == "together" else cpus[-1]})
    return True


def one_round(a, binary, threads, how="none"):
    p, addr, lines, reader_t = start_worker(binary, a.job, threads, a.worker_args.split())
    exe = os.path.basename(binary)
    waits, convs = [], []
    same = {}  # role -> [samples on the reader's CPU, samples]
    th0 = th1 = me0 = me1 = None
    tw0 = tw1 = 0.0
    n = 0
    t0 = time.perf_counter()
    try:
        with sluice.Client(addr, prefetch=a.prefetch) as c:
            while True:
                s0 = time.perf_counter()
                b = c.next()
                s1 = time.perf_counter()
                if b is None:
                    break
                with b:
                    x = sluice.torch.batch_to_torch(b)
                    n += int(x["sparse"]["stride"])
                s2 = time.perf_counter()
                waits.append(s1 - s0)
                convs.append(s2 - s1)
                k = len(waits)
                if how != "none" and k <= 2 and not pin(p.pid, exe, how) and k == 2:
                    raise SystemExit("--pin %s: no reader and decode helper threads found" % how)
                if k == WINDOW[0]:
                    th0, me0, tw0 = threads_of(p.pid), threads_of(os.getpid()), s2
                elif k == WINDOW[1]:
                    th1, me1, tw1 = threads_of(p.pid), threads_of(os.getpid()), s2
                if WINDOW[0] < k < WINDOW[1] and k % PLACE_EVERY == 0:
                    now = threads_of(p.pid)
                    rcpu = [v[3] for v in now.values() if v[0] == "sl-w-reader"]
                    for t, v in now.items():
                        r = role(p.pid, t, v[0], exe)
                        if rcpu and r != "sl-w-reader":
                            e = same.setdefault(r, [0, 0])
                            e[0] += v[3] == rcpu[0]
                            e[1] += 1
    finally:
        secs = time.perf_counter() - t0
        p.send_signal(2)
        p.wait()
        reader_t.join(5)
    return {"n": n, "secs": secs, "waits": waits, "convs": convs, "th": (th0, th1),
            "me": (me0, me1), "window": tw1 - tw0, "same": same, "lines": lines, "exe": exe,
            "pid": p.pid}


def thread_table(pair, pid, exe, same):
    a, b = pair
    if not a or not b:
        return []
    rows = {}
    for t, v in b.items():
        z = a.get(t, (v[0], 0, 0, v[3]))
        r = role(pid, t, v[0], exe) if pid else v[0]
        e = rows.setdefault(r, [0, 0.0, 0.0])
        e[0] += 1
        e[1] += (v[1] - z[1]) / 1e6
        e[2] += (v[2] - z[2]) / 1e6
    out = []
    for r, (k, run, wait) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        if run < 0.5:
            continue
        s = same.get(r)
        on = (" on the reader's CPU %3.0f%%" % (100.0 * s[0] / s[1])) if s and s[1] else ""
        out.append("%-12s%s run %6.1f ms, waiting for a CPU %6.1f ms%s" % (
            r, " x%d" % k if k > 1 else "   ", run, wait, on))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True, help="job spec (JSON) of a worker on Parquet")
    ap.add_argument("--sluice", action="append", required=True,
                    help="sluice binary; given more than once, rounds alternate")
    ap.add_argument("--threads", default="2", help="worker --threads; a comma list alternates")
    ap.add_argument("--rounds", type=int, default=8, help="rounds per binary and threads")
    ap.add_argument("--prefetch", type=int, default=8, help="client prefetch (compare_loaders: 8)")
    ap.add_argument("--worker-args", default="", help="more worker flags")
    ap.add_argument("--pin", default="none",
                    help="none, together or apart (the reader and the Parquet decode helper on "
                         "one CPU or two, set at the first batch); a comma list alternates")
    ap.add_argument("--quiet-threads", action="store_true", help="rates only")
    a = ap.parse_args()
    torch.set_num_threads(1)
    # one thread has no decode helper to pin
    cfgs = [(b, t, h) for b in a.sluice for t in a.threads.split(",") for h in a.pin.split(",")
            if h == "none" or t != "1"]
    if any(h not in ("none", "together", "apart") for _, _, h in cfgs):
        raise SystemExit("--pin: none, together or apart")
    print("job %s; client %s, prefetch %d; %d cores; load %s" % (
        a.job, sluice.client.library_path(), a.prefetch, os.cpu_count() or 1,
        open("/proc/loadavg").read().split()[0]))
    one_round(a, *cfgs[0])  # warm-up: the page cache, the allocator
    res = {c: [] for c in cfgs}
    for r in range(a.rounds):
        order = cfgs[r % len(cfgs):] + cfgs[:r % len(cfgs)]
        for b, t, h in order:
            o = one_round(a, b, t, h)
            rate = o["n"] / o["secs"]
            res[(b, t, h)].append(rate)
            w, cv = np.array(o["waits"]) * 1e3, np.array(o["convs"]) * 1e3
            print("%s --threads %s%s round %d: %d samples, %.0f samples/s; next() waits ms median "
                  "%.3f p90 %.3f, convert median %.3f; load %s" % (
                      b, t, "" if h == "none" else " pinned " + h, r, o["n"], rate, np.median(w), np.percentile(w, 90), np.median(cv),
                      open("/proc/loadavg").read().split()[0]), flush=True)
            if a.quiet_threads:
                continue
            print("    batches %d-%d in %.1f ms:" % (WINDOW[0], WINDOW[1], o["window"] * 1e3))
            for line in thread_table(o["th"], o["pid"], o["exe"], o["same"]):
                print("    worker " + line)
            for line in thread_table(o["me"], 0, "", {}):
                print("    client " + line)
            for line in o["lines"]:
                if "back-pressure" in line or "shared memory:" in line:
                    print("    |" + line.strip())
    print("\nmedian (min-max) samples/s over %d rounds each:" % a.rounds)
    for (b, t, h), v in res.items():
        print("  %s --threads %s%s: %.0f (%.0f-%.0f); rounds %s" % (
            b, t, "" if h == "none" else " pinned " + h, statistics.median(v), min(v), max(v),
            " ".join("%.2f" % (x / 1e6) for x in v)))


if __name__ == "__main__":
    main()
