"""`python -m sluice ARGS`: the same as the console script `sluice ARGS`
(sluice_cli runs the program bundled in the package)."""

from sluice_cli import main

main()
