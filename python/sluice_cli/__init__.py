"""The `sluice` program of a pip install: the console script `sluice`
(pyproject.toml, [project.scripts]) runs main(), which replaces the Python
process with the program bundled in the sluice package (sluice/bin/sluice,
put there by `pip install`; its libraries are in sluice_trainer.libs/ beside
the package in a wheel from ops/build-wheel), with the same arguments.

A package of its own, beside `sluice`, so that starting the program imports
neither numpy nor the trainer client (`import sluice` does: about 0.25 s;
docs/PACKAGING.md). The program stays inside the sluice package rather than in
the wheel's scripts directory because auditwheel points it at its libraries
by a path relative to its own place, which pip keeps for package files and
changes for scripts (docs/PACKAGING.md).

program_path() says which program that is, for code that starts one (a
local worker): the bundled one; else env SLUICE_BINARY; else build/sluice
of the checkout this package sits in (PYTHONPATH=python).
"""

import os
import sys
from typing import List, NoReturn, Optional


def _candidates() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))  # .../python/sluice_cli
    out = [os.path.join(os.path.dirname(here), "sluice", "bin", "sluice")]
    env = os.environ.get("SLUICE_BINARY")
    if env:
        out.append(env)
    # python/sluice_cli/__init__.py of a checkout: the repository root is two up.
    root = os.path.dirname(os.path.dirname(here))
    if os.path.basename(os.path.dirname(here)) == "python" and os.path.exists(
        os.path.join(root, "CMakeLists.txt")
    ):
        out.append(os.path.join(root, "build", "sluice"))
    return out


def program_path() -> Optional[str]:
    """The `sluice` program this package runs, or None when there is none."""
    for cand in _candidates():
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def main() -> NoReturn:
    exe = program_path()
    if exe is None:
        sys.stderr.write(
            "sluice: no sluice program in this installation (looked for %s); "
            "install a wheel made by ops/build-wheel, or set SLUICE_BINARY\n"
            % ", ".join(_candidates())
        )
        sys.exit(127)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(exe, ["sluice"] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("sluice: cannot run %s: %s\n" % (exe, e))
        sys.exit(126)
