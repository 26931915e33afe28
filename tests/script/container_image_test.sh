#!/usr/bin/env bash
# ctest container_image: the image of ops/container/Containerfile, built
# from these sources, runs a master, a worker and a trainer on a read-only
# root as uid 10001 with no capabilities (ops/container/smoke.sh, inside
# it). The test never builds the image (ops/test does, before ctest, with
# ops/container/build): when there is no image built from these very
# sources it is SKIPPED (exit 77), or fails with SLUICE_REQUIRE_CONTAINER=1
# (what ops/test sets, so CI cannot skip it). Run by image ID, so that a
# build from another checkout retagging the image meanwhile changes nothing.
set -euo pipefail
test=container_image
src=${SLUICE_SOURCE_DIR:?}
scale=${SLUICE_TIMEOUT_SCALE:-1}
skip_or_fail() {
  if [ "${SLUICE_REQUIRE_CONTAINER:-0}" = 1 ]; then
    echo "$test: FAILED: $1, and SLUICE_REQUIRE_CONTAINER=1" >&2
    exit 1
  fi
  echo "$test: SKIPPED: $1"
  exit 77
}
command -v podman >/dev/null || skip_or_fail "podman is not installed (ops/install-deps installs it)"
why=$(mktemp)
name=sluice-smoke-$$
trap 'rm -f "$why"; podman rm -f "$name" >/dev/null 2>&1 || true' EXIT
id=$("$src/ops/container/build" --check 2>"$why") || skip_or_fail "$(cat "$why")"
run_args=$("$src/ops/container/build" --run-args 2>"$why") || {
  echo "$test: FAILED: $(cat "$why")" >&2; exit 1; }

# The pods' security context, as far as podman has it: read-only root, an
# own /tmp, no capabilities, no privilege gain, the image's user.
# shellcheck disable=SC2086 # word splitting of the options is intended
timeout $((240 * scale)) podman run --rm --name "$name" --network=none $run_args \
  --read-only --tmpfs /tmp:rw,size=256m,mode=1777 --cap-drop=ALL \
  --security-opt=no-new-privileges -e SLUICE_TIMEOUT_SCALE="$scale" \
  -v "$src/ops/container/smoke.sh:/smoke.sh:ro" --entrypoint /bin/bash "$id" /smoke.sh
