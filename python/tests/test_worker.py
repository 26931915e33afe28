"""The binding against a real worker: `sluice table gen` a small sessions
table, start `sluice worker` subprocesses on port 0, receive with
sluice.Client. Needs SLUICE_BINARY (the sluice program) and a loadable
libsluice_trainer.so (SLUICE_TRAINER_LIB); skipped without them."""

import ctypes
import gc
import os

import numpy as np
import pytest
import torch

import sluice
from procs import USER, gen_table, needs_worker, workers
from sluice.torch import SluiceIterableDataset, batch_to_torch, expand_batch, expand_ikjt, kjt_kwargs

ROWS = 20000
BATCH = 512
SCALE = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))


pytestmark = needs_worker


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return gen_table(tmp_path_factory.mktemp("tables") / "sessions", ROWS)


@pytest.fixture
def worker(tmp_path, table):
    """worker(dedup=True, name="job", extra=()): a new worker's address;
    extra: more command-line options."""
    with workers(tmp_path, table) as start:
        yield lambda dedup=True, name="job", extra=(): start(dedup, name, extra)


def client(address, **kw):
    kw.setdefault("timeout_ms", int(30000 * SCALE))
    return sluice.Client(address, **kw)


def _c_addr(ptr):
    return ctypes.cast(ptr, ctypes.c_void_p).value


def test_every_sample_exactly_once(worker):
    ids = []
    batches = 0
    with client(worker(dedup=True), prefetch=4) as c:
        for b in c:
            with b:
                assert b.batch_size <= BATCH
                assert [g.name for g in b.groups] == ["user"]
                assert b.group("user").keys == USER
                assert b.dense.shape[0] == b.batch_size
                ids.append(b.sample_ids.copy())
                assert b.record_ms is None  # a table batch: no record times
                batches += 1
        st = c.stats()
    ids = np.concatenate(ids)
    assert ids.size == ROWS
    assert np.array_equal(np.sort(ids), np.arange(ROWS))
    assert st["batches"] == batches and st["samples"] == ROWS
    # a table job's batches carry no record times: no freshness
    assert st["freshness_count"] == 0 and st["freshness_buckets"] == [0] * 14
    assert st["freshness_bounds_ms"] == [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000]


def test_arrays_are_views_on_c_buffers(worker):
    with client(worker()) as c:
        b = c.next()
        cb = b._ptr.contents
        vals = b.sparse.values
        assert not vals.flags.owndata
        assert vals.base.owner is b
        assert vals.__array_interface__["data"][0] == _c_addr(cb.sparse.values)
        g = b.group("user")
        assert g.unique.values.__array_interface__["data"][0] == _c_addr(cb.groups[0].unique.values)
        assert g.inverse.__array_interface__["data"][0] == _c_addr(cb.groups[0].inverse)
        assert b.dense.__array_interface__["data"][0] == _c_addr(cb.dense.data)
        assert b.sample_ids.__array_interface__["data"][0] == _c_addr(cb.sample_ids)
        # Buffers are 64-byte aligned (docs/FORMAT.md).
        assert vals.__array_interface__["data"][0] % 64 == 0
        b.release()


def test_array_outlives_batch(worker):
    with client(worker(), prefetch=2) as c:
        b = c.next()
        vals = b.group("user").unique.values
        ids = b.sample_ids
        saved_vals, saved_ids = vals.copy(), ids.copy()
        del b
        gc.collect()
        # Receive (and free) more batches, so reused memory would show.
        for _ in range(5):
            nb = c.next()
            if nb is None:
                break
            nb.release()
        gc.collect()
        assert np.array_equal(vals, saved_vals)
        assert np.array_equal(ids, saved_ids)


def test_explicit_release(worker):
    with client(worker()) as c:
        b = c.next()
        with b:
            n = b.batch_size
        assert b.released and b._ptr is None and n > 0
        with pytest.raises(sluice.SluiceError, match="released"):
            b.sparse
        b2 = c.next()
        d = b2.dense
        b2.release()
        assert b2._ptr is not None  # d still points into it
        del d
        assert b2._ptr is None


