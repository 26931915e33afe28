"""A DPP master (with its local executor starting the workers) run by this
process, for sluice.Dataset when no master is given, and the admin calls
that submit jobs to any master. Standard library only.

The master is `sluice master --executor local`: it starts one `sluice
worker --master` process per granted worker of each job and stops them when
the job ends, so a job submitted here is read exactly as on a fleet (commits,
epochs, resume tokens). Its state, token and logs live in a temporary
directory that close() removes."""

import base64
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Sequence


def find_binary(binary: Optional[str] = None) -> str:
    """The sluice program: binary, else $SLUICE_BINARY, else the one a wheel
    installed next to the package (sluice/bin/sluice), else `sluice` on
    PATH. Raises FileNotFoundError naming every place looked at."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "sluice")
    tried = [binary, os.environ.get("SLUICE_BINARY"), here, shutil.which("sluice")]
    for b in tried:
        if b and os.path.isfile(b) and os.access(b, os.X_OK):
            return b
    raise FileNotFoundError(
        "the sluice program was not found (looked at binary=, $SLUICE_BINARY, %s and PATH); "
        "install the sluice wheel or build it (README.md)" % here
    )


class AdminError(RuntimeError):
    """An admin call the master refused or that did not reach it: the
    request, the HTTP status (0: no answer) and the master's message (with
    every problem of a refused spec)."""

    def __init__(self, what: str, status: int, message: str) -> None:
        super().__init__("%s: %s" % (what, message if status == 0 else "HTTP %d: %s" % (status, message)))
        self.status = status


class Admin:
    """The calls of a master's admin endpoint that a Dataset needs."""

    def __init__(self, address: str, token: Optional[str] = None, timeout_s: float = 30) -> None:
        self.base = address if address.startswith(("http://", "https://")) else "http://" + address
        self.base = self.base.rstrip("/")
        self.token = token if token is not None else os.environ.get("SLUICE_ADMIN_TOKEN")
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        what = "%s %s%s" % (method, self.base, path)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                text = r.read()
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                j = json.loads(text)
                msg = j.get("error", "") + "".join("\n  " + p for p in j.get("problems", []))
            except ValueError:
                msg = text.decode("utf-8", "replace")
            raise AdminError(what, e.code, msg) from None
        except (urllib.error.URLError, OSError) as e:
            raise AdminError(what, 0, str(getattr(e, "reason", e))) from None
        return json.loads(text) if text else None

    def submit(self, spec: Dict[str, Any], ranks: int, workers: int,
               tokens: Sequence[bytes] = ()) -> str:
        """Submit spec as a job of `ranks` trainer ranks (resumed from one
        token per rank of a checkpoint when tokens are given). The job id."""
        body: Dict[str, Any] = {"spec": spec, "ranks": ranks, "min_workers": workers,
                                "max_workers": workers}
        if tokens:
            body["resume_tokens"] = [base64.b64encode(t).decode() for t in tokens]
        return str(self.call("POST", "/jobs", body)["id"])

    def resubmit(self, job_id: str, tokens: Sequence[bytes]) -> None:
        """Start the job of that id again from a checkpoint's tokens, in
        place (POST /jobs/{id}/resubmit)."""
        self.call("POST", "/jobs/%s/resubmit" % urllib.parse.quote(job_id, safe=""),
                  {"resume_tokens": [base64.b64encode(t).decode() for t in tokens]})

    def job(self, job_id: str) -> Dict[str, Any]:
        job: Dict[str, Any] = self.call("GET", "/jobs/" + urllib.parse.quote(job_id, safe=""))
        return job

    def remove(self, job_id: str) -> None:
        self.call("DELETE", "/jobs/" + urllib.parse.quote(job_id, safe=""))


class LocalMaster:
    """`sluice master --executor local` in a temporary directory: control,
    admin (Admin, with its own token), closed by close()."""

    def __init__(self, binary: Optional[str] = None, start_timeout_s: float = 30) -> None:
        self.binary = find_binary(binary)
        self.dir = tempfile.mkdtemp(prefix="sluice-local-")
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        token = secrets.token_hex(16)
        token_file = os.path.join(self.dir, "admin.token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        os.makedirs(os.path.join(self.dir, "workers"))
        self.log_path = os.path.join(self.dir, "master.log")
        args = [self.binary, "master", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                "--state", os.path.join(self.dir, "state"), "--token-file", token_file,
                "--executor", "local", "--worker-log-dir", os.path.join(self.dir, "workers")]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + start_timeout_s
        found = None
        while found is None:
            with open(self.log_path) as f:
                found = re.search(r"control (\S+?),.*\(port (\d+)\)", f.read())
            if found is None:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    text = open(self.log_path).read()
                    self.close()
                    raise RuntimeError("sluice master did not start: " + text[-2000:])
                time.sleep(0.01)
        self.control = found.group(1)
        self.admin = Admin("127.0.0.1:" + found.group(2), token)

    def close(self) -> None:
        """Stop the master (its executor stops the workers) and remove its
        directory. Idempotent."""
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)  # the workers are in its session
                p.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
