"""A Parquet job under a DPP master (docs/PARQUET.md, "As a job source"):
the row groups ruled out by statistics counted in the job's JSON (`GET
/jobs/{id}`, `sluice jobs show`) and in the master's metrics, and kept
through a master restart (and, standalone, in the worker's own `/metrics`
and `/status`); exactly once per epoch through kill -9 of the master
(restarted on its state) and of a worker, over two epochs."""
import json
import re
import signal
import subprocess
import time
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq

from pqcompare import SLUICE, sluice
from test_import import MAPPING, sample_table
from test_source import SCALE, free_port, wait_for


class Fleet:
    """A master on fixed ports (so that a restart keeps its addresses) and
    the processes started for it, every one killed at the end."""

    def __init__(self, tmp_path, lease_ms=1500):
        self.tmp = tmp_path
        self.ctl, self.admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        self.token = tmp_path / "admin.token"
        self.token.write_text("tok\n")
        self.lease_ms = lease_ms
        self.procs = []
        self.master = None
        self.starts = 0

    def spawn(self, args, log):
        f = open(self.tmp / log, "a")
        p = subprocess.Popen([SLUICE, *args], stdout=f, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def start_master(self):
        self.starts += 1
        self.master = self.spawn(["master", "--listen", self.ctl, "--admin", self.admin,
                                  "--state", str(self.tmp / "state"), "--token-file",
                                  str(self.token), "--lease-timeout-ms", str(self.lease_ms)],
                                 "master.log")
        # ready once its admin endpoint answers
        wait_for(lambda: self.get_raw("/healthz") is not None, 15, "the master's admin endpoint")

    def kill_master(self):
        self.master.send_signal(signal.SIGKILL)
        self.master.wait()

    def submit(self, spec):
        path = self.tmp / "job.json"
        path.write_text(json.dumps(spec))
        sluice("submit", "--admin", self.admin, "--token-file", str(self.token), "--job",
               str(path))

    def worker(self, job, wid):
        return self.spawn(["worker", "--master", self.ctl, "--job-id", job, "--worker-id", wid,
                           "--listen", "127.0.0.1:0", "--threads", "1"], f"{wid}.log")

    def get_raw(self, path):
        try:
            with urllib.request.urlopen(f"http://{self.admin}{path}", timeout=10 * SCALE) as r:
                return r.read().decode()
        except OSError:
            return None

    def job(self, job):
        return json.loads(self.get_raw(f"/jobs/{job}"))

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_statistics_skipped_row_groups_in_job_json_and_metrics(tmp_path):
    """8 row groups of 250 rows (ts ascending); a timestamp range that 3 of
    them can hold: the master's job JSON and metrics say 8 row groups, 5
    skipped, 1250 rows never read, before and after a kill -9 and restart of
    the master (replayed from its journal), and exactly the rows in range
    arrive."""
    t = sample_table(2000)  # ts = 1_700_000_000 + i
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=250, compression="zstd")
    lo, hi = 1_700_000_000 + 600, 1_700_000_000 + 1099
    f = Fleet(tmp_path)
    try:
        f.start_master()
        f.submit({"id": "pq", "source": {"parquet": str(path), "columns": MAPPING,
                                         "split_rows": 250},
                  "filters": [{"op": "timestamp_range", "min": lo, "max": hi}],
                  "batch": {"size": 100}})

        def check():
            job = f.job("pq")
            assert (job["parquet_row_groups"], job["parquet_row_groups_skipped"],
                    job["parquet_rows_skipped"]) == (8, 5, 1250), job
            assert job["num_splits"] == 3 and job["total_rows"] == 750, job
            metrics = f.get_raw("/metrics")
            assert 'sluice_master_parquet_row_groups_skipped{job="pq"} 5\n' in metrics
            assert 'sluice_master_parquet_rows_skipped{job="pq"} 1250\n' in metrics
            show = sluice("jobs", "show", "pq", "--admin", f.admin).stdout
            assert "parquet_row_groups_skipped 5\n" in show, show

        check()
        f.kill_master()
        f.start_master()
        check()
        f.worker("pq", "w0")
        r = subprocess.run([SLUICE, "read", "--master", f.ctl, "--job", "pq", "--json", "--quiet",
                            "--timeout", str(int(30000 * SCALE))],
                           capture_output=True, text=True, timeout=60 * SCALE)
        assert r.returncode == 0, r.stderr
        ids = sorted(i for line in r.stdout.splitlines() for i in json.loads(line)["sample_ids"])
        assert ids == list(range(600, 1100))
    finally:
        f.close()


