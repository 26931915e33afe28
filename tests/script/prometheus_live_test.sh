#!/usr/bin/env bash
# ctest prometheus_live: ops/prometheus/live-test: a master, workers and a
# reading trainer on loopback, Debian's Prometheus server scraping them as
# ops/prometheus/scrape.yml says (1 s interval) with ops/prometheus/rules.yml
# loaded; every query of ops/grafana/sluice.json and every metric selector
# of the rules must return data while the job runs, every rule must
# evaluate without error and none may fire; with the Kafka test broker (the
# ctest fixture) a stream job gives the Kafka-lag alert its input. About
# 20 s. Without the
# prometheus binary it is SKIPPED (exit 77), or fails with
# SLUICE_REQUIRE_PROMETHEUS=1 (what ops/test sets).
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?}
set +e
"$src/ops/prometheus/live-test" --sluice "${SLUICE_BINARY:?}" --trainer-lib "${SLUICE_TRAINER_LIB:?}"
rc=$?
set -e
if [ "$rc" = 77 ] && [ "${SLUICE_REQUIRE_PROMETHEUS:-0}" = 1 ]; then
  echo "prometheus_live: FAILED: no prometheus server, and SLUICE_REQUIRE_PROMETHEUS=1" >&2
  exit 1
fi
exit "$rc"
