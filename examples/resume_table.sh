#!/usr/bin/env bash
# Resume at another world size, as a user would (issue 28's table): the
# sessions example job (examples/jobs/sessions.json over a generated table of
# 100,000 rows, dynamic sharding, one epoch) read by W ranks with
#   sluice read --master --rank R --world-size W --limit N --ids --token-out
# then started again from every rank's token (`sluice jobs resubmit` when the
# number of ranks stays, else `jobs delete` + `submit --resume-token ...
# --ranks W2`) and read to the end by W2 ranks. Prints one table row per
# case: samples delivered before + after, distinct, delivered twice.
#
#   examples/resume_table.sh [BUILD_DIR]     (default build)
set -euo pipefail
build=${1:-build}
sluice=$(cd "$build" && pwd)/sluice
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/sluice-resume-table-XXXXXX)
pids=()
cleanup() {
  exec 2>/dev/null # the "Killed" notices of the processes stopped here
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$sluice" table gen --preset sessions --rows 100000 --stripe-rows 1000 --table "$work/table" \
  --quiet >/dev/null
python3 - "$here/jobs/sessions.json" "$work/table" "$work/job.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["source"]["table"] = sys.argv[2]
json.dump(spec, open(sys.argv[3], "w"))
EOF
echo secret >"$work/admin.token"
ctl=127.0.0.1:$(port)
adm=127.0.0.1:$(port)
"$sluice" master --listen "$ctl" --admin "$adm" --state "$work/state" \
  --token-file "$work/admin.token" --lease-timeout-ms 2000 >"$work/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://$adm/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
auth=(--admin "$adm" --token-file "$work/admin.token")
job=sessions-train

workers=()
start_workers() {
  for i in 1 2; do
    "$sluice" worker --master "$ctl" --job-id "$job" --listen 127.0.0.1:0 \
      --worker-id "w$1-$i" >>"$work/worker.log" 2>&1 &
    workers+=($!)
    pids+=($!)
  done
}
stop_workers() {
  for p in "${workers[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  workers=()
}

# read W ranks (limit: batches each, 0: to the end) into $work/$1.R
read_ranks() {
  local tag=$1 world=$2 limit=$3 rp=()
  for ((r = 0; r < world; r++)); do
    local extra=()
    [ "$limit" -gt 0 ] && extra=(--limit "$limit" --token-out "$work/$tag.tok.$r")
    "$sluice" read --master "$ctl" --job "$job" --rank "$r" --world-size "$world" --ids --quiet \
      --timeout 60000 "${extra[@]}" >"$work/$tag.ids.$r" 2>"$work/$tag.err.$r" &
    rp+=($!)
  done
  for p in "${rp[@]}"; do wait "$p"; done
}

count() {
  cat "$work"/"$1".ids.* "$work"/"$2".ids.* | python3 -c '
import collections, sys
c = collections.Counter(int(x) for line in sys.stdin for x in line.split())
n = sum(c.values()); print("%d %d %d" % (n, len(c), sum(v - 1 for v in c.values() if v > 1)))'
}

echo "| first run | sharding | tokens | resumed with | how | delivered | distinct | delivered twice |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
case_no=0
run_case() { # W N W2 [SHARDING]
  local w=$1 n=$2 w2=$3 sharding=${4:-dynamic} how
  case_no=$((case_no + 1))
  "$sluice" submit --job "$work/job.json" --ranks "$w" --sharding "$sharding" --min-workers 2 \
    "${auth[@]}" >/dev/null
  start_workers "$case_no-a"
  read_ranks "c$case_no-a" "$w" "$n"
  stop_workers
  toks=()
  for ((r = 0; r < w; r++)); do toks+=("$work/c$case_no-a.tok.$r"); done
  if [ "$w2" = "$w" ]; then
    how="jobs resubmit"
    "$sluice" jobs resubmit "$job" $(printf -- '--token %s ' "${toks[@]}") "${auth[@]}" >/dev/null
  else
    how="delete + submit"
    "$sluice" jobs delete "$job" "${auth[@]}" >/dev/null
    "$sluice" submit --job "$work/job.json" --ranks "$w2" --sharding "$sharding" --min-workers 2 \
      $(printf -- '--resume-token %s ' "${toks[@]}") "${auth[@]}" >/dev/null
  fi
  start_workers "$case_no-b"
  read_ranks "c$case_no-b" "$w2" 0
  stop_workers
  read -r delivered distinct twice <<<"$(count "c$case_no-a" "c$case_no-b")"
  printf '| %s rank%s, %s batches%s | %s | %s | %s rank%s | %s | %s | %s | %s |\n' "$w" \
    "$([ "$w" = 1 ] || echo s)" "$n" "$([ "$w" = 1 ] || echo " each")" "$sharding" "$w" "$w2" \
    "$([ "$w2" = 1 ] || echo s)" "$how" "$delivered" "$distinct" "$twice"
  "$sluice" jobs delete "$job" "${auth[@]}" >/dev/null
}

run_case 1 20 1
run_case 1 20 2
run_case 2 10 2
run_case 2 20 2
run_case 2 20 3
run_case 3 12 2
run_case 2 20 1
run_case 4 8 3
run_case 1 20 4
# static sharding: the resumed job re-partitions the rows left between its ranks
run_case 2 20 2 static
run_case 2 20 3 static
run_case 3 12 2 static
run_case 4 8 3 static
run_case 1 20 4 static
run_case 2 20 1 static
