"""Batch views, lifetime and IKJT expansion on batches built in Python memory
(tests/fakebatch.py): no C library or worker needed. The same properties are
checked against a real worker in test_worker.py."""

import gc
import os

import numpy as np
import pytest
import torch

from fakebatch import expand_reference, make_batch
import sluice
from sluice import SluiceError
from sluice.torch import batch_to_torch, expand_batch, expand_ikjt, kjt_kwargs

SEEDS = [1, 2, 3, 17, 12345]


def test_arrays_are_views_on_the_c_buffers():
    batch, h, truth = make_batch()
    d = batch.dense
    assert not d.flags.owndata
    assert d.base.owner is batch
    assert d.__array_interface__["data"][0] == truth["dense"].ctypes.data
    assert batch.sparse.values.__array_interface__["data"][0] == truth["sparse"][1].ctypes.data
    np.testing.assert_array_equal(d, truth["dense"])
    np.testing.assert_array_equal(batch.sample_ids, truth["ids"])
    np.testing.assert_array_equal(batch.group(0).inverse, truth["groups"][0][3])
    assert batch.dense_names == ["d0", "d1", "d2", "d3"] and batch.label_names == ["click"]
    # Writing through the view is seen in the C buffer: it is the same memory.
    d[0, 0] = 42.0
    assert truth["dense"][0, 0] == 42.0


def test_array_keeps_batch_alive_after_drop_and_gc():
    batch, h, truth = make_batch()
    vals = batch.sparse.values
    del batch
    gc.collect()
    assert h.freed == []
    np.testing.assert_array_equal(vals, truth["sparse"][1])
    del vals
    gc.collect()
    assert len(h.freed) == 1


def test_batch_without_arrays_is_freed_by_refcount_alone():
    # No reference cycle between a Batch and its arrays: no gc.collect needed.
    gc.disable()
    try:
        batch, h, _ = make_batch()
        _ = batch.dense, batch.sparse, batch.groups
        del batch, _
        assert len(h.freed) == 1
    finally:
        gc.enable()


def test_explicit_release():
    batch, h, _ = make_batch()
    with batch:
        assert batch.dense.shape == (16, 4)
    assert batch.released and len(h.freed) == 1
    with pytest.raises(SluiceError, match="released"):
        batch.dense
    batch.release()  # idempotent
    assert len(h.freed) == 1


def test_release_with_live_array_waits_for_it():
    batch, h, truth = make_batch()
    ids = batch.sample_ids
    batch.release()
    assert h.freed == []
    np.testing.assert_array_equal(ids, truth["ids"])
    del ids
    assert len(h.freed) == 1  # with the last array, batch object still held
    assert batch.released


def test_torch_tensors_share_memory():
    batch, h, truth = make_batch()
    t = batch_to_torch(batch)
    assert t["dense"].data_ptr() == truth["dense"].ctypes.data
    assert t["sparse"]["values"].data_ptr() == truth["sparse"][1].ctypes.data
    assert t["groups"]["user"]["values"].data_ptr() == truth["groups"][0][1].ctypes.data
    del batch
    gc.collect()
    assert h.freed == []  # the tensors hold the batch
    assert torch.equal(t["sample_ids"], torch.from_numpy(truth["ids"]))
    del t
    gc.collect()
    assert len(h.freed) == 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_expand_ikjt_matches_reference(seed, weighted):
    batch, _, truth = make_batch(seed=seed, B=32, groups=(("g", ("a", "b", "c"), 7),), weighted=weighted)
    g = batch.group("g")
    e = expand_ikjt(g)
    lengths, values, weights, inverse = truth["groups"][0]
    rl, rv, rw = expand_reference(lengths, values, weights, inverse, 3)
    assert e["keys"] == ["a", "b", "c"] and e["stride"] == 32
    assert e["lengths"].dtype == np.int32 and e["values"].dtype == np.int64
    assert e["lengths"].tolist() == rl
    assert e["values"].tolist() == rv
    if weighted:
        assert e["weights"].dtype == np.float32 and e["weights"].tolist() == rw
    else:
        assert e["weights"] is None
    et = expand_ikjt(g, as_torch=True)
    assert et["values"].dtype == torch.int64 and et["values"].tolist() == rv


