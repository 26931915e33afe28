#!/usr/bin/env bash
# ctest readme: README.md's tour runs as written (every ```sh block, in order,
# as one script, in a scratch TMPDIR, ports chosen by the programs), docs/*.md
# blocks marked <!-- readme-test: run --> too, and README.md's C blocks build
# as whole programs. The rules are in tests/script/readme_tour.py and
# CONTRIBUTING.md ("README test").
# Environment: SLUICE_BUILD_DIR, SLUICE_SOURCE_DIR, SLUICE_TIMEOUT_SCALE.
set -euo pipefail
build=${SLUICE_BUILD_DIR:?} src=${SLUICE_SOURCE_DIR:?}
scale=${SLUICE_TIMEOUT_SCALE:-1}
exec python3 "$(dirname "$0")/readme_tour.py" --source "$src" --build "$build" --timeout $((240 * scale))
