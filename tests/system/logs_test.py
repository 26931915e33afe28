#!/usr/bin/env python3
"""ctest logs: the structured logs of the master and the workers
(--log-level, --log-format; docs/ADMIN.md "Logs"), from real processes.

A master (--log-format json, the default level info) runs a two-epoch job
and a job over a corrupted table. Worker logs-w1 (json, --log-level warn)
takes leases and is killed, so its leases expire; logs-w2 (json, debug)
serves the job to its end under a trainer; logs-w3 (logfmt) meets the
corrupt table until its job fails; the operator scales the first job by
hand. Every line the master and the json workers write on stderr must be
one JSON object with ts, level, cmd, event and msg; the master's must hold
each event of the job's life with its fields (job_submitted, autoscale
from the submit and from the operator, worker_joined, lease_granted,
worker_left, lease_expired, epoch_done for each epoch, job_finished,
job_failed), none below info, and none once per batch; logs-w1's none
below warn; logs-w2's its debug records too; logs-w3's logfmt lines."""
import json
import os
import re
import shutil
import signal
import sys
import tempfile

from fleet import SCALE, Fleet, fail, http, wait_for

ROWS, STRIPE, BATCH, EPOCHS = 40000, 4096, 1024, 2
SPLITS = (ROWS + STRIPE - 1) // STRIPE
LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3}


def json_records(path, who):
    """Every line of path as a JSON object with the five keys."""
    out = []
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except ValueError as e:
                fail(f"{who} stderr line {n} is not JSON ({e}): {line!r}")
            if not isinstance(rec, dict):
                fail(f"{who} stderr line {n} is not a JSON object: {line!r}")
            for key in ("ts", "level", "cmd", "event", "msg"):
                if not isinstance(rec.get(key), str):
                    fail(f"{who} stderr line {n} lacks \"{key}\": {line!r}")
            if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rec["ts"]):
                fail(f"{who} stderr line {n}: ts {rec['ts']!r} is not RFC 3339 UTC")
            if rec["level"] not in LEVELS:
                fail(f"{who} stderr line {n}: level {rec['level']!r}")
            out.append(rec)
    return out


def find(records, event, **fields):
    """The records of event whose fields hold the given values."""
    return [r for r in records if r["event"] == event
            and all(r.get(k) == v for k, v in fields.items())]


def expect(records, who, event, **fields):
    got = find(records, event, **fields)
    if not got:
        seen = sorted({r["event"] for r in records})
        fail(f"{who}: no {event} record with {fields}; events seen: {seen}")
    return got[0]


