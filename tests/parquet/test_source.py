"""A Parquet dataset as a job's source, read in place (docs/PARQUET.md, "As
a job source"): `sluice worker --job` over files written by pyarrow gives
exactly the batches (ids and values) of the same rows imported with
`sluice table import --format parquet` and read from the table; Hive
partition folders filtered by `source.partitions`; the projection; row
groups ruled out by their statistics counted and never read; bad files
named in the worker's error."""
import json
import os
import re
import subprocess
import time

import pyarrow as pa
import pyarrow.parquet as pq

from pqcompare import SLUICE, sluice
from test_import import MAPPING, sample_table

SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))


def run_job(tmp_path, name, source, batch=None, filters=None, expect_fail=False,
            expect_empty=False, threads=1, extra_spec=None, worker_args=()):
    """Run `sluice worker --job` with spec source/batch/filters and read
    every batch with `sluice read --json`. @return (batches without their
    origin, the worker's log). expect_empty: a job of no rows, whose worker
    finishes without waiting for a reader."""
    spec = {"id": name, "source": source, "batch": batch or {"size": 100}}
    if filters:
        spec["filters"] = filters
    spec.update(extra_spec or {})
    job = tmp_path / f"{name}.json"
    job.write_text(json.dumps(spec))
    log = tmp_path / f"{name}.log"
    with open(log, "w") as lf:
        w = subprocess.Popen([SLUICE, "worker", "--job", str(job), "--listen", "127.0.0.1:0",
                              "--exit-when-done", "--threads", str(threads), *worker_args],
                             stdout=lf,
                             stderr=subprocess.STDOUT)
    try:
        addr = None
        deadline = time.time() + 30 * SCALE
        while addr is None and time.time() < deadline and w.poll() is None:
            m = re.search(r"^listening on (\S+)", log.read_text(), re.M)
            addr = m.group(1) if m else None
            time.sleep(0.02)
        if expect_fail:
            w.wait(timeout=30 * SCALE)
            return None, log.read_text()
        if expect_empty:
            assert w.wait(timeout=30 * SCALE) == 0, log.read_text()
            return [], log.read_text()
        assert addr, log.read_text()
        r = subprocess.run([SLUICE, "read", "--worker", addr, "--json", "--quiet",
                            "--timeout", str(int(30000 * SCALE))],
                           capture_output=True, text=True, timeout=60 * SCALE)
        assert r.returncode == 0, r.stderr + log.read_text()
        assert w.wait(timeout=30 * SCALE) == 0, log.read_text()  # sanitizer builds: no leak
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
    batches = []
    for line in r.stdout.splitlines():
        b = json.loads(line)
        del b["origin"], b["batch"]
        batches.append(b)
    return batches, log.read_text()


def write_mapping(tmp_path):
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps(MAPPING))
    return mapping


def test_parquet_source_equals_import(tmp_path):
    # row groups of 700 rows, splits of two row groups (1400 rows), batches of
    # 100: every split ends on a batch boundary, so the batches of the two
    # paths are the same batches, not only the same rows
    t = sample_table(7000)
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=700, compression="zstd")
    mapping = write_mapping(tmp_path)
    table = tmp_path / "t"
    sluice("table", "import", "--format", "parquet", "--input", str(path), "--table", str(table),
           "--mapping", str(mapping), "--quiet")
    want, _ = run_job(tmp_path, "table", {"table": str(table)})
    got, log = run_job(tmp_path, "pq", {"parquet": str(path), "columns": MAPPING,
                                        "split_rows": 1400})
    assert len(want) == 70 and sum(b["batch_size"] for b in want) == 7000
    assert got == want
    assert "parquet row groups 10, skipped by statistics 0" in log, log
    assert "splits 5," in log, log
    # two transform threads: each stripe (a whole batch) is taken as its
    # batch without a copy and encoded on the transform threads, which may
    # finish them out of order
    got2, _ = run_job(tmp_path, "pq_t2", {"parquet": str(path), "columns": MAPPING,
                                          "split_rows": 1400}, threads=2)
    first = lambda b: b["sample_ids"][0]  # noqa: E731
    assert sorted(got2, key=first) == sorted(want, key=first)
    # the projection: only the features named, the same as the table's
    feats = ["price", "tags"]
    want, _ = run_job(tmp_path, "table_p", {"table": str(table), "features": feats})
    got, _ = run_job(tmp_path, "pq_p", {"parquet": str(path), "columns": MAPPING,
                                        "split_rows": 1400, "features": feats})
    assert got == want
    assert got[0]["dense"]["names"] == ["price"] and got[0]["sparse"]["keys"] == ["tags"]


