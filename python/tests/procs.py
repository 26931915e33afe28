"""sluice processes for the Python tests: a generated table, a `sluice
worker` serving a job spec, a `sluice master` with its admin endpoint and
workers taking a job from it. Each process prints its address on start; a
reader thread waits for it with a deadline (SLUICE_TIMEOUT_SCALE), so a
silent process fails the test instead of hanging it."""

import contextlib
import json
import os
import re
import secrets
import subprocess
import threading
import time
import urllib.request

import pytest

from sluice import _native

BINARY = os.environ.get("SLUICE_BINARY")
SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))
USER = ["user_id", "user_hist", "user_cat"]


def have_lib():
    """libsluice_trainer.so loads (sluice._native's search order)."""
    try:
        _native.load()
        return True
    except OSError:
        return False


# pytestmark of the tests that need the library, and of those that also run
# sluice processes.
needs_lib = pytest.mark.skipif(not have_lib(), reason="needs libsluice_trainer.so")
needs_worker = pytest.mark.skipif(
    not BINARY or not os.path.exists(BINARY) or not have_lib(),
    reason="needs SLUICE_BINARY and libsluice_trainer.so (SLUICE_TRAINER_LIB)",
)


def gen_table(path, rows, seed=7, active_sessions=256, stripe_rows=4096):
    """`sluice table gen --preset sessions` of `rows` rows, clustered by
    session, into path; returns path."""
    subprocess.run(
        [BINARY, "table", "gen", "--preset", "sessions", "--rows", str(rows), "--table", str(path),
         "--seed", str(seed), "--stripe-rows", str(stripe_rows),
         "--active-sessions", str(active_sessions), "--cluster", "--no-sync", "--quiet"],
        check=True, stdout=subprocess.DEVNULL,
    )
    return str(path)


class Proc:
    """A sluice subprocess whose stdout is read on a thread until a line
    matches `pattern` (its groups are .match)."""

    def __init__(self, args, pattern, env=None, what="process"):
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines = []
        self.match = None
        found = threading.Event()
        rx = re.compile(pattern)

        def read():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = rx.search(line)
                if m and self.match is None:
                    self.match = m
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 20 * SCALE
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("%s did not start: %s" % (what, "".join(self.lines)))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10 * SCALE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Worker(Proc):
    """A `sluice worker` serving one job spec (direct mode): the table in
    batches of `batch`, the user features as dedup group "user" when dedup,
    plus the fields of `spec`; `args`: more command-line options."""

    def __init__(self, tmpdir, table, dedup, name, args=(), batch=512, spec=None):
        job = {"source": {"table": table}, "batch": {"size": batch}}
        if dedup:
            job["batch"]["dedup_groups"] = {"user": USER}
        job.update(spec or {})
        path = os.path.join(str(tmpdir), name + ".json")
        with open(path, "w") as f:
            json.dump(job, f)
        super().__init__([BINARY, "worker", "--job", path, "--listen", "127.0.0.1:0", *args],
                         r"listening on (\S+)", what="worker")
        self.address = self.match.group(1)


@contextlib.contextmanager
def workers(tmpdir, table, **fixed):
    """start(dedup=True, name="job", args=(), **kw) -> the address of a new
    Worker (its other keywords: fixed, then kw); all stopped on exit."""
    started = []

    def start(dedup=True, name="job", args=(), **kw):
        w = Worker(tmpdir, table, dedup, "%s%d" % (name, len(started)), args, **fixed, **kw)
        started.append(w)
        return w.address

    try:
        yield start
    finally:
        for w in started:
            w.stop()


class Master(Proc):
    """A `sluice master` on free ports with an admin token, plus the jobs
    submitted to it and their workers."""

    def __init__(self, tmpdir):
        self.dir = str(tmpdir)
        self.token = secrets.token_hex(16)
        self.env = dict(os.environ, SLUICE_ADMIN_TOKEN=self.token)
        super().__init__(
            [BINARY, "master", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
             "--state", os.path.join(self.dir, "state")],
            r"control (\S+), admin \S+ \(port (\d+)\)", env=self.env, what="master",
        )
        self.address = self.match.group(1)
        self.admin = "127.0.0.1:%s" % self.match.group(2)
        self.workers = []

    def submit(self, spec, ranks=1, sharding="dynamic", tokens=()):
        """Submit a job spec (a dict); tokens: resume tokens, one per rank.
        Returns the job id."""
        path = os.path.join(self.dir, "%s.json" % spec["id"])
        with open(path, "w") as f:
            json.dump(spec, f)
        args = [BINARY, "submit", "--admin", self.admin, "--job", path, "--ranks", str(ranks),
                "--sharding", sharding]
        for i, tok in enumerate(tokens):
            tp = os.path.join(self.dir, "%s.rank%d.token" % (spec["id"], i))
            with open(tp, "wb") as f:
                f.write(tok)
            args += ["--resume-token", tp]
        out = subprocess.run(args, env=self.env, capture_output=True, text=True,
                             timeout=30 * SCALE)
        if out.returncode != 0:
            raise RuntimeError("sluice submit: %s%s" % (out.stdout, out.stderr))
        return json.loads(out.stdout)["id"]

    def delete(self, job):
        req = urllib.request.Request(
            "http://%s/jobs/%s" % (self.admin, job), method="DELETE",
            headers={"Authorization": "Bearer " + self.token},
        )
        with urllib.request.urlopen(req, timeout=30 * SCALE) as r:
            r.read()

    def start_worker(self, job):
        w = Proc([BINARY, "worker", "--master", self.address, "--job-id", job,
                  "--listen", "127.0.0.1:0"], r"listening on (\S+)", what="worker")
        self.workers.append(w)
        return w

    def stop_workers(self):
        for w in self.workers:
            w.stop()
        self.workers = []

    def stop(self):
        for w in getattr(self, "workers", []):
            w.stop()
        super().stop()
