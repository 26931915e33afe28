#!/usr/bin/env bash
# MovieLens end to end, from a clean checkout given the ratings file:
# ratings.csv -> session-shaped jsonl (examples/movielens_sessions.py) ->
# a sluice table (user_history stored once per session) -> a DPP worker
# running examples/jobs/movielens.json -> a trainer that reads one epoch
# (`sluice read`), then the worker's summary.
#
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
#   examples/movielens.sh ../shared/data/movielens-latest-small/ratings.csv
#
# usage: examples/movielens.sh RATINGS.csv [WORKDIR]
#   WORKDIR (default: a new temporary directory, kept) gets ml.jsonl, the
#   table ml/, the job spec movielens.json with the table's path in it, and
#   the worker's log. SLUICE names the sluice program (default build/sluice
#   beside this script's checkout); SLUICE_TIMEOUT_SCALE scales the waits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ratings=${1:?usage: examples/movielens.sh RATINGS.csv [WORKDIR]}
work=${2:-$(mktemp -d /tmp/sluice-movielens-XXXXXX)}
sluice=${SLUICE:-$here/../build/sluice}
scale=${SLUICE_TIMEOUT_SCALE:-1}
[ -x "$sluice" ] || { echo "movielens: no sluice program at $sluice (build first, or set SLUICE)" >&2; exit 1; }
[ -r "$ratings" ] || { echo "movielens: cannot read the ratings file $ratings" >&2; exit 1; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "movielens: working in $work"

python3 "$here/movielens_sessions.py" --ratings "$ratings" --output "$work/ml.jsonl"
rm -rf "$work/ml"
"$sluice" table import --format jsonl --input "$work/ml.jsonl" --table "$work/ml" \
    --partition ds=2016-10-16 --cluster --dedup-group history=user_history --quiet

# The spec names its table by an absolute path: point it at this one.
sed "s|\"/tmp/sluice-movielens\"|\"$work/ml\"|" "$here/jobs/movielens.json" >"$work/movielens.json"

: >"$work/worker.log" # there before the loop reads it (the worker's redirect opens it later)
"$sluice" worker --job "$work/movielens.json" --listen 127.0.0.1:0 --exit-when-done \
    >"$work/worker.log" 2>&1 &
worker=$!
trap 'kill $worker 2>/dev/null || true' EXIT
addr=""
for _ in $(seq $((200 * scale))); do
  addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$work/worker.log" | head -n 1)
  [ -n "$addr" ] && break
  kill -0 $worker 2>/dev/null || { cat "$work/worker.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "movielens: the worker did not listen within $((20 * scale)) s" >&2; exit 1; }

"$sluice" read --worker "$addr" --timeout $((30000 * scale))
wait $worker
trap - EXIT
sed -n '/^worker summary/,$p' "$work/worker.log"
