#!/usr/bin/env python3
"""What `systemd-analyze verify` cannot see in sluice's units (ops/systemd/
check runs it; Python's standard library only):
  - the ExecStart= command line, with the unit's Environment= defaults and
    each example environment file's values put in, against `sluice ...
    --help` (ops/cliflags.py);
  - the hardening the units promise is there (NoNewPrivileges, ProtectSystem
    strict, ProtectHome, PrivateTmp, an empty CapabilityBoundingSet, ...);
  - a worker's MemoryMax= holds its --memory-limit plus the headroom of
    ops/cliflags.py (worker_memory_floor), for the unit's default and every
    example file's value;
  - restarts: the master on failure, the worker always (it exits 0 when its
    job is over), both with a RestartSec.

  check_units.py --sluice BIN UNIT ENVFILE [UNIT ENVFILE]...
Exit 0 when all hold, 1 listing every problem.
"""
import argparse
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cliflags  # noqa: E402

REQUIRED = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
    "PrivateTmp": "yes", "CapabilityBoundingSet": "", "DynamicUser": "yes",
    "SystemCallFilter": "@system-service",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
}


def parse_unit(path):
    """{key: [values]} of the [Service] and [Unit] sections, continuation lines joined."""
    out, text = {}, open(path).read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")) or "=" not in line:
            continue
        k, _, v = line.partition("=")
        out.setdefault(k.strip(), []).append(v.strip())
    return out


def parse_env(lines):
    env = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            env[k.strip()] = v.strip().strip('"')
    return env


def systemd_bytes(s):
    m = re.fullmatch(r"([0-9]+)([KMGT]?)", s)
    if not m:
        raise ValueError(f"MemoryMax={s}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]


def command_line(exec_start, env, instance):
    """ExecStart= as the service would get it: specifiers, ${VAR} (one word)
    and $VAR (split on white space) replaced; a variable the environment
    does not set is left as it is written, for the caller to find."""
    s = exec_start.replace("%i", instance).replace("%S", "/var/lib").replace("%d", "/run/credentials/x")
    words = []
    for w in shlex.split(s):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            words.extend(env[m.group(1)].split() if m.group(1) in env else [w])
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), m.group(0)), w))
    return words


def check(sluice, unit_path, env_path, errors, notes):
    name = os.path.basename(unit_path)
    u = parse_unit(unit_path)
    for k, v in REQUIRED.items():
        if v not in u.get(k, []):
            errors.append(f"{name}: no {k}={v}")
    if not u.get("RestartSec"):
        errors.append(f"{name}: no RestartSec=")
    defaults = parse_env(u.get("Environment", []))
    with open(env_path) as fh:
        example = parse_env(fh.read().splitlines())
    for label, env in (("the unit's defaults", defaults), (os.path.basename(env_path), {**defaults, **example})):
        argv = command_line(u["ExecStart"][0], env, "host-1")
        if not argv or not argv[0].endswith("/sluice"):
            errors.append(f"{name}: ExecStart does not run sluice: {argv[:1]}")
            continue
        e, n = cliflags.check(sluice, argv[1:])
        errors.extend(f"{name} with {label}: {x}" for x in e)
        notes.extend(f"{name} with {label}: {x}" for x in n)
        unset = [a for a in argv if "$" in a]
        if unset:
            errors.append(f"{name} with {label}: variables nothing sets: {unset}")
        if argv[1] == "worker":
            a = argv[2:]
            budget = a[a.index("--memory-limit") + 1] if "--memory-limit" in a else "256M"
            try:
                need = cliflags.worker_memory_floor(cliflags.sluice_bytes(budget))
                have = systemd_bytes(u.get("MemoryMax", ["0"])[-1])
            except ValueError as err:
                errors.append(f"{name} with {label}: {err}")
                continue
            if have < need:
                errors.append(f"{name} with {label}: MemoryMax={u.get('MemoryMax', ['none'])[-1]} < "
                              f"--memory-limit {budget} + max(256 MiB, a quarter) = {need >> 20}M")
            if u.get("Restart") != ["always"]:
                errors.append(f"{name}: Restart={u.get('Restart')}: a worker exits 0 when its job is "
                              "over and must come back for the next one (Restart=always)")
            if "%i" not in u["ExecStart"][0]:
                errors.append(f"{name}: the worker id is not the instance name (%i)")
        elif argv[1] == "master":
            if u.get("Restart") != ["on-failure"]:
                errors.append(f"{name}: Restart={u.get('Restart')}, not on-failure")
            if not u.get("StateDirectory") or "%S/" + u["StateDirectory"][0] not in u["ExecStart"][0]:
                errors.append(f"{name}: --state is not the unit's StateDirectory")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True)
    ap.add_argument("pairs", nargs="+", help="UNIT ENVFILE ...")
    a = ap.parse_args()
    if len(a.pairs) % 2:
        ap.error("give UNIT ENVFILE pairs")
    errors, notes = [], []
    try:
        for i in range(0, len(a.pairs), 2):
            check(a.sluice, a.pairs[i], a.pairs[i + 1], errors, notes)
    except RuntimeError as e:
        errors.append(str(e))
    for n in notes:
        print(f"note: {n}")
    for e in errors:
        print(f"error: {e}")
    if errors:
        return 1
    print(f"check_units: {len(a.pairs) // 2} unit(s): flags, hardening, memory and restarts hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
