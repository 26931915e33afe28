"""A job that fails at the master ends a Python trainer with an exception
that says why: a `sluice master --executor local` runs the job's worker over
a table whose data file has its stripes damaged; the worker reports the
split it cannot read, the master fails the job (--max-split-failures 1),
and sluice.Client raises SluiceError naming the file and the stripe, within
seconds. Needs SLUICE_BINARY and libsluice_trainer.so; skipped without."""

import json
import os
import select
import socket
import subprocess
import time

import pytest

import sluice

SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))
TOKEN = "py-failure-test-token"


def _start_master(binary, tmp_path):
    """`sluice master --executor local` on ports it picks; @return the
    process and its control and admin addresses (from its first line)."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    master = subprocess.Popen(
        [binary, "master", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
         "--state", str(tmp_path / "state"), "--token-file", str(tmp_path / "token"),
         "--executor", "local", "--worker-log-dir", str(logs), "--max-split-failures", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    # "sluice master: control HOST:PORT, admin HOST:0 (port N), ..."
    ready, _, _ = select.select([master.stdout], [], [], 20 * SCALE)
    line = master.stdout.readline() if ready else ""
    if "control " not in line:
        master.kill()
        master.wait()
        raise RuntimeError("master did not start: %r" % line)
    ctl = line.split("control ", 1)[1].split(",")[0]
    admin = "127.0.0.1:" + line.split("(port ", 1)[1].split(")")[0]
    return master, ctl, admin


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


def test_failed_job_raises_with_the_reason(tmp_path, sluice_binary):
    table = str(tmp_path / "table")
    subprocess.run(
        [sluice_binary, "table", "gen", "--preset", "criteo", "--rows", "2000", "--stripe-rows",
         "500", "--table", table, "--no-sync", "--quiet"],
        check=True,
    )
    rel = _damage_stripes(table)
    master, ctl, admin = _start_master(sluice_binary, tmp_path)
    try:
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
