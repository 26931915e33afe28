#!/bin/bash
# One worker round (`sluice worker --job SPEC --threads 1` served to one
# `sluice read`) under cachegrind, with its last-level cache the size of
# one core's L2 (512 KiB, 8-way): instructions and simulated misses, the
# same from run to run, so a step's effect shows on a busy machine where
# CPU seconds swing by a quarter (docs/BENCHMARKS.md, "Parquet source,
# thirteenth pass"). Figures only, never pass or fail. About 30 s a round.
# Prefetches are not simulated: a prefetch's gain shows only in CPU time.
#
#   bench/parquet_source_cg.sh SLUICE SPEC [OUT]
#     SLUICE  the sluice binary; SPEC  a job spec (bench/parquet_source.py's
#     parquet job: {"id": "parquet", "source": {"parquet": FILE, "columns":
#     MAPPING}, "batch": {"size": 4096}}); OUT  cachegrind's output file
#     (default: a temporary one), for cg_annotate's per-function figures.
set -euo pipefail
sluice=${1:?usage: parquet_source_cg.sh SLUICE SPEC [OUT]}
spec=${2:?usage: parquet_source_cg.sh SLUICE SPEC [OUT]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${3:-$tmp/cg.out}
log=$tmp/worker.log
valgrind --tool=cachegrind --cache-sim=yes --LL=524288,8,64 --cachegrind-out-file="$out" \
    "$sluice" worker --job "$spec" --listen 127.0.0.1:0 --exit-when-done --threads 1 >"$log" 2>&1 &
worker=$!
addr=
for _ in $(seq 1 1200); do
    addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$log" | head -1)
    [ -n "$addr" ] && break
    sleep 0.05
done
if [ -z "$addr" ]; then
    kill "$worker" 2>/dev/null || true
    echo "parquet_source_cg: the worker never listened:" >&2
    cat "$log" >&2
    exit 1
fi
"$sluice" read --worker "$addr" | tail -2
wait "$worker"
grep -E "I +refs|D1 +misses|LLd misses|LL misses" "$log"
