#!/usr/bin/env python3
"""Runs the documentation's shell blocks as written, and compiles its C
blocks, so that the tour cannot rot (ctest `readme`, tests/script/readme_test.sh).

Which blocks run (CONTRIBUTING.md, "README test"):
  README.md   every ```sh / ```bash / ```shell block, unless the line just
              before its fence (blank lines between allowed) is
                  <!-- readme-test: skip: REASON -->
              REASON is printed with the test's output; keep that list short
              (what CI cannot do: install into $HOME, download GBs, a
              cluster of machines).
  docs/*.md   only blocks marked runnable by
                  <!-- readme-test: run -->
              (docs hold many synopses and outputs that are not commands).
  either      a block marked
                  <!-- readme-test: s3 -->
              starts the S3 test server (ops/s3proxy) itself: it runs when
              `ops/s3proxy check` says a server can start here (Java 17 and
              the jar, which the ctest fixture s3 fetches), else it is
              SKIPPED with the reason, or fails the test with
              SLUICE_REQUIRE_S3=1 (ops/test, CI).
  ```c blocks of README.md are compiled as whole programs (with main and
  includes) against the build tree's headers and libsluice_trainer.so.

How they run: every runnable block of README.md, then of docs/*.md (by file
name), in document order, as ONE bash script (so a variable set in one
block, e.g. $dir, is seen by the next) with `set -eu`, from the top of the
source tree, with `build/` (the build directory the README assumes)
replaced by this build's directory, TMPDIR set to a scratch directory that
is removed afterwards, and a time limit; background processes the blocks
start are killed at the end. A runnable block must not name /tmp paths or
fixed ports (7070-7079): use a scratch directory (`dir=$(mktemp -d)`) and
port 0 with the address the command prints.

usage: readme_tour.py --source DIR --build DIR [--timeout S] [--keep]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\S*)\s*(.*)$")
MARK = re.compile(r"^<!--\s*readme-test:\s*(skip|run|s3)\s*(?::\s*(.*?))?\s*-->\s*$")
SHELL = {"sh", "bash", "shell"}
# A /tmp path, except as the pattern of a sed substitution (s|/tmp/...|...|):
# the example specs' placeholder table paths are replaced that way.
FORBIDDEN = [(re.compile(r"(?<!s\|)/tmp/"), "a /tmp path (use a scratch directory: dir=$(mktemp -d))"),
             (re.compile(r"127\.0\.0\.1:707\d\b|localhost:707\d\b"),
              "a fixed port (use port 0 and the address the command prints)")]
HOW = ("README.md's ```sh blocks run in order as one script from the source tree "
       "(tests/script/readme_tour.py); mark a block CI cannot run with "
       "<!-- readme-test: skip: REASON --> on the line before its fence, and a docs/*.md "
       "block that should run with <!-- readme-test: run --> (CONTRIBUTING.md, 'README test').")


def blocks(path):
    """(language, first line number, text, mark, reason) of each fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        j = i - 1
        while j >= 0 and lines[j].strip() == "":
            j -= 1
        mark = MARK.match(lines[j]) if j >= 0 else None
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        out.append((lang, start, "\n".join(body) + "\n",
                    mark.group(1) if mark else None, (mark.group(2) or "") if mark else ""))
    return out


