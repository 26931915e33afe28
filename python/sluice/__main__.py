"""`python -m sluice ARGS`: the same as the console script `sluice ARGS`
(sluice/_program.py runs the program bundled in the package)."""

from ._program import main

main()
