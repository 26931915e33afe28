#!/usr/bin/env bash
# ctest systemd_units: ops/systemd/check on sluice-master.service and
# sluice-worker@.service: `systemd-analyze verify` prints nothing, the
# offline security review rates each at most 2.0, the ExecStart= flags are
# the program's (`sluice --help`), MemoryMax= holds the worker's
# --memory-limit plus headroom, and broken copies are refused. Needs
# Debian's systemd package (not a running systemd); without systemd-analyze
# it is SKIPPED (exit 77), or fails with SLUICE_REQUIRE_SYSTEMD=1 (what
# ops/test sets, after ops/install-deps installed it).
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?}
if ! command -v systemd-analyze >/dev/null; then
  msg="systemd-analyze is not installed (Debian: apt-get install systemd; ops/install-deps does)"
  if [ "${SLUICE_REQUIRE_SYSTEMD:-0}" = 1 ]; then
    echo "systemd_units: FAILED: $msg, and SLUICE_REQUIRE_SYSTEMD=1" >&2
    exit 1
  fi
  echo "systemd_units: SKIPPED: $msg"
  exit 77
fi
exec "$src/ops/systemd/check"
