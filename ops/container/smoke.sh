#!/bin/bash
# Runs INSIDE the sluice image, as its own user, on a read-only root with a
# /tmp of its own, without network but loopback (ctest container_image
# mounts it: tests/script/container_image_test.sh). Checks that the image is
# what the Containerfile promises and that a whole fleet runs in it:
#   - it runs as uid 10001, `sluice help` lists the commands;
#   - no compiler, build tool or -dev package, and both binaries find every
#     library they link;
#   - the root filesystem is not writable (the manifests mount it read-only);
#   - a master (cluster secret, admin token, journal in /tmp), a job
#     submitted through the admin endpoint, a worker under the master and a
#     trainer (`sluice read --master`) on a 20,000-row table, two epochs:
#     every sample id arrives exactly once in each epoch.
# Bounded: every wait is `timeout`, scaled by SLUICE_TIMEOUT_SCALE.
set -euo pipefail
scale=${SLUICE_TIMEOUT_SCALE:-1}
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 10001 ] || fail "runs as uid $(id -u), not 10001"
for cmd in master worker read submit table; do
  sluice help | grep -q "^  $cmd " || fail "'sluice help' does not list $cmd"
done
for tool in gcc cc cmake make pkg-config protoc-c; do
  if command -v "$tool" >/dev/null; then fail "$tool is in the runtime image"; fi
done
dev=$(dpkg-query -W -f='${Package}\n' | grep -- '-dev$' || true)
[ -z "$dev" ] || fail "development packages in the runtime image: $(echo $dev)"
ldd /usr/local/bin/sluice /usr/local/lib/libsluice_trainer.so.2 > /tmp/ldd.txt
if grep -q 'not found' /tmp/ldd.txt; then fail "missing libraries: $(grep 'not found' /tmp/ldd.txt)"; fi
if touch /usr/local/smoke 2>/dev/null; then fail "the root filesystem is writable"; fi
echo "smoke: uid 10001, $(dpkg-query -W -f='${Package}\n' | wc -l) packages, no build tools, libraries resolved"

w=/tmp/smoke
mkdir -p "$w"
head -c 32 /dev/urandom | base64 > "$w/cluster-secret"
head -c 24 /dev/urandom | base64 > "$w/admin-token"
rows=20000
sluice table gen --preset sessions --rows $rows --table "$w/table" --quiet --no-sync
echo "{\"id\": \"smoke\", \"source\": {\"table\": \"$w/table\"}, \"batch\": {\"size\": 1000, \"epochs\": 2}}" \
  > "$w/job.json"

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
sluice master --listen 127.0.0.1:7070 --admin 127.0.0.1:7071 --state "$w/state" \
  --token-file "$w/admin-token" --cluster-secret-file "$w/cluster-secret" > "$w/master.log" 2>&1 &
pids+=($!)
for _ in $(seq $((100 * scale))); do
  grep -q '^sluice master: control' "$w/master.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "the master exited: $(cat "$w/master.log")"
  sleep 0.1
done
grep -q '^sluice master: control' "$w/master.log" || fail "the master did not start in $((10 * scale)) s"

timeout $((30 * scale)) sluice submit --admin 127.0.0.1:7071 --job "$w/job.json" \
  --token-file "$w/admin-token" > "$w/submit.json" || fail "submit: $(cat "$w/submit.json")"
grep -q '"total_rows":20000' "$w/submit.json" || fail "submit answered $(cat "$w/submit.json")"

sluice worker --master 127.0.0.1:7070 --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
  --worker-id smoke-w1 --cluster-secret-file "$w/cluster-secret" --memory-limit 64M --threads 1 \
  > "$w/worker.log" 2>&1 &
pids+=($!)
timeout $((60 * scale)) sluice read --master 127.0.0.1:7070 --job smoke \
  --cluster-secret-file "$w/cluster-secret" --ids > "$w/read.txt" ||
  fail "read: $(tail -n 5 "$w/read.txt"); worker: $(tail -n 5 "$w/worker.log")"

# One split per epoch and one worker: epoch 1 is leased only once epoch 0 is
# done, so the first $rows ids are epoch 0 and the next $rows epoch 1.
grep -E '^[0-9]+( [0-9]+)*$' "$w/read.txt" | tr ' ' '\n' > "$w/ids"
[ "$(wc -l < "$w/ids")" -eq $((2 * rows)) ] || fail "$(wc -l < "$w/ids") sample ids, not $((2 * rows))"
seq 0 $((rows - 1)) > "$w/expected"
for epoch in 0 1; do
  sed -n "$((epoch * rows + 1)),$(((epoch + 1) * rows))p" "$w/ids" | sort -n > "$w/epoch"
  cmp -s "$w/epoch" "$w/expected" || fail "epoch $epoch: the sample ids are not 0..$((rows - 1)) once each"
done
echo "smoke: master + worker + trainer: $rows samples exactly once in each of 2 epochs;" \
  "$(grep -E '^batches' "$w/read.txt")"