def s3_check(src):
    """(True, "") when the S3 test server can start here; (False, why) when
    it cannot (SKIPPED); (None, why) when it cannot and SLUICE_REQUIRE_S3=1."""
    r = subprocess.run([os.path.join(src, "ops", "s3proxy"), "check"], capture_output=True,
                       text=True)
    why = (r.stderr.strip().splitlines() or [""])[-1]
    if r.returncode == 0:
        return True, ""
    return (False, why) if r.returncode == 77 else (None, why)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    src, build = os.path.abspath(a.source), os.path.abspath(a.build)

    docs = [os.path.join(src, "README.md")] + sorted(
        os.path.join(src, "docs", f) for f in os.listdir(os.path.join(src, "docs"))
        if f.endswith(".md"))
    run, compile_c, problems = [], [], []
    s3 = None  # s3_check's answer, asked once
    for path in docs:
        rel = os.path.relpath(path, src)
        is_readme = rel == "README.md"
        for lang, line, text, mark, reason in blocks(path):
            where = f"{rel}:{line}"
            if mark == "skip" and not reason:
                problems.append(f"{where}: a skip marker needs a reason "
                                "(<!-- readme-test: skip: REASON -->)")
            if lang in SHELL:
                if mark == "s3":
                    s3 = s3 or s3_check(src)
                    if s3[0] is None:
                        problems.append(f"{where}: needs the S3 test server: {s3[1]}")
                        continue
                    if not s3[0]:
                        print(f"readme: SKIPPED {where}: the S3 test server cannot run here: "
                              f"{s3[1]}")
                        continue
                elif mark == "skip" or (not is_readme and mark != "run"):
                    if mark == "skip":
                        print(f"readme: SKIPPED {where}: {reason}")
                    continue
                for rx, what in FORBIDDEN:
                    for k, l in enumerate(text.split("\n")):
                        if rx.search(l):
                            problems.append(f"{where}+{k + 1}: {what}: {l.strip()}")
                run.append((where, text))
            elif lang == "c" and is_readme and mark != "skip":
                compile_c.append((where, text))
    if problems:
        print("readme: " + "\n  ".join(["the documentation's runnable blocks:"] + problems))
        print("readme: " + HOW)
        return 1

    scratch = tempfile.mkdtemp(prefix="sluice-readme-")
    try:
        # The C blocks: whole programs, compiled and linked against the build tree.
        lib = os.environ.get("SLUICE_TRAINER_LIB") or os.path.join(build, "libsluice_trainer.so")
        for n, (where, text) in enumerate(compile_c):
            c = os.path.join(scratch, f"block{n}.c")
            open(c, "w").write(text)
            cmd = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(src, "include"),
                   c, lib, "-Wl,-rpath," + os.path.dirname(lib), "-o", c[:-2]]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"readme: the C block at {where} does not build as a whole program:\n"
                      f"  {' '.join(cmd)}\n{r.stderr}")
                return 1
            print(f"readme: compiled and linked the C block at {where}")

        # `build/` as the README says it, made this build's directory.
        sub = re.compile(r"(?<![\w./-])build(?=/|\s|$)")
        script = ["set -eu", "cd " + shlex_quote(src)]
        for where, text in run:
            script.append(f"echo '==== readme: {where}' >&2")
            script.append(sub.sub(build.replace("\\", "\\\\"), text))
        script.append("echo '==== readme: every block ran' >&2")
        path = os.path.join(scratch, "tour.sh")
        open(path, "w").write("\n".join(script) + "\n")
        tmp = os.path.join(scratch, "tmp")
        os.mkdir(tmp)
        env = dict(os.environ, TMPDIR=tmp)
        for k in ("PKG_CONFIG_PATH", "SLUICE_ADMIN_TOKEN", "LD_LIBRARY_PATH"):
            env.pop(k, None)
        print(f"readme: running {len(run)} blocks ({path})", flush=True)
        log = os.path.join(scratch, "tour.log")
        with open(log, "w") as f:
            p = subprocess.Popen(["bash", path], env=env, start_new_session=True,
                                 stdout=f, stderr=subprocess.STDOUT)
            try:
                rc = p.wait(timeout=a.timeout)
            except subprocess.TimeoutExpired:
                rc = None
            try:
                os.killpg(p.pid, signal.SIGKILL)  # whatever the blocks left in the background
            except ProcessLookupError:
                pass
            p.wait()
        out = open(log, errors="replace").read()
        print(out, end="")
        last = re.findall(r"^==== readme: (.*)$", out, re.M)
        at = last[-1] if last else "the start"
        if rc is None:
            print(f"readme: FAILED: no end within {a.timeout:.0f} s, in the block at {at}")
            print("readme: " + HOW)
            return 1
        if rc != 0:
            print(f"readme: FAILED: exit {rc} in the block at {at}")
            print("readme: " + HOW)
            return 1
        print(f"readme: {len(run)} shell blocks and {len(compile_c)} C blocks passed")
        return 0
    finally:
        if a.keep:
            print(f"readme: kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


if __name__ == "__main__":
    sys.exit(main())