def test_torch_shares_memory(worker):
    with client(worker()) as c:
        b = c.next()
        t = batch_to_torch(b)
        assert t["sparse"]["values"].data_ptr() == b.sparse.values.__array_interface__["data"][0]
        assert t["dense"].data_ptr() == b.dense.__array_interface__["data"][0]
        g = t["groups"]["user"]
        assert g["values"].data_ptr() == _c_addr(b._ptr.contents.groups[0].unique.values)
        b.release()
        del b
        gc.collect()
        assert t["sample_ids"].shape == (t["batch_size"],)  # still readable


def _per_sample(ids, kjt):
    """{sample id: {key: [values]}} from an expanded KJT dict."""
    keys, stride = kjt["keys"], kjt["stride"]
    lengths = np.asarray(kjt["lengths"]).reshape(len(keys), stride)
    values = np.asarray(kjt["values"])
    offs = np.concatenate([[0], np.cumsum(lengths.reshape(-1))])
    out = {int(s): {} for s in ids}
    for f, k in enumerate(keys):
        for r in range(stride):
            i = f * stride + r
            out[int(ids[r])][k] = values[offs[i] : offs[i + 1]].tolist()
    return out


def test_expand_ikjt_equals_job_without_dedup(worker):
    a_dedup, a_plain = worker(dedup=True), worker(dedup=False, name="plain")
    got, want = {}, {}
    dedup_ratio = []
    with client(a_dedup) as c:
        for b in c:
            e = expand_batch(b)
            g = b.group("user")
            dedup_ratio.append(g.unique.stride / g.batch_size)
            eg = expand_ikjt(g)
            assert eg["keys"] == USER and eg["lengths"].size == len(USER) * b.batch_size
            got.update(_per_sample(b.sample_ids, e))
            b.release()
    with client(a_plain) as c:
        for b in c:
            assert b.num_groups == 0
            want.update(
                _per_sample(
                    b.sample_ids,
                    {"keys": b.sparse.keys, "stride": b.sparse.stride,
                     "lengths": b.sparse.lengths, "values": b.sparse.values},
                )
            )
            b.release()
    assert len(got) == len(want) == ROWS
    assert got == want
    # The table is clustered by session, so a batch holds whole sessions and
    # the group really was deduplicated (sessions average 16 rows).
    assert np.mean(dedup_ratio) < 0.25


def test_kjt_kwargs_on_real_batch(worker):
    with client(worker()) as c:
        b = c.next()
        kw = kjt_kwargs(b.sparse)
        B = b.batch_size
        F = len(kw["keys"])
        assert kw["stride"] == B and F == len(b.sparse.keys) > 0
        assert kw["lengths"].dtype == torch.int32 and kw["lengths"].shape == (F * B,)
        assert kw["values"].dtype == torch.int64
        assert kw["values"].shape == (int(kw["lengths"].sum()),)
        g = kjt_kwargs(b.group("user"))
        U = b.group("user").unique.stride
        assert g["keys"] == USER and g["stride"] == U
        assert g["stride_per_key_per_rank"] == [[U]] * 3
        assert g["lengths"].shape == (3 * U,)
        keys, inv = g["inverse_indices"]
        assert keys == USER and inv.dtype == torch.int64 and inv.shape == (3, B)
        assert int(inv.max()) < U
        # user_id has one id per row, user_cat 20 (the sessions preset).
        L = g["lengths"].reshape(3, U)
        assert torch.all(L[0] == 1) and torch.all(L[2] == 20)
        b.release()


def test_dataloader(worker):
    ds = SluiceIterableDataset(worker(), timeout_ms=int(30000 * SCALE))
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    seen = 0
    for item in loader:
        assert isinstance(item["dense"], torch.Tensor)
        assert item["dense"].shape == (item["batch_size"], 4)
        assert set(item["groups"]) == {"user"}
        seen += int(item["sample_ids"].numel())
    assert seen == ROWS