def test_expand_batch_orders_keys_like_sl_batch_expand():
    batch, _, truth = make_batch(groups=(("u", ("u1",), 3), ("v", ("v1", "v2"), 4)))
    e = expand_batch(batch)
    assert e["keys"] == ["i1", "i2", "i3", "u1", "v1", "v2"]
    assert e["lengths"].size == 6 * 16
    assert e["values"][: truth["sparse"][1].size].tolist() == truth["sparse"][1].tolist()
    assert int(e["lengths"].sum()) == e["values"].size


def test_kjt_kwargs_shapes_and_dtypes():
    batch, _, truth = make_batch(B=16, groups=(("user", ("u1", "u2"), 5),))
    kw = kjt_kwargs(batch.sparse)
    assert set(kw) == {"keys", "values", "lengths", "weights", "stride"}
    assert kw["keys"] == ["i1", "i2", "i3"] and kw["stride"] == 16
    assert kw["lengths"].dtype == torch.int32 and kw["lengths"].shape == (48,)
    assert kw["values"].dtype == torch.int64 and kw["values"].shape == (int(kw["lengths"].sum()),)
    assert kw["weights"] is None
    g = kjt_kwargs(batch.group(0))
    assert g["keys"] == ["u1", "u2"] and g["stride"] == 5
    assert g["stride_per_key_per_rank"] == [[5], [5]]
    assert g["lengths"].shape == (10,)
    keys, inv = g["inverse_indices"]
    assert keys == ["u1", "u2"]
    assert inv.dtype == torch.int64 and inv.shape == (2, 16)
    assert inv[0].tolist() == truth["groups"][0][3].tolist() == inv[1].tolist()


def test_kjt_kwargs_rejects_other_types():
    with pytest.raises(TypeError):
        kjt_kwargs([1, 2])


def test_expand_ikjt_rejects_bad_inverse():
    batch, _, truth = make_batch()
    truth["groups"][0][3][2] = 99  # beyond U = 5
    with pytest.raises(ValueError, match="inverse index"):
        expand_ikjt(batch.group(0))


def test_version_is_the_cmake_project_version():
    """sluice.__version__ is the CMake project's version, which the wheel's
    metadata (pyproject.toml) and libsluice_trainer.so's file name take."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        m = re.search(r"project\(sluice VERSION ([0-9.]+)", f.read())
    assert m and sluice.__version__ == m.group(1)


@pytest.mark.parametrize("seed", SEEDS)
def test_features_by_name_are_views_like_torchrecs_jagged_tensors(seed):
    batch, h, truth = make_batch(seed, weighted=True)
    lengths, values, weights = truth["sparse"]
    B, keys = batch.batch_size, ["i1", "i2", "i3"]
    kjt = batch.sparse
    assert "i2" in kjt and "nope" not in kjt and len(kjt) == 3
    start = 0
    for f, key in enumerate(keys):
        j = kjt[key]
        n = int(lengths[f * B:(f + 1) * B].sum())
        np.testing.assert_array_equal(j.lengths, lengths[f * B:(f + 1) * B])
        np.testing.assert_array_equal(j.values, values[start:start + n])
        np.testing.assert_array_equal(j.weights, weights[start:start + n])
        assert j.values.__array_interface__["data"][0] == values[start:].ctypes.data  # no copy
        o = j.offsets()
        assert o[0] == 0 and o[-1] == n and o.size == B + 1
        assert j.to_list()[0] == values[start:start + lengths[f * B]].tolist()
        start += n
    with pytest.raises(KeyError, match="'nope': the batch's features here are"):
        kjt["nope"]
    d = batch.to_dict()
    assert list(d["sparse"]) == keys
    g = d["groups"]["user"]
    np.testing.assert_array_equal(g["inverse"], truth["groups"][0][3])
    glen, gval, _, _ = truth["groups"][0]
    np.testing.assert_array_equal(g["features"]["u1"].lengths, glen[:5])
    np.testing.assert_array_equal(batch.group("user")["u2"].values, gval[int(glen[:5].sum()):])
    np.testing.assert_array_equal(d["dense"]["d2"], batch.dense[:, 2])
    assert list(d["labels"]) == ["click"]
    np.testing.assert_array_equal(d["sample_ids"], truth["ids"])
