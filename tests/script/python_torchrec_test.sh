#!/usr/bin/env bash
# ctest python_torchrec: the Python package's tests (python/tests) with the
# python of ops/torchrec-venv - torch 2.14, torchrec, fbgemm-gpu-cpu, numpy
# 2 - so test_torchrec.py runs against real TorchRec: the Batch in
# TrainPipelineBase and TrainPipelineSparseDist, the merged KJT against the
# expanded batch, DedupEmbeddingBagCollection against the expanded batch
# (2 gloo ranks, table-wise and row-wise), MasterDataset with two ranks and
# a resume.
# The test never builds the environment (ops/test does, before ctest): when
# it is not ready it is SKIPPED (exit 77), or fails with
# SLUICE_REQUIRE_TORCHREC=1 (what ops/test sets, so CI cannot skip it).
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?}
venv=$("$src/ops/torchrec-venv" --path)
if ! "$src/ops/torchrec-venv" --check 2>/dev/null; then
  msg="no TorchRec environment at $venv (build it with ops/torchrec-venv)"
  if [ "${SLUICE_REQUIRE_TORCHREC:-0}" = 1 ]; then
    echo "python_torchrec: FAILED: $msg, and SLUICE_REQUIRE_TORCHREC=1" >&2
    exit 1
  fi
  echo "python_torchrec: SKIPPED: $msg"
  exit 77
fi
cd "$src"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -W ignore::FutureWarning python/tests
