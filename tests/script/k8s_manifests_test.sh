#!/usr/bin/env bash
# ctest k8s_manifests: ops/k8s/check on the base, the example overlay and
# the example Jobs: kustomize builds them (and `kubectl kustomize` where
# kubectl is installed, to the same objects), every object passes the
# Kubernetes JSON schemas strictly, the pieces fit each other and the
# program (ops/k8s/check_manifests.py), and deliberately broken builds are
# refused. The tools come from ops/k8s-tools, which ops/test builds before
# ctest; when they are not built this test is SKIPPED (exit 77), or fails
# with SLUICE_REQUIRE_K8S_TOOLS=1 (what ops/test sets).
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?}
if ! "$src/ops/k8s-tools" --check 2>/dev/null; then
  msg="the manifest tools are not built at $("$src/ops/k8s-tools" --path) (run ops/k8s-tools)"
  if [ "${SLUICE_REQUIRE_K8S_TOOLS:-0}" = 1 ]; then
    echo "k8s_manifests: FAILED: $msg, and SLUICE_REQUIRE_K8S_TOOLS=1" >&2
    exit 1
  fi
  echo "k8s_manifests: SKIPPED: $msg"
  exit 77
fi
exec "$src/ops/k8s/check"