def corrupt(table):
    """Flip every 97th byte of the middle half of the table's data file(s):
    its stripes fail their checksums, its footer stays readable."""
    for root, _, files in os.walk(table):
        for name in files:
            if not name.endswith(".slc"):
                continue
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                for off in range(size // 4, size * 3 // 4, 97):
                    f.seek(off)
                    b = f.read(1)
                    f.seek(off)
                    f.write(bytes([b[0] ^ 0x5A]))


def main():
    work = tempfile.mkdtemp(prefix="sluice-logs-")
    fleet = None
    try:
        fleet = Fleet(work, rows=ROWS)
        bad_table = fleet.gen_table("bad", 8192)
        corrupt(bad_table)
        mlog = os.path.join(work, "master.log")
        fleet.master("--log-format", "json", "--lease-timeout-ms", "1000", stderr_path=mlog)

        def master_records():
            return json_records(mlog, "master")

        fleet.submit("logs-a", batch=BATCH, epochs=EPOCHS, min_workers=1, max_workers=2)
        # logs-w1 takes leases and dies holding them
        w1log = os.path.join(work, "w1.log")
        w1, _ = fleet.worker("logs-a", "logs-w1", "--log-format", "json", "--log-level", "warn",
                             stderr_path=w1log)
        wait_for("a lease granted to logs-w1", lambda: find(
            master_records(), "lease_granted", worker="logs-w1"), 15)
        w1.p.send_signal(signal.SIGKILL)
        w1.p.wait(timeout=10 * SCALE)
        wait_for("logs-w1's leases to expire", lambda: find(
            master_records(), "lease_expired", worker="logs-w1"), 15)
        status, _, answer = http("POST", f"http://{fleet.admin}/jobs/logs-a/scale",
                                 {"workers": 2}, fleet.token)
        if status != 200:
            fail(f"POST /jobs/logs-a/scale answered {status}: {answer}")
        # logs-w2 and a trainer take the job to its end
        w2log = os.path.join(work, "w2.log")
        fleet.worker("logs-a", "logs-w2", "--log-format", "json", "--log-level", "debug",
                     stderr_path=w2log)
        trainer = fleet.trainer("logs-a")
        trainer.p.wait(timeout=60 * SCALE)
        wait_for("the master to log logs-a finished", lambda: find(
            master_records(), "job_finished", job="logs-a"), 15)
        # a job over the corrupted table fails
        fleet.submit("logs-bad", batch=BATCH, epochs=1, table=bad_table)
        w3log = os.path.join(work, "w3.log")
        fleet.worker("logs-bad", "logs-w3", "--log-format", "logfmt", stderr_path=w3log)
        wait_for("the master to log logs-bad failed", lambda: find(
            master_records(), "job_failed", job="logs-bad"), 30)
        fleet.stop()

        m = master_records()
        expect(m, "master", "job_submitted", job="logs-a", splits=SPLITS, epochs=EPOCHS, ranks=1,
               sharding="dynamic", min_workers=1, max_workers=2, resume_tokens=0)
        expect(m, "master", "autoscale", job="logs-a", to=1, by="submit", reason="initial count")
        expect(m, "master", "autoscale", job="logs-a", to=2, by="operator",
               reason="set to 2 by an operator")
        expect(m, "master", "worker_joined", worker="logs-w1", job="logs-a")
        expect(m, "master", "worker_joined", worker="logs-w2", job="logs-a")
        g = expect(m, "master", "lease_granted", job="logs-a", worker="logs-w1", epoch=0)
        if not (0 <= g["split"] < SPLITS and g["rows"] in (STRIPE, ROWS % STRIPE)):
            fail(f"lease_granted fields: {g}")
        expect(m, "master", "worker_left", worker="logs-w1", job="logs-a")
        x = expect(m, "master", "lease_expired", job="logs-a", worker="logs-w1")
        if not isinstance(x["split"], int) or not isinstance(x["generation"], int):
            fail(f"lease_expired fields: {x}")
        for epoch in range(EPOCHS):
            expect(m, "master", "epoch_done", job="logs-a", epoch=epoch, epochs=EPOCHS, rows=ROWS)
        expect(m, "master", "job_finished", job="logs-a", epochs=EPOCHS,
               samples=ROWS * EPOCHS, batches=EPOCHS * ((ROWS + BATCH - 1) // BATCH))
        f = expect(m, "master", "job_failed", job="logs-bad", epoch=0)
        if not (f["file"].endswith(".slc") and "checksum" in f["reason"]
                and f["error"] == "corrupt data" and f["level"] == "error"):
            fail(f"job_failed fields: {f}")
        if any(LEVELS[r["level"]] > LEVELS["info"] for r in m):
            fail("the master at --log-level info wrote a debug record")
        # nothing per batch: each split is leased about once an epoch
        counts = {}
        for r in m:
            counts[r["event"]] = counts.get(r["event"], 0) + 1
        grants = len(find(m, "lease_granted", job="logs-a"))
        if grants > 2 * SPLITS * EPOCHS:
            fail(f"{grants} lease_granted records for {SPLITS} splits x {EPOCHS} epochs")
        for event, n in counts.items():
            if event != "lease_granted" and n > 2 * SPLITS:
                fail(f"{n} {event} records: more than a job's life makes")

        w1r = json_records(w1log, "logs-w1")
        if any(LEVELS[r["level"]] > LEVELS["warn"] for r in w1r):
            fail(f"logs-w1 at --log-level warn wrote: {w1r}")
        w2r = json_records(w2log, "logs-w2")
        expect(w2r, "logs-w2", "registered", worker="logs-w2", job="logs-a", cmd="worker")
        expect(w2r, "logs-w2", "lease_received", job="logs-a", level="debug")
        with open(w3log, errors="replace") as fh:
            w3 = fh.read().splitlines()
        if not w3 or not all(re.match(r"ts=\S+ cmd=worker level=(error|warn|info) event=\w+ ",
                                      line) for line in w3):
            fail("logs-w3's logfmt lines:\n" + "\n".join(w3))
        if not any(" event=split_failed " in line for line in w3):
            fail("logs-w3 logged no split_failed:\n" + "\n".join(w3))
        print(f"logs: ok: master {len(m)} records ({counts}), logs-w2 {len(w2r)}, "
              f"logs-w3 {len(w3)} lines")
        return 0
    finally:
        if fleet:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