def test_hive_partitions_and_inferred_mapping(tmp_path):
    n = 600
    t = pa.table({"sample_id": pa.array(range(n), pa.int64()),
                  "label": pa.array([i % 2 for i in range(n)], pa.int8()),
                  "x": pa.array([i * 0.5 for i in range(n)], pa.float32()),
                  "ids": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64()))})
    root = tmp_path / "ds"
    for d in range(3):
        part = root / f"ds=2026-11-0{d + 1}"
        part.mkdir(parents=True)
        pq.write_table(t.slice(d * 200, 200), part / "part-0.parquet", row_group_size=50)
    (root / "_SUCCESS").write_text("")
    batches, log = run_job(tmp_path, "hive", {"parquet": str(root),
                                              "partitions": "ds>=2026-11-02"},
                           batch={"size": 50})
    ids = [i for b in batches for i in b["sample_ids"]]
    assert ids == list(range(200, 600))  # files in path order, rows in file order
    b = batches[0]
    assert b["labels"]["names"] == ["label"] and b["dense"]["names"] == ["x"]
    assert b["sparse"]["keys"] == ["ids"] and b["sparse"]["values"][:4] == [200, 201, 201, 202]
    assert "parquet row groups 8, skipped by statistics 0" in log, log


def test_statistics_skip_row_groups(tmp_path):
    t = sample_table(2000)  # ts = 1_700_000_000 + i, ascending: each row group a range
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=250, compression="snappy")
    lo, hi = 1_700_000_000 + 600, 1_700_000_000 + 1099
    batches, log = run_job(tmp_path, "stats", {"parquet": str(path), "columns": MAPPING},
                           filters=[{"op": "timestamp_range", "min": lo, "max": hi}])
    ids = sorted(i for b in batches for i in b["sample_ids"])
    assert ids == list(range(600, 1100))
    # row groups [500, 750), [750, 1000), [1000, 1250) hold rows in range; 5 of 8 never read
    assert "parquet row groups 8, skipped by statistics 5 (1250 rows never read)" in log, log
    # a label range no row group's statistics allow: every row group skipped
    batches, log = run_job(tmp_path, "stats2", {"parquet": str(path), "columns": MAPPING},
                           filters=[{"op": "label_range", "label": "click", "min": 2, "max": 3}],
                           expect_empty=True)
    assert batches == []
    assert "skipped by statistics 8 (2000 rows never read)" in log, log


