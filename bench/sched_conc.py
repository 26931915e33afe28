#!/usr/bin/env python3
"""How many of a worker's pipeline threads could run at once, from a
scheduler trace: a figure of the code's parallelism that other load on
the machine changes less than samples/s or cores used (docs/BENCHMARKS.md,
"A worker on every core", thr27).

    perf sched record -o sched.data build/bench_threads --threads 2 --rounds 1
    perf sched timehist -i sched.data | bench/sched_conc.py [--cores 2] [--timeline MS]

For each worker of the traced process (its threads sl-w-lane, sl-w-reader
and sl-w-xform, grouped by when they live), the time with 0, 1, 2 and 3+
of them runnable (running, or waiting for a CPU: timehist's run time and
scheduling delay) and the cores a machine of --cores idle cores could give
it: the integral of min(runnable, cores) over the worker's span. With
--timeline MS, a line per thread for the first MS ms, one character a ms:
'#' running, 'r' runnable, '.' a little of either, ' ' asleep.

A trace under heavy load loses events (perf's buffers) and shows threads
asleep that were not: read it from the runs with the shortest spans."""
import argparse
import collections
import re
import sys

PIPELINE = ("sl-w-lane", "sl-w-reader", "sl-w-xform")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--timeline", type=int, default=0)
    ap.add_argument("--pid", type=int, default=0, help="the process (default: the first bench_threads)")
    a = ap.parse_args()
    lines = sys.stdin.read().splitlines()
    pid = a.pid
    if not pid:
        for line in lines:
            m = re.search(r"\sbench_thread\S*\[\d+/(\d+)\]", line)
            if m:
                pid = int(m.group(1))
                break
    if not pid:
        sys.exit("sched_conc: no bench_threads process in the trace (give --pid)")
    pat = re.compile(r"^\s*([\d.]+)\s+\[\d+\]\s+(\S+)\[(\d+)/%d\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)" % pid)
    ev = collections.defaultdict(list)  # (tid, comm) -> [(ready, start, end)] in s
    for line in lines:
        m = pat.match(line)
        if not m or m.group(2) not in PIPELINE:
            continue
        t = float(m.group(1))
        delay, run = float(m.group(5)) / 1e3, float(m.group(6)) / 1e3
        ev[(int(m.group(3)), m.group(2))].append((t - run - delay, t - run, t))
    # a worker's threads are created together: group by overlapping lives
    groups, cur, cur_end = [], [], -1.0
    for k in sorted(ev):
        s, e = ev[k][0][0], ev[k][-1][2]
        if cur and s > cur_end:
            groups.append(cur)
            cur, cur_end = [], -1.0
        cur.append(k)
        cur_end = max(cur_end, e)
    if cur:
        groups.append(cur)
    for gi, g in enumerate(groups):
        pts = sorted(p for k in g for r, _, e in ev[k] for p in ((r, 1), (e, -1)))
        t0, t1 = pts[0][0], pts[-1][0]
        hist, n, last, cores = collections.Counter(), 0, t0, 0.0
        for t, d in pts:
            hist[min(n, 3)] += t - last
            cores += min(n, a.cores) * (t - last)
            last, n = t, n + d
        kinds = collections.Counter(c for _, c in g)
        print("worker %d (%s): span %.1f ms; runnable 0: %.1f ms, 1: %.1f, 2: %.1f, 3+: %.1f; "
              "on %d idle cores: %.2f cores" %
              (gi + 1, ", ".join("%d %s" % (v, k) for k, v in sorted(kinds.items())),
               (t1 - t0) * 1e3, hist[0] * 1e3, hist[1] * 1e3, hist[2] * 1e3, hist[3] * 1e3,
               a.cores, cores / (t1 - t0) if t1 > t0 else 0))
        for k in sorted(g) if a.timeline else []:
            row = ""
            for i in range(a.timeline):
                lo, hi = t0 + i / 1e3, t0 + (i + 1) / 1e3
                run = sum(max(0, min(hi, e) - max(lo, s)) for _, s, e in ev[k] if e > lo and s < hi)
                rdy = sum(max(0, min(hi, e) - max(lo, r)) for r, _, e in ev[k] if e > lo and r < hi)
                row += "#" if run > 5e-4 else "r" if rdy > 5e-4 else "." if rdy > 0 else " "
            print("  %-11s|%s" % (k[1], row))


if __name__ == "__main__":
    main()
