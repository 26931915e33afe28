#!/usr/bin/env bash
# ctest wheel: the wheel ops/build-wheel makes (the `sluice` program, the
# trainer library and every library they load but glibc's, manylinux) works
# on a machine with none of sluice's build: installed into a fresh venv in a
# minimal Debian 12 container (ops/container/build --wheel-test-image: the
# mmdebstrap base plus python3 and python3-venv, no network), where
# tests/script/wheel/inside.sh checks that no compiler, -dev package or
# library of the program is there, deletes the system's copies of the
# vendored libraries, then runs `sluice demo --rows 20000` and the quick
# start (examples/quickstart.py, a PyTorch loop over a `sluice worker` of
# the wheel's program) and checks from /proc/PID/maps that the libraries
# loaded are the wheel's. torch is the user's own: the site-packages of
# ops/torchrec-venv (PyPI's torch, numpy), read-only through a .pth.
# The README's quick start must be examples/quickstart.py as it is.
# Needs podman, the container base (network the first time) and the
# torchrec environment: without one of them SKIPPED (exit 77), or FAILED
# with SLUICE_REQUIRE_WHEEL=1 (what ops/test sets). A wheel that does not
# build or does not work fails either way.
# Environment: SLUICE_SOURCE_DIR, SLUICE_TIMEOUT_SCALE.
set -euo pipefail
test=wheel
src=${SLUICE_SOURCE_DIR:?}
scale=${SLUICE_TIMEOUT_SCALE:-1}
skip_or_fail() {
  if [ "${SLUICE_REQUIRE_WHEEL:-0}" = 1 ]; then
    echo "$test: FAILED: $1, and SLUICE_REQUIRE_WHEEL=1" >&2
    exit 1
  fi
  echo "$test: SKIPPED: $1"
  exit 77
}
fail() { echo "$test: FAILED: $*" >&2; exit 1; }
command -v podman >/dev/null || skip_or_fail "podman is not installed (ops/install-deps installs it)"
torch_venv=$("$src/ops/torchrec-venv" --path)
"$src/ops/torchrec-venv" --check >/dev/null 2>&1 ||
  skip_or_fail "no torch environment for the quick start ($torch_venv: run ops/torchrec-venv)"
torch_site=$(echo "$torch_venv"/lib/python3*/site-packages)
[ -d "$torch_site" ] || fail "no site-packages in $torch_venv"

work=$(mktemp -d /tmp/sluice-wheel-test-XXXXXX)
name=sluice-wheel-$$
trap 'podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# The README shows the quick start the container runs.
python3 - "$src/README.md" "$src/examples/quickstart.py" <<'PY' || exit 1
import re, sys
readme, code = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.search(r"<!-- quickstart: examples/quickstart.py -->\s*```python\n(.*?)```", readme, re.S)
if not m:
    sys.exit("wheel: FAILED: README.md has no ```python block after <!-- quickstart: examples/quickstart.py -->")
body = code[code.index('"""', 3) + 3:].lstrip("\n")  # the file less its docstring
if m.group(1) != body:
    sys.exit("wheel: FAILED: README.md's quick start differs from examples/quickstart.py (less its docstring)")
PY

# The wheel (the compile is cached outside the checkout: ops/build-wheel).
start=$(date +%s)
wheel=$(timeout $((1200 * scale)) "$src/ops/build-wheel" "$work/dist" 2>"$work/build.log") ||
  fail "ops/build-wheel failed: $(tail -n 40 "$work/build.log")"
echo "$test: $(basename "$wheel") ($(du -k "$wheel" | awk '{printf "%.1f MB", $1 / 1024}')) built in $(($(date +%s) - start)) s"
case "$(basename "$wheel")" in
  sluice_trainer-*-py3-none-manylinux_2_*_x86_64.whl) ;;
  *) fail "the wheel is not tagged manylinux: $(basename "$wheel")" ;;
esac

image=$(timeout $((900 * scale)) "$src/ops/container/build" --wheel-test-image 2>"$work/image.log") ||
  skip_or_fail "no test image: $(tail -n 5 "$work/image.log")"
run_args=$("$src/ops/container/build" --run-args 2>"$work/args.log") ||
  skip_or_fail "podman cannot run a container here: $(cat "$work/args.log")"
# shellcheck disable=SC2086 # word splitting of the options is intended
timeout $((600 * scale)) podman run --rm --name "$name" --network=none $run_args \
  -e SLUICE_TIMEOUT_SCALE="$scale" \
  -v "$work/dist:/wheel:ro" -v "$torch_site:/user-torch:ro" \
  -v "$src/tests/script/wheel/inside.sh:/inside.sh:ro" \
  -v "$src/examples/quickstart.py:/quickstart.py:ro" \
  "$image" bash /inside.sh "/wheel/$(basename "$wheel")" /user-torch /quickstart.py ||
  fail "the wheel does not work in the container (above)"
echo "$test: pip install of the wheel, sluice demo and the quick start work without the build's libraries"