def test_bad_files_named(tmp_path):
    t = sample_table(300)
    root = tmp_path / "ds"
    root.mkdir()
    pq.write_table(t, root / "a.parquet", row_group_size=100)
    data = (root / "a.parquet").read_bytes()
    (root / "b.parquet").write_bytes(data[: len(data) // 2])  # truncated: no footer
    _, log = run_job(tmp_path, "trunc", {"parquet": str(root), "columns": MAPPING},
                     expect_fail=True)
    assert "b.parquet" in log and "a.parquet" not in log.replace("b.parquet", ""), log
    (root / "b.parquet").write_bytes(b"PAR2" + data[4:])  # wrong magic at the start
    _, log = run_job(tmp_path, "magic", {"parquet": str(root), "columns": MAPPING},
                     expect_fail=True)
    assert "b.parquet" in log and "magic" in log, log
    # a mapping problem names its JSON path in the spec
    _, log = run_job(tmp_path, "map", {"parquet": str(root / "a.parquet"),
                                       "columns": {"dense": ["nosuch"]}}, expect_fail=True)
    assert "$.source.columns.dense[0]" in log and "nosuch" in log, log


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, seconds, what):
    deadline = time.time() + seconds * SCALE
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_master_two_workers_kill9_exactly_once(tmp_path):
    """A DPP master cuts the dataset into splits from its footers and leases
    them to 2 workers; one is killed with SIGKILL mid-epoch and a third takes
    its place: every sample is delivered exactly once in each of 2 epochs."""
    rows, groups = 12000, 500
    n = rows
    t = pa.table({"sample_id": pa.array(range(n), pa.int64()),
                  "label": pa.array([i % 2 for i in range(n)], pa.int8()),
                  "x": pa.array([i * 0.5 for i in range(n)], pa.float32()),
                  "ids": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64()))})
    root = tmp_path / "ds"
    for d in range(2):
        (root / f"ds={d}").mkdir(parents=True)
        pq.write_table(t.slice(d * n // 2, n // 2), root / f"ds={d}" / "p.parquet",
                       row_group_size=groups, compression="zstd")
    ctl, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    token = tmp_path / "admin.token"
    token.write_text("tok\n")
    procs = []

    def spawn(args, log):
        f = open(tmp_path / log, "w")
        p = subprocess.Popen([SLUICE, *args], stdout=f, stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    try:
        spawn(["master", "--listen", ctl, "--admin", admin, "--state", str(tmp_path / "state"),
               "--token-file", str(token), "--lease-timeout-ms", "1500"], "master.log")
        spec = tmp_path / "job.json"
        spec.write_text(json.dumps({"id": "pq", "source": {"parquet": str(root),
                                                           "split_rows": groups},
                                    "batch": {"size": 100, "epochs": 2}}))
        wait_for(lambda: sluice("submit", "--admin", admin, "--token-file", str(token),
                                "--job", str(spec), check=False).returncode == 0, 15,
                 "the master to take the job")
        workers = [spawn(["worker", "--master", ctl, "--job-id", "pq", "--worker-id", f"w{i}",
                          "--listen", "127.0.0.1:0", "--threads", "1"], f"w{i}.log")
                   for i in range(2)]
        reader = subprocess.Popen([SLUICE, "read", "--master", ctl, "--job", "pq", "--json",
                                   "--quiet", "--prefetch", "2"], stdout=subprocess.PIPE,
                                  stderr=open(tmp_path / "read.log", "w"), text=True)
        procs.append(reader)
        seen = {}
        killed = False
        for line in reader.stdout:
            b = json.loads(line)
            e = b["origin"]["epoch"]
            for i in b["sample_ids"]:
                seen[(e, i)] = seen.get((e, i), 0) + 1
            if not killed and len(seen) > rows // 3:
                workers[0].kill()  # SIGKILL: its leases expire and move
                workers[0].wait()
                spawn(["worker", "--master", ctl, "--job-id", "pq", "--worker-id", "w2",
                       "--listen", "127.0.0.1:0", "--threads", "1"], "w2.log")
                killed = True
        assert reader.wait(timeout=60 * SCALE) == 0, (tmp_path / "read.log").read_text()
        assert killed
        import urllib.request
        with urllib.request.urlopen(f"http://{admin}/jobs/pq", timeout=10 * SCALE) as r:
            job = json.loads(r.read())
        assert job["parquet"] == str(root) and job["table"] == "" and job["num_splits"] == 24
        assert job["committed_rows"] == rows and job["epochs"] == 2, job  # per epoch
        want = {(e, i): 1 for e in range(2) for i in range(rows)}
        missing = [k for k in want if k not in seen][:5]
        dup = [k for k, v in seen.items() if v != 1][:5]
        assert not missing and not dup and len(seen) == 2 * rows, (missing, dup)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_criteo_rows_parquet_zstd_equal_tsv_import(tmp_path):
    """Criteo-shaped rows (label, I1..I13, C1..C26 hex ids) written as a TSV
    and imported with --format criteo, and the same rows written as Parquet +
    zstd by pyarrow and read in place: the same batches."""
    import random
    seed = int(os.environ.get("SLUICE_TEST_SEED", "2211"))
    print(f"seed {seed}")
    rnd = random.Random(seed)
    n = 6000
    label = [rnd.randint(0, 1) for _ in range(n)]
    dense = [[None if rnd.random() < 0.2 else rnd.randint(0, 5000) for _ in range(n)]
             for _ in range(13)]
    sparse = [[None if rnd.random() < 0.1 else rnd.getrandbits(32) for _ in range(n)]
              for _ in range(26)]
    with open(tmp_path / "day.tsv", "w") as f:
        for r in range(n):
            fields = [str(label[r])]
            fields += ["" if dense[i][r] is None else str(dense[i][r]) for i in range(13)]
            fields += ["" if sparse[i][r] is None else f"{sparse[i][r]:08x}" for i in range(26)]
            f.write("\t".join(fields) + "\n")
    cols = {"label": pa.array(label, pa.int32())}
    cols.update({f"I{i + 1}": pa.array(dense[i], pa.int64()) for i in range(13)})
    cols.update({f"C{i + 1}": pa.array(sparse[i], pa.int64()) for i in range(26)})
    path = tmp_path / "day.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=1000, compression="zstd")
    table = tmp_path / "t"
    sluice("table", "import", "--format", "criteo", "--input", str(tmp_path / "day.tsv"),
           "--table", str(table), "--quiet")
    want, _ = run_job(tmp_path, "criteo_t", {"table": str(table)}, batch={"size": 500})
    mapping = {"labels": ["label"], "dense": [f"I{i + 1}" for i in range(13)],
               "sparse": [f"C{i + 1}" for i in range(26)], "infer": False}
    got, log = run_job(tmp_path, "criteo_pq", {"parquet": str(path), "columns": mapping},
                       batch={"size": 500})
    assert len(want) == 12 and sum(b["batch_size"] for b in want) == n
    assert got == want


def test_master_bad_page_split_skipped(tmp_path):
    """A row group whose pages do not decode (the footer intact, so the
    master cuts the job) fails its lease on the worker, naming the file;
    with "on_bad_split": "skip" the split is skipped and counted, and every
    other row arrives exactly once."""
    n, groups = 3000, 500
    t = pa.table({"sample_id": pa.array(range(n), pa.int64()),
                  "x": pa.array([i * 0.5 for i in range(n)], pa.float32())})
    root = tmp_path / "ds"
    root.mkdir()
    pq.write_table(t, root / "a.parquet", row_group_size=groups, compression="zstd")
    meta = pq.ParquetFile(root / "a.parquet").metadata
    bad = meta.row_group(2)  # rows 1000..1499
    cols = [bad.column(c) for c in range(bad.num_columns)]
    start = min(c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
                for c in cols)
    size = sum(c.total_compressed_size for c in cols)  # the row group's chunks, back to back
    with open(root / "a.parquet", "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * size)
    ctl, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    token = tmp_path / "admin.token"
    token.write_text("tok\n")
    procs = []
    try:
        def spawn(args, log):
            procs.append(subprocess.Popen([SLUICE, *args], stdout=open(tmp_path / log, "w"),
                                          stderr=subprocess.STDOUT))

        spawn(["master", "--listen", ctl, "--admin", admin, "--state", str(tmp_path / "state"),
               "--token-file", str(token)], "master.log")
        spec = tmp_path / "job.json"
        spec.write_text(json.dumps({"id": "pq", "on_bad_split": "skip",
                                    "source": {"parquet": str(root), "split_rows": groups},
                                    "batch": {"size": 100}}))
        wait_for(lambda: sluice("submit", "--admin", admin, "--token-file", str(token),
                                "--job", str(spec), check=False).returncode == 0, 15,
                 "the master to take the job")
        spawn(["worker", "--master", ctl, "--job-id", "pq", "--worker-id", "w0", "--listen",
               "127.0.0.1:0", "--threads", "1"], "w0.log")
        r = subprocess.run([SLUICE, "read", "--master", ctl, "--job", "pq", "--json", "--quiet"],
                           capture_output=True, text=True, timeout=60 * SCALE)
        assert r.returncode == 0, r.stderr
        ids = sorted(i for line in r.stdout.splitlines() for i in json.loads(line)["sample_ids"])
        assert ids == [i for i in range(n) if not 1000 <= i < 1500]
        import urllib.request
        with urllib.request.urlopen(f"http://{admin}/jobs/pq", timeout=10 * SCALE) as resp:
            job = json.loads(resp.read())
        assert job["skipped_splits"] == 1 and job["skipped_rows"] == 500, job
        log = (tmp_path / "master.log").read_text() + (tmp_path / "w0.log").read_text()
        assert "a.parquet" in log and "row group 2" in log, log
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_master_resume_token_mid_split(tmp_path):
    """A trainer stops after 7 batches of 128 rows (splits of 1000 rows: the
    last split it read is committed part-way) and writes a resume token;
    `sluice jobs resubmit` starts the job again from it, and a second
    trainer reads the rest: the two together deliver every row exactly
    once (the resumed todo ranges start mid-split)."""
    n, groups = 6000, 1000
    t = pa.table({"sample_id": pa.array(range(n), pa.int64()),
                  "x": pa.array([i * 0.5 for i in range(n)], pa.float32())})
    path = tmp_path / "a.parquet"
    pq.write_table(t, path, row_group_size=groups, compression="snappy")
    ctl, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    token = tmp_path / "admin.token"
    token.write_text("tok\n")
    procs = []
    try:
        procs.append(subprocess.Popen(
            [SLUICE, "master", "--listen", ctl, "--admin", admin, "--state",
             str(tmp_path / "state"), "--token-file", str(token)],
            stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT))
        spec = tmp_path / "job.json"
        spec.write_text(json.dumps({"id": "pq", "source": {"parquet": str(path),
                                                           "split_rows": groups},
                                    "batch": {"size": 128}}))
        wait_for(lambda: sluice("submit", "--admin", admin, "--token-file", str(token),
                                "--job", str(spec), check=False).returncode == 0, 15,
                 "the master to take the job")
        procs.append(subprocess.Popen(
            [SLUICE, "worker", "--master", ctl, "--job-id", "pq", "--worker-id", "w0",
             "--listen", "127.0.0.1:0", "--threads", "1"],
            stdout=open(tmp_path / "w0.log", "w"), stderr=subprocess.STDOUT))
        ckpt = tmp_path / "ckpt.token"
        first = subprocess.run([SLUICE, "read", "--master", ctl, "--job", "pq", "--json",
                                "--quiet", "--limit", "7", "--token-out", str(ckpt)],
                               capture_output=True, text=True, timeout=60 * SCALE)
        assert first.returncode == 0, first.stderr
        ids1 = [i for line in first.stdout.splitlines() for i in json.loads(line)["sample_ids"]]
        assert len(ids1) == 7 * 128
        per_split = [sum(1 for i in ids1 if k * groups <= i < (k + 1) * groups)
                     for k in range(n // groups)]
        assert any(0 < c < groups for c in per_split), per_split  # a split read part-way
        sluice("jobs", "resubmit", "pq", "--token", str(ckpt), "--admin", admin,
               "--token-file", str(token))
        rest = subprocess.run([SLUICE, "read", "--master", ctl, "--job", "pq", "--json",
                               "--quiet"], capture_output=True, text=True, timeout=60 * SCALE)
        assert rest.returncode == 0, rest.stderr
        ids2 = [i for line in rest.stdout.splitlines() for i in json.loads(line)["sample_ids"]]
        assert sorted(ids1 + ids2) == list(range(n))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
