#!/usr/bin/python3
"""End to end into Python tensors on a Parquet dataset (issue 22): the
Criteo job (fill_missing 0 + log1p on I1..I13, sigrid_hash on C1..C26,
batches of --batch) done by sluice reading the Parquet + zstd files in
place (a `sluice worker` with source.parquet, received by the Python
client as torch tensors) and by Ray Data on the same files
(`ray.data.read_parquet` -> `map_batches` of the same transforms in numpy
-> `iter_torch_batches`), rounds interleaved in one run; sluice on its own
table of the same rows runs beside them for reference. Target: sluice on
the Parquet files >= 15x Ray Data's samples/s.

It is bench/compare_loaders.py with the peers sluice-parquet, ray and
sluice and sluice-parquet as the reference (its digest is the one the
others must match; the ratios are to it): the data, the digest, the CPU
accounting and the per-round processes are that script's, and so are its
options (--rows, --batch, --workers, --rounds, --table-size, --seed,
--timeout, --peers). Run it in the environment of ops/ray-venv (ray,
pyarrow, torch):

    "$(ops/ray-venv)/bin/python" bench/ray_parquet.py --sluice build/sluice --rows 1000000
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_loaders  # noqa: E402


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
    if not any(a == "--peers" or a.startswith("--peers=") for a in args):
        args = ["--peers", "sluice-parquet,ray,sluice"] + args
    sys.argv = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_loaders.py"),
                "--reference", "sluice-parquet"] + args
    compare_loaders.main()


if __name__ == "__main__":
    main()
