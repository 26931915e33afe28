#!/usr/bin/env bash
# ctest movielens: examples/movielens.sh run as README.md and docs/TABLES.md
# show it, on the real MovieLens ratings of ../shared/data (skipped, exit
# 77, with a message when they are absent): all 100004 ratings
# reach the trainer (98 batches, none redelivered), and the worker dedups
# the user group.
# Environment: SLUICE_SOURCE_DIR, SLUICE_BINARY, SLUICE_TIMEOUT_SCALE.
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?} bin=${SLUICE_BINARY:?}
test=movielens
. "$(dirname "$0")/lib.sh"

ratings=$src/../shared/data/movielens-latest-small/ratings.csv
if [ ! -r "$ratings" ]; then
  echo "movielens: SKIPPED: the MovieLens ratings are not at $ratings (see ../shared/data/README.md)"
  exit 77
fi
command -v python3 >/dev/null || { echo "movielens: SKIPPED: no python3"; exit 77; }

SLUICE=$bin "$src/examples/movielens.sh" "$ratings" "$work/ml" >"$work/out.txt" 2>&1 \
  || fail "examples/movielens.sh failed: $(cat "$work/out.txt")"
expect() { grep -qF -- "$1" "$work/out.txt" || fail "output lacks '$1': $(cat "$work/out.txt")"; }
expect "movielens_sessions: 100004 samples, 6511 sessions, 671 users"
expect "batches 98  samples 100004  "
expect "rows read 100004, kept 100004"
expect "acknowledged 98 (100004 samples), redelivered 0"
expect "dedup group user: 100004 rows, 6599 unique"
echo "movielens: 100004 ratings through examples/jobs/movielens.json to the trainer"