def test_dataloader_workers_split_batches(worker):
    # Two loader processes on one worker: every sample still exactly once.
    ds = SluiceIterableDataset([worker()], timeout_ms=int(30000 * SCALE), expand=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    ids = []
    for item in loader:
        assert item["groups"] == {}
        assert item["sparse"]["keys"][-3:] == USER
        ids.append(item["sample_ids"].numpy().copy())
    ids = np.concatenate(ids)
    assert np.array_equal(np.sort(ids), np.arange(ROWS))


def test_cluster_secret(worker, tmp_path):
    secret = tmp_path / "cluster.secret"
    secret.write_text("a cluster secret for the python test\n")
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("some other cluster's secret\n")
    addr = worker(dedup=False, extra=("--cluster-secret-file", str(secret)))
    # no secret, a wrong one: refused at connect, naming the address
    for kw in ({}, {"cluster_secret_file": str(wrong)}):
        with pytest.raises(sluice.SluiceError) as ei:
            client(addr, reconnect_ms=-1, **kw)
        assert ei.value.name == "SL_ERR_PROTOCOL"
        assert addr in str(ei.value)
        assert ("requires the cluster secret" if not kw else "authentication failed") in str(
            ei.value
        )
    ids = []
    with client(addr, cluster_secret_file=str(secret)) as c:
        for b in c:
            with b:
                ids.append(b.sample_ids.copy())
    ids = np.concatenate(ids)
    assert np.array_equal(np.sort(ids), np.arange(ROWS))


def test_a_second_epoch_of_a_finished_job_is_an_error_not_empty(worker):
    """`for epoch in range(2): for b in loader:` over a job of one epoch: the
    second iteration raises, saying why, instead of yielding nothing."""
    ds = SluiceIterableDataset(worker(), timeout_ms=int(30000 * SCALE))
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    assert sum(int(b["sample_ids"].numel()) for b in loader) == ROWS
    with pytest.raises(sluice.SluiceError, match="the job has no more data"):
        for _ in loader:
            pass


def test_read_in_place_is_writable_and_outlives_the_client(worker, monkeypatch):
    """A worker on this host hands its frames over in shared memory, read
    in place (zero copy): the arrays and tensors may be written (an in-place
    op copies the page into this process, never into the worker's heap or
    the next batch), and they stay valid after the client closes; with
    $SLUICE_TRAINER_SHM_COPY=1 the client copies each frame out."""
    c = client(worker())
    b = c.next()
    dense, ids = b.dense, b.sample_ids
    assert dense.flags.writeable and ids.flags.writeable
    saved_dense, saved_ids = dense.copy(), ids.copy()
    t = batch_to_torch(b)
    assert t["dense"].data_ptr() == dense.__array_interface__["data"][0]
    t["dense"].mul_(0.0)  # an in-place op on the tensor: a private page
    assert (np.isnan(dense) | (dense == 0)).all()
    dense[...] = saved_dense
    st = c.stats()
    assert st["batches_shm"] >= 1 and st["batches_socket"] == 0
    # the rest of the epoch through the same heap: blocks written by the
    # worker after this batch's are read as the worker wrote them
    rest = []
    for _ in range(3):
        nb = c.next()
        rest.append(nb.sample_ids.copy())
        del nb
    gc.collect()
    assert all(len(set(r.tolist()) & set(saved_ids.tolist())) == 0 for r in rest)
    del b
    c.close()
    gc.collect()
    # the bytes (dense values may be NaN)
    assert dense.tobytes() == saved_dense.tobytes()
    assert ids.tobytes() == saved_ids.tobytes()
    assert t["dense"].numpy().tobytes() == saved_dense.tobytes()

    monkeypatch.setenv("SLUICE_TRAINER_SHM_COPY", "1")
    with client(worker(name="copy")) as c2:
        b2 = c2.next()
        d2 = b2.dense
        assert d2.flags.writeable
        d2[0, 0] = 1.0
        assert d2[0, 0] == 1.0
        assert c2.stats()["batches_shm"] >= 1
        del d2
        b2.release()


def test_shm_copy_keyword_copies_frames_out(worker, monkeypatch):
    """Client(shm_copy=True) copies each frame out of the worker's shared
    memory as $SLUICE_TRAINER_SHM_COPY=1 does: the batches still come
    through shared memory (none over the socket), their arrays writable
    (worker_shm_test's read_in_place_the_same_as_copied_out checks in C
    that the option makes the worker hold no block)."""
    monkeypatch.delenv("SLUICE_TRAINER_SHM_COPY", raising=False)
    with client(worker(name="kwcopy"), shm_copy=True) as c:
        b = c.next()
        d = b.dense
        assert d.flags.writeable
        d[0, 0] = 2.0
        assert d[0, 0] == 2.0
        st = c.stats()
        # the prefetch may have taken more than the one read
        assert st["batches_shm"] >= 1 and st["batches_socket"] == 0
        del d
        b.release()
