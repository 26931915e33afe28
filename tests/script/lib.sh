# Shared by the script tests (sourced, not a test itself): a scratch
# directory removed on exit with every process started through start_worker,
# fail() naming the test, and start_worker, which waits (bounded, scaled by
# SLUICE_TIMEOUT_SCALE) for a `sluice worker`'s "listening on" line.
# Set before sourcing: test (the test's name).
scale=${SLUICE_TIMEOUT_SCALE:-1}
work=$(mktemp -d "/tmp/sluice-$test-XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "$test: $*" >&2; exit 1; }

# start_worker SLUICE JOB.json NAME: a worker on a free port; sets $addr and
# appends its pid to pids.
start_worker() {
  local log=$work/worker-$3.log
  : >"$log" # there before the loop reads it (the worker's redirect opens it later)
  "$1" worker --job "$2" --listen 127.0.0.1:0 >"$log" 2>&1 &
  pids+=($!)
  addr=""
  for _ in $(seq $((200 * scale))); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$addr" ] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || fail "worker exited: $(cat "$log")"
    sleep 0.1
  done
  fail "worker did not listen within $((20 * scale)) s"
}