def test_standalone_worker_admin_counts_statistics_skipping(tmp_path):
    """The same file and range read by a standalone worker (`sluice worker
    --job --admin`): its /metrics and /status say 5 of 8 row groups and
    1250 rows skipped, and the rows in range arrive."""
    t = sample_table(2000)
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=250, compression="zstd")
    lo, hi = 1_700_000_000 + 600, 1_700_000_000 + 1099
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"id": "pq", "source": {"parquet": str(path), "columns": MAPPING},
                                "filters": [{"op": "timestamp_range", "min": lo, "max": hi}],
                                "batch": {"size": 100}}))
    log = tmp_path / "w.log"
    w = subprocess.Popen([SLUICE, "worker", "--job", str(spec), "--listen", "127.0.0.1:0",
                          "--admin", "127.0.0.1:0", "--exit-when-done", "--threads", "1"],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        addrs = {}
        deadline = time.time() + 30 * SCALE
        while len(addrs) < 2 and time.time() < deadline and w.poll() is None:
            text = log.read_text()
            for key, pat in (("data", r"^listening on (\S+)"), ("admin", r"^admin on (\S+)")):
                m = re.search(pat, text, re.M)
                if m:
                    addrs[key] = m.group(1)
            time.sleep(0.02)
        assert len(addrs) == 2, log.read_text()
        with urllib.request.urlopen(f"http://{addrs['admin']}/metrics", timeout=10 * SCALE) as r:
            metrics = r.read().decode()
        assert 'sluice_worker_parquet_row_groups_skipped{job="pq"} 5\n' in metrics, metrics
        assert 'sluice_worker_parquet_rows_skipped{job="pq"} 1250\n' in metrics, metrics
        with urllib.request.urlopen(f"http://{addrs['admin']}/status", timeout=10 * SCALE) as r:
            status = json.loads(r.read())
        assert status["parquet"] == {"row_groups": 8, "row_groups_skipped": 5,
                                     "rows_skipped": 1250}, status
        r = subprocess.run([SLUICE, "read", "--worker", addrs["data"], "--json", "--quiet",
                            "--timeout", str(int(30000 * SCALE))],
                           capture_output=True, text=True, timeout=60 * SCALE)
        assert r.returncode == 0, r.stderr
        ids = sorted(i for line in r.stdout.splitlines() for i in json.loads(line)["sample_ids"])
        assert ids == list(range(600, 1100))
        assert w.wait(timeout=30 * SCALE) == 0, log.read_text()
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()


def test_master_and_worker_kill9_exactly_once_per_epoch(tmp_path):
    """Two workers read a Parquet dataset (2 files, 24 row groups of 500
    rows, a split each) for two epochs. In epoch 0 the master is killed with
    SIGKILL and restarted on the same state directory and addresses; in
    epoch 1 a worker is killed with SIGKILL and replaced. Every sample id
    arrives exactly once in each epoch."""
    rows, groups = 12000, 500
    t = pa.table({"sample_id": pa.array(range(rows), pa.int64()),
                  "label": pa.array([i % 2 for i in range(rows)], pa.int8()),
                  "x": pa.array([i * 0.5 for i in range(rows)], pa.float32()),
                  "ids": pa.array([[i, i + 1] for i in range(rows)], pa.list_(pa.int64()))})
    root = tmp_path / "ds"
    for d in range(2):
        (root / f"ds={d}").mkdir(parents=True)
        pq.write_table(t.slice(d * rows // 2, rows // 2), root / f"ds={d}" / "p.parquet",
                       row_group_size=groups, compression="zstd")
    f = Fleet(tmp_path)
    try:
        f.start_master()
        f.submit({"id": "pq", "source": {"parquet": str(root), "split_rows": groups},
                  "batch": {"size": 100, "epochs": 2}})
        workers = [f.worker("pq", f"w{i}") for i in range(2)]
        reader = subprocess.Popen([SLUICE, "read", "--master", f.ctl, "--job", "pq", "--json",
                                   "--quiet", "--prefetch", "2", "--timeout",
                                   str(int(60000 * SCALE))], stdout=subprocess.PIPE,
                                  stderr=open(tmp_path / "read.log", "w"), text=True)
        f.procs.append(reader)
        seen = {}
        master_killed = worker_killed = False
        per_epoch = [0, 0]
        for line in reader.stdout:
            b = json.loads(line)
            e = b["origin"]["epoch"]
            for i in b["sample_ids"]:
                seen[(e, i)] = seen.get((e, i), 0) + 1
            per_epoch[e] += len(b["sample_ids"])
            if not master_killed and per_epoch[0] > rows // 4:
                f.kill_master()  # mid-epoch 0: leases and commits in flight
                f.start_master()
                master_killed = True
            if not worker_killed and per_epoch[1] > rows // 3:
                workers[0].kill()  # SIGKILL: its leases expire and move
                workers[0].wait()
                f.worker("pq", "w2")
                worker_killed = True
        assert reader.wait(timeout=60 * SCALE) == 0, (tmp_path / "read.log").read_text()
        assert master_killed and worker_killed, per_epoch
        job = f.job("pq")
        assert job["finished"] and job["epochs"] == 2 and job["committed_rows"] == rows, job
        assert (job["parquet_row_groups"], job["parquet_row_groups_skipped"]) == (24, 0), job
        missing = [(e, i) for e in range(2) for i in range(rows) if (e, i) not in seen][:5]
        dup = [k for k, v in seen.items() if v != 1][:5]
        assert not missing and not dup and len(seen) == 2 * rows, (missing, dup)
        assert f.starts == 2
    finally:
        f.close()
