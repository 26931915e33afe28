#!/usr/bin/env bash
# ctest python_install: `pip install` of this checkout (pyproject.toml:
# scikit-build-core builds libsluice_trainer.so into the package), twice -
# into a fresh virtual environment, and on Debian's system python with
# `--user --break-system-packages` (PEP 668), redirected to a temporary
# PYTHONUSERBASE so the user's own ~/.local is left alone - then, from a
# directory outside the checkout and with SLUICE_TRAINER_LIB unset, `import
# sluice` must load the bundled library and read every sample of a real
# worker. pip fetches the build backend from PyPI (build isolation, as a
# user's pip does); PyPI unreachable makes this test fail, naming pip.
# Environment: SLUICE_SOURCE_DIR, SLUICE_BINARY, SLUICE_TIMEOUT_SCALE.
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?} binary=${SLUICE_BINARY:?}
python=/usr/bin/python3
unset SLUICE_TRAINER_LIB PYTHONPATH PYTHONUSERBASE VIRTUAL_ENV
test=python_install
. "$(dirname "$0")/lib.sh"

"$binary" table gen --preset sessions --rows 5000 --table "$work/table" --seed 3 --cluster \
  --no-sync --quiet >/dev/null
cat >"$work/job.json" <<JSON
{"source": {"table": "$work/table"},
 "batch": {"size": 512, "dedup_groups": {"user": ["user_id", "user_hist", "user_cat"]}}}
JSON

# What a user runs after installing: from elsewhere, every sample once.
cat >"$work/check.py" <<'PY'
import os, sys
import sluice
lib = sluice.library_path()
pkg = os.path.dirname(os.path.abspath(sluice.__file__))
assert lib == os.path.join(pkg, "libsluice_trainer.so"), "not the bundled library: " + lib
assert not pkg.startswith(sys.argv[2]), "imported from the checkout: " + pkg
ids = []
with sluice.Client(sys.argv[1], timeout_ms=30000) as c:
    for b in c:
        with b:
            ids += b.sample_ids.tolist()
            assert b.group("user").batch_size == b.batch_size
assert sorted(ids) == list(range(min(ids), min(ids) + 5000)), "%d ids" % len(ids)
print("sluice %s from %s: 5000 samples, each once" % (sluice.__version__, pkg))
PY

pip_install() {  # pip_install LOG PYTHON [PIP OPTIONS...]: pip install, bounded in time
  local log=$1 py=$2; shift 2
  timeout $((600 * scale)) "$py" -m pip install --disable-pip-version-check -q "$@" "$src" \
    >"$log" 2>&1 ||
    fail "pip install failed: $(tail -n 30 "$log")"
}

# 1. a fresh virtual environment
"$python" -m venv "$work/venv" || fail "python3 -m venv failed (python3-venv)"
pip_install "$work/pip-venv.log" "$work/venv/bin/python"
start_worker "$binary" "$work/job.json" venv
(cd "$work" && timeout $((60 * scale)) "$work/venv/bin/python" check.py "$addr" "$src") ||
  fail "the package installed in a venv does not work"

# 2. Debian's system python, --user (PEP 668: --break-system-packages)
export PYTHONUSERBASE=$work/userbase
pip_install "$work/pip-user.log" "$python" --user --break-system-packages
start_worker "$binary" "$work/job.json" user
(cd "$work" && timeout $((60 * scale)) "$python" check.py "$addr" "$src") ||
  fail "the package installed with --user does not work"
echo "python_install: pip install works in a venv and with --user on the system python"
