#!/usr/bin/env bash
# ctest parquet_writers: sluice's own Parquet reader against other writers
# (tests/parquet/test_writers.py): files written by pyarrow, DuckDB and
# polars, and the fixtures of tests/data/parquet/, read with `sluice parquet
# cat` and compared value by value with pyarrow's read, in the python of
# ops/parquet-venv (pyarrow, duckdb, polars pinned from PyPI).
# The test never builds the environment (ops/test does, before ctest): when
# it is not ready it is SKIPPED (exit 77), or fails with
# SLUICE_REQUIRE_PARQUET_VENV=1 (what ops/test sets, so CI cannot skip it).
set -euo pipefail
src=${SLUICE_SOURCE_DIR:?}
venv=$("$src/ops/parquet-venv" --path)
if ! "$src/ops/parquet-venv" --check 2>/dev/null; then
  msg="no Parquet environment at $venv (build it with ops/parquet-venv)"
  if [ "${SLUICE_REQUIRE_PARQUET_VENV:-0}" = 1 ]; then
    echo "parquet_writers: FAILED: $msg, and SLUICE_REQUIRE_PARQUET_VENV=1" >&2
    exit 1
  fi
  echo "parquet_writers: SKIPPED: $msg"
  exit 77
fi
cd "$src"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/parquet
