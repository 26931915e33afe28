"""Helpers of the system tests (tests/system/*_test.py, run by ctest in
Debian's python3, standard library only): a sluice fleet of real
processes (master, workers, a trainer) from the built binary, bounded
waits, and HTTP to the admin endpoints.

Environment: SLUICE_BINARY (the sluice program), SLUICE_BUILD_DIR,
SLUICE_TIMEOUT_SCALE (every wait is multiplied by it)."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1") or 1)
SLUICE = os.environ.get("SLUICE_BINARY", "build/sluice")
BUILD = os.environ.get("SLUICE_BUILD_DIR", "build")


NAME = os.path.basename(sys.argv[0]).replace("_test.py", "")


def fail(msg):
    print(f"{NAME}: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def wait_for(what, fn, timeout_s):
    """fn() until it returns a true value, at most timeout_s * SCALE."""
    deadline = time.monotonic() + timeout_s * SCALE
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout_s * SCALE:.0f} s waiting for {what}")
        time.sleep(0.1)


class Proc:
    """A child whose stdout lines are collected by a thread."""

    def __init__(self, name, args, throttle_s=0.0, stderr_path=None):
        self.name = name
        self.lines = []
        self.stderr_path = stderr_path
        err = open(stderr_path, "w") if stderr_path else subprocess.STDOUT
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True,
                                  errors="replace")
        if stderr_path:
            err.close()
        self.throttle_s = throttle_s
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.throttle_s:
                time.sleep(self.throttle_s)  # the trainer waits for us: the job stays running

    def find(self, pattern):
        for line in list(self.lines):
            m = re.search(pattern, line)
            if m:
                return m
        if self.p.poll() is not None:
            fail(f"{self.name} exited ({self.p.returncode}):\n" + "\n".join(self.lines[-20:]))
        return None

    def stderr_lines(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read().splitlines()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=5 * SCALE)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def http(method, url, body=None, token=None):
    req = urllib.request.Request(url, method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10 * SCALE) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:  # a refusal is an answer too
        return e.code, dict(e.headers), e.read().decode()




class Fleet:
    """A master on loopback (admin token set), a table of rows criteo-like
    rows, and the job, workers and trainer a test starts on it; stop()
    ends every process (SIGTERM, then SIGKILL)."""

    def __init__(self, work, rows=120000):
        self.work = work
        self.procs = []
        self.token = NAME + "-" + os.urandom(8).hex()
        with open(os.path.join(work, "admin.token"), "w") as f:
            f.write(self.token + "\n")
        self.table = self.gen_table("table", rows)

    def gen_table(self, name, rows):
        path = os.path.join(self.work, name)
        subprocess.run([SLUICE, "table", "gen", "--preset", "criteo", "--rows", str(rows),
                        "--table", path, "--stripe-rows", "4096", "--no-sync", "--quiet"],
                       check=True, timeout=60 * SCALE, stdout=subprocess.DEVNULL)
        return path

    def start(self, proc):
        self.procs.append(proc)
        return proc

    def master(self, *extra, stderr_path=None):
        m = self.start(Proc("master", [SLUICE, "master", "--listen", "127.0.0.1:0", "--admin",
                                       "127.0.0.1:0", "--state", os.path.join(self.work, "state"),
                                       "--token-file", os.path.join(self.work, "admin.token")]
                            + list(extra), stderr_path=stderr_path))
        found = wait_for("the master's start line",
                         lambda: m.find(r"control (\S+?),.*\(port (\d+)\)"), 15)
        self.control, self.admin = found.group(1), f"127.0.0.1:{found.group(2)}"
        return m

    def submit(self, job, batch=256, epochs=2, table=None, **body):
        spec = {"id": job, "source": {"table": table or self.table},
                "batch": {"size": batch, "epochs": epochs}}
        status, _, answer = http("POST", f"http://{self.admin}/jobs", dict(body, spec=spec),
                                 self.token)
        if status != 201:
            fail(f"POST /jobs answered {status}: {answer}")
        return json.loads(answer)

    def worker(self, job, worker_id, *extra, stderr_path=None):
        """A worker with an admin endpoint; returns (proc, its admin address)."""
        w = self.start(Proc(worker_id, [SLUICE, "worker", "--master", self.control, "--job-id",
                                        job, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                                        "--worker-id", worker_id] + list(extra),
                            stderr_path=stderr_path))
        port = wait_for(f"{worker_id}'s admin line", lambda: w.find(r"admin on [^:]+:(\d+)"), 15)
        return w, "127.0.0.1:" + port.group(1)

    def get(self, path):
        status, _, body = http("GET", f"http://{self.admin}{path}")
        if status != 200:
            fail(f"GET {path} answered {status}: {body}")
        return json.loads(body)

    def trainer(self, job, throttle_s=0.0):
        """`sluice read --ids`: one line of ids per batch, read by us at most
        one per throttle_s, so a throttled trainer keeps the job running."""
        return self.start(Proc("trainer", [SLUICE, "read", "--master", self.control, "--job",
                                           job, "--ids", "--timeout", str(int(60000 * SCALE))],
                               throttle_s=throttle_s))

    def stop(self):
        for p in reversed(self.procs):
            p.stop()
