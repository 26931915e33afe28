"""The trainer client's own Prometheus metrics from Python:
sluice.Client(metrics_address=...), metrics_port, $SLUICE_TRAINER_METRICS,
and the torch and torchrec datasets passing the address through. Against
real `sluice worker` and `sluice master` processes (the endpoint itself is
tested in tests/unit/trainer_metrics_test.c)."""

import os
import re
import socket
import urllib.error
import urllib.request

import pytest

import sluice
from procs import Master, gen_table, needs_worker, workers

ROWS = 5000
SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))

pytestmark = needs_worker

# sl_trainer_stats field -> (metric, divisor)
FIELDS = {
    "batches": ("sluice_trainer_batches_total", 1),
    "samples": ("sluice_trainer_samples_total", 1),
    "bytes": ("sluice_trainer_bytes_total", 1),
    "wait_ns": ("sluice_trainer_wait_seconds_total", 1e9),
    "reconnects": ("sluice_trainer_reconnects_total", 1),
    "queued": ("sluice_trainer_queued_batches", 1),
    "workers": ("sluice_trainer_workers", 1),
    "committed": ("sluice_trainer_committed_batches_total", 1),
    "dropped": ("sluice_trainer_dropped_batches_total", 1),
    "batches_shm": ("sluice_trainer_shm_batches_total", 1),
    "batches_socket": ("sluice_trainer_socket_batches_total", 1),
}
SAMPLE = re.compile(r"^(sluice_trainer_[a-z_]+)\{([^}]*)\} (\S+)$")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return gen_table(tmp_path_factory.mktemp("tables") / "sessions", ROWS)


def scrape(port):
    """{metric: (labels dict, value)} of GET /metrics."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * SCALE) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out[m.group(1)] = (labels, float(m.group(3)))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_client_serves_its_stats(tmp_path, table):
    with workers(tmp_path, table) as start:
        addr = start(dedup=True)
        with sluice.Client(addr, timeout_ms=int(30000 * SCALE), client_name="py-trainer",
                           metrics_address="127.0.0.1:0") as c:
            port = c.metrics_port
            assert port > 0
            n = 0
            for b in c:
                b.release()
                n += 1
            stats = c.stats()
            got = scrape(port)
        assert c.metrics_port == 0  # closed: no endpoint any more
    assert stats["samples"] == ROWS and stats["batches"] == n
    for field, (metric, div) in FIELDS.items():
        labels, value = got[metric]
        assert value == stats[field] / div, (metric, value, stats[field])
        assert labels == {"rank": "0", "client": "py-trainer"}
    freshness = {"sluice_trainer_freshness_seconds" + s for s in ("_bucket", "_sum", "_count")}
    assert set(got) == ({m for m, _ in FIELDS.values()} | {"sluice_trainer_start_time_seconds"}
                        | freshness)
    # a table job: no record times, an empty freshness histogram
    assert got["sluice_trainer_freshness_seconds_count"][1] == stats["freshness_count"] == 0
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_environment_empty_and_bad_addresses(tmp_path, table, monkeypatch):
    with workers(tmp_path, table) as start:
        addr = start(dedup=False)
        monkeypatch.delenv("SLUICE_TRAINER_METRICS", raising=False)
        with sluice.Client(addr) as c:
            assert c.metrics_port == 0  # off by default
        port = free_port()
        monkeypatch.setenv("SLUICE_TRAINER_METRICS", "127.0.0.1:%d" % port)
        with sluice.Client(addr) as c:
            assert c.metrics_port == port
            assert scrape(port)["sluice_trainer_batches_total"][1] == 0
        with sluice.Client(addr, metrics_address="") as c:
            assert c.metrics_port == 0  # "" wins over the environment
        monkeypatch.delenv("SLUICE_TRAINER_METRICS")
        with pytest.raises(sluice.SluiceError) as e:
            sluice.Client(addr, metrics_address="no-port-here")
        assert e.value.name == "SL_ERR_INVALID"
        assert "trainer metrics endpoint address 'no-port-here': expected host:port" in str(e.value)


def test_torch_dataset_passes_the_address(tmp_path, table):
    from sluice.torch import SluiceIterableDataset

    with workers(tmp_path, table) as start:
        port = free_port()
        ds = SluiceIterableDataset(start(dedup=False), timeout_ms=int(30000 * SCALE),
                                   metrics_address="127.0.0.1:%d" % port)
        it = iter(ds)
        first = next(it)
        got = scrape(port)
        assert got["sluice_trainer_samples_total"][1] == first["batch_size"]
        seen = first["batch_size"] + sum(item["batch_size"] for item in it)
        assert seen == ROWS


def test_master_mode_labels_name_the_job(tmp_path, table):
    master = Master(tmp_path)
    try:
        job = master.submit({"id": "metrics-job", "source": {"table": table},
                             "batch": {"size": 500}})
        master.start_worker(job)
        with sluice.Client(master=master.address, job=job, client_id="cid-1",
                           timeout_ms=int(30000 * SCALE), metrics_address="127.0.0.1:0") as c:
            samples = sum(b.batch_size for b in c)
            stats = c.stats()
            got = scrape(c.metrics_port)
        assert samples == ROWS
        labels, committed = got["sluice_trainer_committed_batches_total"]
        assert labels == {"job": job, "rank": "0", "client": "cid-1"}
        # batches end at split boundaries too: at least ROWS / 500 of them
        assert committed == stats["committed"] == stats["batches"] >= ROWS // 500
    finally:
        master.stop()


def test_master_dataset_passes_the_address(tmp_path, table):
    pytest.importorskip("torchrec")
    from sluice.torchrec import MasterDataset

    master = Master(tmp_path)
    try:
        job = master.submit({"id": "rec", "source": {"table": table}, "batch": {"size": 500}})
        master.start_worker(job)
        port = free_port()
        ds = MasterDataset(master.address, job, rank=0, world_size=1,
                           timeout_ms=int(30000 * SCALE), metrics_address="127.0.0.1:%d" % port)
        it = iter(ds)
        first = next(it)
        labels, batches = scrape(port)["sluice_trainer_batches_total"]
        assert labels["job"] == job and labels["rank"] == "0" and batches == 1
        assert first.batch_size + sum(b.batch_size for b in it) == ROWS
    finally:
        master.stop()
