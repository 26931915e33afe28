#!/usr/bin/env bash
# A worker on every core, end to end (docs/WORKER.md "Threads"): `sluice
# worker --threads T` serving a generated criteo table (log1p x13,
# sigrid_hash x26, batches of 4096, EPOCHS epochs) to `sluice read` on the
# same machine, for each T in THREADS, in interleaved rounds (the order
# turning from round to round, so that other load on a shared machine
# falls on every T alike). Prints each run's samples/s as `sluice read`
# measures it, the median per T, the median over rounds of each run over
# the same round's first T, and the load average before and after.
# Figures are printed, never checked.
#
# usage: bench/threads_read.sh [ROWS] [ROUNDS] [THREADS...]
#   defaults: 2000000 5 1 2; SLUICE_BINARY: the sluice program (build/sluice)
set -euo pipefail
rows=${1:-2000000}
rounds=${2:-5}
shift $(($# < 2 ? $# : 2)) || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
epochs=${EPOCHS:-2}
sluice=${SLUICE_BINARY:-$(dirname "$0")/../build/sluice}
dir=$(mktemp -d /tmp/sluice-bench-threads-read-XXXXXX)
trap 'rm -rf "$dir"' EXIT

echo "threads_read: criteo, $rows rows (4 files), log1p x13, sigrid_hash x26, batches of 4096," \
  "$epochs epochs; sluice worker --threads T -> sluice read, $rounds interleaved rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) online cores)"
"$sluice" table gen --preset criteo --rows "$rows" --table "$dir/t" --files 4 > /dev/null 2> "$dir/gen.err" ||
  { cat "$dir/gen.err" >&2; exit 1; }
{
  printf '{"id":"threads-read","source":{"table":"%s"},"transforms":[' "$dir/t"
  for i in $(seq 1 13); do printf '{"op":"log1p","feature":"I%d"},' "$i"; done
  for i in $(seq 1 26); do
    printf '{"op":"sigrid_hash","feature":"C%d","table_size":10000000,"salt":%d}' "$i" "$i"
    [ "$i" -lt 26 ] && printf ','
  done
  printf '],"batch":{"size":4096,"epochs":%d}}\n' "$epochs"
} > "$dir/job.json"

# One run: the worker with $1 threads, read to the end; prints samples/s.
one() {
  # emptied here, not by the worker's redirection: that runs in the
  # background, and the loop below could read the last run's address
  : > "$dir/w.out"
  "$sluice" worker --job "$dir/job.json" --listen 127.0.0.1:0 --threads "$1" \
    --exit-when-done > "$dir/w.out" 2> "$dir/w.err" &
  local wp=$! addr="" i
  for i in $(seq 1 200); do
    addr=$(sed -n 's/^listening on //p' "$dir/w.out")
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "threads_read: the worker did not start: $(cat "$dir/w.err")" >&2; exit 1; }
  "$sluice" read --worker "$addr" > "$dir/r.out" 2> "$dir/r.err" || true
  wait "$wp" || true
  awk '/samples\/s/ {print $1; exit}' "$dir/r.out"
}
one "${threads[0]}" > /dev/null # warms the page cache

declare -A rate
nt=${#threads[@]}
for r in $(seq 1 "$rounds"); do
  for k in $(seq 0 $((nt - 1))); do
    t=${threads[$(((k + r) % nt))]}
    s=$(one "$t")
    rate[$t,$r]=$s
    printf '  round %d threads %3d: %s samples/s\n' "$r" "$t" "$s"
  done
done
echo "median of $rounds rounds:"
for t in "${threads[@]}"; do
  vals="" ratios=""
  for r in $(seq 1 "$rounds"); do
    vals+="${rate[$t,$r]} "
    ratios+="$(awk -v a="${rate[$t,$r]}" -v b="${rate[${threads[0]},$r]}" 'BEGIN{print a/b}') "
  done
  med=$(echo $vals | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
  medr=$(echo $ratios | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}')
  printf '  threads %3d: %.2f M samples/s, %.2fx the same round'"'"'s %d thread(s)\n' "$t" \
    "$(awk -v v="$med" 'BEGIN{print v/1e6}')" "$medr" "${threads[0]}"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
