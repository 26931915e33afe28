#!/usr/bin/env bash
# ctest prometheus_rules: ops/prometheus/check: `promtool check rules` and
# `promtool test rules` on ops/prometheus/rules.yml (every alert firing and
# not firing), `promtool check config` on both scrape configs (the
# Kubernetes one also against the pod templates of ops/k8s/base), the
# dashboard's shape, and broken copies refused. Needs Debian's prometheus
# package (promtool); without it this test is SKIPPED (exit 77), or fails
# with SLUICE_REQUIRE_PROMETHEUS=1 (what ops/test sets).
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?}
if ! command -v promtool >/dev/null; then
  msg="promtool is not installed (Debian: apt-get install prometheus; ops/install-deps does)"
  if [ "${SLUICE_REQUIRE_PROMETHEUS:-0}" = 1 ]; then
    echo "prometheus_rules: FAILED: $msg, and SLUICE_REQUIRE_PROMETHEUS=1" >&2
    exit 1
  fi
  echo "prometheus_rules: SKIPPED: $msg"
  exit 77
fi
exec "$src/ops/prometheus/check"
