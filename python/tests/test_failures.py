"""A job that fails at the master ends a Python trainer with an exception
that says why: a `sluice master --executor local` runs the job's worker over
a table whose data file has its stripes damaged; the worker reports the
split it cannot read, the master fails the job (--max-split-failures 1),
and sluice.Client raises SluiceError naming the file and the stripe, within
seconds. Needs SLUICE_BINARY and libsluice_trainer.so; skipped without."""

import json
import os
import socket
import subprocess
import time

import pytest

import sluice
from sluice import _native

SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))
BINARY = os.environ.get("SLUICE_BINARY")
TOKEN = "py-failure-test-token"


def _have_lib():
    try:
        _native.load()
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(
    not BINARY or not os.path.exists(BINARY) or not _have_lib(),
    reason="needs SLUICE_BINARY and libsluice_trainer.so (SLUICE_TRAINER_LIB)",
)


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _damage_stripes(table):
    """Flip bytes all through the middle of the one data file: inside the
    streams of its stripes (the header and the footer are left alone)."""
    files = []
    for root, _, names in os.walk(table):
        files += [os.path.join(root, n) for n in names if n.endswith(".slc")]
    assert len(files) == 1, files
    with open(files[0], "r+b") as f:
        data = bytearray(f.read())
        for off in range(len(data) // 5, len(data) * 3 // 5, 61):
            data[off] ^= 0x5A
        f.seek(0)
        f.write(data)
    return os.path.relpath(files[0], table)


def _http(admin, method, path, body=None):
    host, port = admin.rsplit(":", 1)
    payload = json.dumps(body).encode() if body is not None else b""
    req = (
        "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer %s\r\n"
        "Content-Length: %d\r\n\r\n" % (method, path, TOKEN, len(payload))
    ).encode() + payload
    with socket.create_connection((host, int(port)), timeout=10 * SCALE) as s:
        s.sendall(req)
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body or b"{}")


def test_failed_job_raises_with_the_reason(tmp_path):
    table = str(tmp_path / "table")
    subprocess.run(
        [BINARY, "table", "gen", "--preset", "criteo", "--rows", "2000", "--stripe-rows", "500",
         "--table", table, "--no-sync", "--quiet"],
        check=True,
    )
    rel = _damage_stripes(table)
    ctl = "127.0.0.1:%d" % _free_port()
    admin = "127.0.0.1:%d" % _free_port()
    (tmp_path / "token").write_text(TOKEN + "\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    master = subprocess.Popen(
        [BINARY, "master", "--listen", ctl, "--admin", admin, "--state", str(tmp_path / "state"),
         "--token-file", str(tmp_path / "token"), "--executor", "local",
         "--worker-log-dir", str(logs), "--max-split-failures", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20 * SCALE
        while True:
            try:
                if _http(admin, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "master not ready"
            time.sleep(0.05)
        status, answer = _http(
            admin, "POST", "/jobs",
            {"spec": {"id": "damaged", "source": {"table": table},
                      "batch": {"size": 100, "epochs": 2}}},
        )
        assert status == 201, answer
        t0 = time.monotonic()
        c = sluice.Client(master=ctl, job="damaged", refresh_ms=200, timeout_ms=int(30000 * SCALE))
        with pytest.raises(sluice.SluiceError) as e:
            for _ in c:
                pass
        c.close()
        assert time.monotonic() - t0 < 20 * SCALE
        msg = str(e.value)
        assert e.value.name == "SL_ERR_CORRUPT", msg
        assert "job damaged failed: split " in msg, msg
        assert "(file %s stripe " % rel in msg, msg
        assert "checksum" in msg, msg
        status, job = _http(admin, "GET", "/jobs/damaged")
        assert status == 200
        assert job["state"] == "failed"
        assert job["failure"]["file"] == rel
    finally:
        master.terminate()
        master.wait(20 * SCALE)
