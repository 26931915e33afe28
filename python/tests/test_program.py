"""sluice_cli, the console script `sluice` of a pip install: it runs the
program with the same arguments, imports no numpy, and says what it looked
for when there is no program."""

import os
import shutil
import subprocess
import sys

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = "import sluice_cli; sluice_cli.main()"


def _run(args, env_extra, cwd=None):
    env = dict(os.environ, PYTHONPATH=env_extra.pop("PYTHONPATH", PYTHON_DIR), **env_extra)
    return subprocess.run(
        [sys.executable] + args, env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _direct(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)


def test_runs_the_program_with_its_arguments(sluice_binary):
    direct = _direct(sluice_binary, "help", "table")
    r = _run(["-c", MAIN, "help", "table"], {"SLUICE_BINARY": sluice_binary})
    assert r.returncode == direct.returncode == 0, r.stderr
    assert r.stdout == direct.stdout
    # its exit status and message too: an unknown command
    bad = _run(["-c", MAIN, "no-such-command"], {"SLUICE_BINARY": sluice_binary})
    bad_direct = _direct(sluice_binary, "no-such-command")
    assert bad.returncode == bad_direct.returncode != 0
    assert bad.stderr == bad_direct.stderr


def test_imports_no_numpy():
    code = "import sys, sluice_cli; print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'sluice')))"
    r = _run(["-c", code], {})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_no_program_is_an_error_naming_where_it_looked(tmp_path):
    # a copy outside any checkout, with no bundled program beside it
    shutil.copytree(os.path.join(PYTHON_DIR, "sluice_cli"), tmp_path / "sluice_cli")
    missing = str(tmp_path / "nowhere" / "sluice")
    env = {"PYTHONPATH": str(tmp_path), "SLUICE_BINARY": missing}
    r = _run(["-c", MAIN, "help"], env, cwd=str(tmp_path))
    assert r.returncode == 127
    assert r.stdout == ""
    bundled = tmp_path / "sluice" / "bin" / "sluice"
    assert r.stderr == (
        "sluice: no sluice program in this installation (looked for %s, %s); install a wheel "
        "made by ops/build-wheel, or set SLUICE_BINARY\n" % (bundled, missing)
    )
