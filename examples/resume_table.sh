#!/usr/bin/env bash
# Resume at another world size, as a user would (issue 28's table): the
# sessions example job (examples/jobs/sessions.json over a generated table of
# 100,000 rows, dynamic sharding, one epoch) read by W ranks with
#   sluice read --master --rank R --world-size W --limit N --ids --token-out
# then started again from every rank's token (`sluice jobs resubmit` when the
# number of ranks stays, else `jobs delete` + `submit --resume-token ...
# --ranks W2`) and read to the end by W2 ranks. Prints one table row per
# case: samples delivered before + after, distinct, delivered twice. The
# deterministic rows run the same job in "order": "deterministic" and also
# check the global order: each rank's batch j before the resume is batch
# g = r + j W of an uninterrupted run's sequence, and the resumed ranks'
# batches merged by g' (rank g' mod W2) are that sequence less those
# batches, in order ("same global order").
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
spec["order"] = "deterministic"
json.dump(spec, open(sys.argv[3].replace(".json", "-det.json"), "w"))
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

# the deterministic order's rows: before (rank r's batch j is g = r + j W)
# and after (merged by g' = r + j W2) against the reference sequence
same_order() { # TAG_BEFORE W TAG_AFTER W2
  python3 - "$work/ref.ids.0" "$work/$1.ids" "$2" "$work/$3.ids" "$4" <<'EOF'
import sys
ref = open(sys.argv[1]).read().splitlines()
def ranks(prefix, w):
    return [open("%s.%d" % (prefix, r)).read().splitlines() for r in range(w)]
before, w = ranks(sys.argv[2], int(sys.argv[3])), int(sys.argv[3])
after, w2 = ranks(sys.argv[4], int(sys.argv[5])), int(sys.argv[5])
ok, handed = True, set()
for r, lines in enumerate(before):
    for j, line in enumerate(lines):
        g = r + j * w
        ok &= g < len(ref) and ref[g] == line
        handed.add(g)
left = [ref[g] for g in range(len(ref)) if g not in handed]
n = sum(len(x) for x in after)
merged = [after[g % w2][g // w2] if g // w2 < len(after[g % w2]) else None for g in range(n)]
print("yes" if ok and merged == left else "no")
EOF
}

echo "| first run | sharding | order | tokens | resumed with | how | delivered | distinct | delivered twice | same global order |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
case_no=0
ref_done=0
run_case() { # W N W2 [SHARDING [ORDER]]
  local w=$1 n=$2 w2=$3 sharding=${4:-dynamic} order=${5:-dynamic} how jobfile same="n/a"
  case_no=$((case_no + 1))
  jobfile=$work/job.json
  [ "$order" = deterministic ] && jobfile=$work/job-det.json
  if [ "$order" = deterministic ] && [ "$ref_done" = 0 ]; then
    # the reference: one rank, uninterrupted
    "$sluice" submit --job "$jobfile" --ranks 1 --min-workers 2 "${auth[@]}" >/dev/null
    start_workers "ref"
    read_ranks ref 1 0
    stop_workers
    "$sluice" jobs delete "$job" "${auth[@]}" >/dev/null
    ref_done=1
  fi
  "$sluice" submit --job "$jobfile" --ranks "$w" --sharding "$sharding" --min-workers 2 \
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
    "$sluice" submit --job "$jobfile" --ranks "$w2" --sharding "$sharding" --min-workers 2 \
      $(printf -- '--resume-token %s ' "${toks[@]}") "${auth[@]}" >/dev/null
  fi
  start_workers "$case_no-b"
  read_ranks "c$case_no-b" "$w2" 0
  stop_workers
  read -r delivered distinct twice <<<"$(count "c$case_no-a" "c$case_no-b")"
  if [ "$order" = deterministic ]; then same=$(same_order "c$case_no-a" "$w" "c$case_no-b" "$w2"); fi
  printf '| %s rank%s, %s batches%s | %s | %s | %s | %s rank%s | %s | %s | %s | %s | %s |\n' \
    "$w" "$([ "$w" = 1 ] || echo s)" "$n" "$([ "$w" = 1 ] || echo " each")" "$sharding" "$order" \
    "$w" "$w2" "$([ "$w2" = 1 ] || echo s)" "$how" "$delivered" "$distinct" "$twice" "$same"
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
# the deterministic order: the resumed ranks continue the same global sequence
run_case 2 20 2 dynamic deterministic
run_case 2 20 3 dynamic deterministic
run_case 3 12 2 dynamic deterministic
run_case 1 20 4 dynamic deterministic
