#!/usr/bin/env bash
# The trainer client's CPU with and without the zero-copy hand-over
# (docs/PROTOCOL.md "Zero copy: a hold on the heap"): `sluice worker
# --threads 1` serving a generated criteo table (log1p x13, sigrid_hash
# x26, batches of 4096, one epoch) to `sluice read` on the same machine,
# the reader reading each frame in place (the default) or copying it out of
# the heap ($SLUICE_TRAINER_SHM_COPY=1), in alternating rounds. Prints each
# run's reader and worker CPU (perf stat task-clock, ms) and samples/s,
# the medians per mode and the median over rounds of copy / in place, and
# the load average before and after. Figures are printed, never checked.
#
# usage: bench/shm_read_cpu.sh [ROWS] [ROUNDS]
#   defaults: 1000000 7; SLUICE_BINARY: the sluice program (build/sluice)
set -euo pipefail
rows=${1:-1000000}
rounds=${2:-7}
sluice=${SLUICE_BINARY:-$(dirname "$0")/../build/sluice}
dir=$(mktemp -d /tmp/sluice-bench-shm-read-XXXXXX)
trap 'rm -rf "$dir"' EXIT

echo "shm_read_cpu: criteo, $rows rows, log1p x13, sigrid_hash x26, batches of 4096, 1 epoch;" \
  "sluice worker --threads 1 -> sluice read, in place / copied out, $rounds alternating rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) online cores)"
"$sluice" table gen --preset criteo --rows "$rows" --table "$dir/t" --files 1 --seed 1 > /dev/null 2> "$dir/gen.err" ||
  { cat "$dir/gen.err" >&2; exit 1; }
{
  printf '{"id":"shm-read","source":{"table":"%s"},"transforms":[' "$dir/t"
  for i in $(seq 1 13); do printf '{"op":"log1p","feature":"I%d"},' "$i"; done
  for i in $(seq 1 26); do
    printf '{"op":"sigrid_hash","feature":"C%d","table_size":10000000,"salt":%d}' "$i" "$i"
    [ "$i" -lt 26 ] && printf ','
  done
  printf '],"batch":{"size":4096}}\n'
} > "$dir/job.json"

# One run ($1: 1 to copy): prints "reader_ms worker_ms samples/s".
one() {
  : > "$dir/w.out"
  perf stat -x, -e task-clock -o "$dir/w.perf" "$sluice" worker --job "$dir/job.json" \
    --listen 127.0.0.1:0 --threads 1 --exit-when-done > "$dir/w.out" 2> "$dir/w.err" &
  local wp=$! addr="" i
  for i in $(seq 1 200); do
    addr=$(sed -n 's/^listening on //p' "$dir/w.out")
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "shm_read_cpu: the worker did not start: $(cat "$dir/w.err")" >&2; exit 1; }
  SLUICE_TRAINER_SHM_COPY=$1 perf stat -x, -e task-clock -o "$dir/r.perf" \
    "$sluice" read --worker "$addr" > "$dir/r.out" 2> "$dir/r.err" || true
  wait "$wp" || true
  printf '%s %s %s\n' "$(awk -F, '/task-clock/ {printf "%.1f", $1; exit}' "$dir/r.perf")" \
    "$(awk -F, '/task-clock/ {printf "%.1f", $1; exit}' "$dir/w.perf")" \
    "$(awk '/samples\/s/ {print $1; exit}' "$dir/r.out")"
}
one 0 > /dev/null # warms the page cache

med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
rin="" rcp="" win="" wcp="" ratio="" c=0 i=0
for r in $(seq 1 "$rounds"); do
  first=$((r % 2))
  for m in $first $((1 - first)); do
    read -r rms wms sps <<< "$(one "$m")"
    name=$([ "$m" = 1 ] && echo "copied  " || echo "in place")
    printf '  round %d %s: reader %7.1f ms, worker %7.1f ms CPU, %s samples/s\n' "$r" "$name" \
      "$rms" "$wms" "$sps"
    if [ "$m" = 1 ]; then rcp+="$rms " wcp+="$wms " c=$rms; else rin+="$rms " win+="$wms " i=$rms; fi
  done
  ratio+="$(awk -v a="$c" -v b="$i" 'BEGIN{print a/b}') "
done
printf 'median reader CPU: in place %.1f ms, copied %.1f ms (%.2fx by round, copied / in place)\n' \
  "$(echo $rin | med)" "$(echo $rcp | med)" "$(echo $ratio | med)"
printf 'median worker CPU: in place %.1f ms, copied %.1f ms\n' "$(echo $win | med)" "$(echo $wcp | med)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
