#!/usr/bin/env bash
# The cores a worker on a Parquet job uses, end to end (docs/PARQUET.md
# "Decoding on several threads"): `sluice worker --job SPEC --threads T
# --exit-when-done` serving one `sluice read` on the same machine, for
# this build and a baseline build, in pairs whose order turns from round
# to round (other load on a shared machine, and the page cache, fall on
# both alike). Prints each run's samples/s (as `sluice read` prints it),
# the worker's CPU (user + sys), its wall time and their quotient, the
# cores it used; then per build the medians. Figures only, never checked.
#
# usage: bench/parquet_cores.sh SPEC [THREADS] [ROUNDS]
#   defaults: 2 3; SLUICE_BINARY: this build (build/sluice);
#   SLUICE_BASELINE: the other build (none: this build alone)
set -euo pipefail
spec=$1
threads=${2:-2}
rounds=${3:-3}
sluice=${SLUICE_BINARY:-$(dirname "$0")/../build/sluice}
base=${SLUICE_BASELINE:-}
dir=$(mktemp -d /tmp/sluice-bench-pq-cores-XXXXXX)
trap 'rm -rf "$dir"' EXIT

# one worker and its reader: "samples/s cpu_s wall_s cores"
one() {
    local bin=$1 log=$dir/w.log timef=$dir/t.out
    rm -f "$log" "$timef"
    /usr/bin/time -o "$timef" -f "%U %S %e" "$bin" worker --job "$spec" --listen 127.0.0.1:0 \
        --threads "$threads" --exit-when-done >"$log" 2>&1 &
    local pid=$! addr=""
    for _ in $(seq 200); do
        addr=$(grep -o 'listening on [^ ]*' "$log" 2>/dev/null | awk '{print $3}') || true
        [ -n "$addr" ] && break
        sleep 0.05
    done
    [ -n "$addr" ] || { echo "worker did not listen: $(cat "$log")" >&2; exit 1; }
    local rate
    rate=$("$bin" read --worker "$addr" 2>&1 | grep -o '[0-9.,]* samples/s' | tr -d ', samples/')
    wait "$pid"
    read -r u s e <"$timef"
    awk -v r="$rate" -v u="$u" -v s="$s" -v e="$e" \
        'BEGIN { printf "%d %.2f %.2f %.2f\n", r, u + s, e, (u + s) / e }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "spec $spec, --threads $threads, $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$dir/this"
: >"$dir/base"
for r in $(seq "$rounds"); do
    order="this base"
    [ $((r % 2)) -eq 0 ] && order="base this"
    for who in $order; do
        [ "$who" = base ] && [ -z "$base" ] && continue
        bin=$sluice
        [ "$who" = base ] && bin=$base
        line=$(one "$bin")
        echo "$line" >>"$dir/$who"
        read -r rate cpu wall cores <<<"$line"
        echo "round $r $who: $rate samples/s, worker CPU $cpu s, wall $wall s, $cores cores"
    done
done
for who in this base; do
    [ -s "$dir/$who" ] || continue
    echo "median $who: $(cut -d' ' -f1 "$dir/$who" | median) samples/s," \
        "$(cut -d' ' -f2 "$dir/$who" | median) s CPU, $(cut -d' ' -f4 "$dir/$who" | median) cores"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
