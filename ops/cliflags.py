#!/usr/bin/env python3
"""Checks `sluice` command lines written outside C (Kubernetes manifests,
systemd units) against the program's own `--help`: every --flag must be one
the subcommand knows, and a value of a flag whose help lists its choices
(`--executor local|none`) must be one of them. So a renamed or misspelt flag
fails ctest (k8s_manifests, systemd_units) instead of a pod or a unit.

Flags and values the deployment files use before the program has them are
listed in PENDING: reported as notes, not errors, and reported again once
the program knows them, so that the entry is removed.

Also the one rule both kinds of files follow for a worker's memory: the
container's or unit's limit is at least --memory-limit plus max(256 MiB, a
quarter of it) (worker_memory_floor; docs/OPERATIONS.md, "Capacity
planning").

  ops/cliflags.py SLUICE master --listen=0.0.0.0:7070 --admin ...
    exit 0 (notes on stderr) when every flag is known, 1 naming the others
"""
import re
import subprocess
import sys

# Flags the manifests may name before the program has them (reported as
# notes, not errors, until they exist): none now; the Kubernetes executor's
# --executor kubernetes, --k8s-namespace and --k8s-deployment have landed.
PENDING = {}

MIB = 1 << 20


def sluice_bytes(s):
    """What `sluice worker --memory-limit` reads: 64K, 256M, 2G (powers of 1024), B optional."""
    m = re.fullmatch(r"([0-9]+)([KkMmGg]?)[Bb]?", s)
    if not m:
        raise ValueError(f"--memory-limit {s!r}: a number with K, M or G")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def worker_memory_floor(budget):
    """The least memory limit for a worker whose --memory-limit is budget: what
    the budget does not count (dedup hash tables, per-connection threads and
    buffers, allocator slack, huge-page rounding, the program, mapped table
    pages) measured at most 25 MiB above a full budget, with room to spare."""
    return budget + max(256 * MIB, budget // 4)


_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?:[ =]([^\s,;]+))?")
_help_cache = {}


def _subcommand(argv):
    """('table', 'gen') for `table gen ...`, ('worker',) for `worker ...`."""
    if not argv:
        return ()
    if argv[0] == "table" and len(argv) > 1 and not argv[1].startswith("-"):
        return (argv[0], argv[1])
    return (argv[0],)


def known(sluice, sub):
    """{flag: set of choices or None} from `sluice SUB... --help`."""
    if sub not in _help_cache:
        try:
            p = subprocess.run([sluice, *sub, "--help"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"cannot run `{sluice} {' '.join(sub)} --help`: {e}") from e
        text = p.stdout + p.stderr
        flags = {}
        for line in text.splitlines():
            m = _FLAG.search(line)
            if not m or not line.lstrip().startswith("--"):
                continue
            choices = None
            if m.group(2) and "|" in m.group(2) and m.group(2).replace("|", "").isalpha():
                choices = set(m.group(2).split("|"))
            flags[m.group(1)] = choices
        if not flags:
            raise RuntimeError(f"`{sluice} {' '.join(sub)} --help` lists no flags:\n{text[:400]}")
        _help_cache[sub] = flags
    return _help_cache[sub]


def check(sluice, argv):
    """(errors, notes) for one command line (without the program name)."""
    errors, notes = [], []
    sub = _subcommand(argv)
    if not sub:
        return ["no subcommand"], notes
    flags = known(sluice, sub)
    name = " ".join(sub)
    args = list(argv[len(sub):])
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("--"):
            continue
        flag, eq, value = tok.partition("=")
        if not eq and flag in flags and i < len(args) and not args[i].startswith("--"):
            value = args[i]
        pending = (sub[0], flag) in PENDING
        if flag not in flags:
            if pending and PENDING[(sub[0], flag)] is None:
                notes.append(f"sluice {name} {flag}: assumed, not in the program yet (ops/cliflags.py PENDING)")
            else:
                errors.append(f"sluice {name}: unknown flag {flag}")
            continue
        if pending and PENDING[(sub[0], flag)] is None:
            notes.append(f"sluice {name} {flag} exists now: remove it from PENDING in ops/cliflags.py")
        choices = flags[flag]
        if choices and value and "$" not in value and value not in choices:
            extra = PENDING.get((sub[0], flag)) or set()
            if value in extra:
                notes.append(f"sluice {name} {flag} {value}: assumed, the program offers "
                             f"{'|'.join(sorted(choices))} (ops/cliflags.py PENDING)")
            else:
                errors.append(f"sluice {name} {flag} {value}: not one of {'|'.join(sorted(choices))}")
        elif choices and value in (PENDING.get((sub[0], flag)) or set()):
            notes.append(f"sluice {name} {flag} {value} exists now: remove it from PENDING in ops/cliflags.py")
    return errors, notes


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        errors, notes = check(argv[1], argv[2:])
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
