"""Build an sl_batch_t in Python memory (numpy buffers behind the ctypes
struct), so Batch views, lifetime and expansion can be tested without the C
library or a worker. The data is random from a seed, shaped like a worker's:
a plain KJT, dedup groups as IKJTs, dense, labels and sample ids."""

import ctypes

import numpy as np

from sluice import _native
from sluice.client import Batch


class FakeHandle:
    """Stands in for client._Handle: records which batches were freed."""

    def __init__(self):
        self.freed = []
        self.keep = []  # numpy buffers and C strings behind the structs

    def free_batch(self, bptr):
        self.freed.append(ctypes.addressof(bptr.contents))


def _ptr(h, arr, ctype):
    h.keep.append(arr)
    return arr.ctypes.data_as(ctypes.POINTER(ctype))


def _names(h, names):
    arr = (ctypes.c_char_p * max(len(names), 1))(*[n.encode() for n in names])
    h.keep.append(arr)
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p))


def _fill_kjt(h, k, keys, lengths, values, weights):
    k.num_keys = len(keys)
    k.stride = lengths.size // max(len(keys), 1)
    k.num_values = values.size
    k.keys = _names(h, keys)
    k.lengths = _ptr(h, lengths, ctypes.c_int32)
    k.values = _ptr(h, values, ctypes.c_int64)
    if weights is not None:
        k.weights = _ptr(h, weights, ctypes.c_float)


def random_kjt(rng, keys, stride, weighted=False, max_len=4):
    lengths = rng.integers(0, max_len + 1, size=len(keys) * stride).astype(np.int32)
    values = rng.integers(0, 1 << 40, size=int(lengths.sum())).astype(np.int64)
    weights = rng.random(values.size).astype(np.float32) if weighted else None
    return lengths, values, weights


def make_batch(seed=1, B=16, groups=(("user", ("u1", "u2"), 5),), weighted=False):
    """A random batch. groups: (name, keys, U) each. Returns (Batch, handle,
    truth) where truth holds the arrays the batch points into."""
    rng = np.random.default_rng(seed)
    h = FakeHandle()
    b = _native.sl_batch_t()
    h.keep.append(b)
    b.batch_size = B
    truth = {"sparse": random_kjt(rng, ["i1", "i2", "i3"], B, weighted), "groups": []}
    _fill_kjt(h, b.sparse, ["i1", "i2", "i3"], *truth["sparse"])
    garr = (_native.sl_ikjt_t * max(len(groups), 1))()
    h.keep.append(garr)
    for gi, (name, keys, U) in enumerate(groups):
        lengths, values, weights = random_kjt(rng, list(keys), U, weighted)
        inverse = rng.integers(0, U, size=B).astype(np.int32)
        inverse[:U] = np.arange(U)  # every unique row used
        nm = ctypes.c_char_p(name.encode())
        h.keep.append(nm)
        garr[gi].name = nm
        _fill_kjt(h, garr[gi].unique, list(keys), lengths, values, weights)
        garr[gi].batch_size = B
        garr[gi].inverse = _ptr(h, inverse, ctypes.c_int32)
        truth["groups"].append((lengths, values, weights, inverse))
    b.num_groups = len(groups)
    b.groups = ctypes.cast(garr, ctypes.POINTER(_native.sl_ikjt_t))
    dense = rng.random((B, 4)).astype(np.float32)
    labels = (rng.random((B, 1)) < 0.5).astype(np.float32)
    ids = np.arange(1000, 1000 + B, dtype=np.int64)
    b.dense.rows, b.dense.cols, b.dense.data = B, 4, _ptr(h, dense, ctypes.c_float)
    b.dense.names = _names(h, ["d0", "d1", "d2", "d3"])
    b.labels.rows, b.labels.cols, b.labels.data = B, 1, _ptr(h, labels, ctypes.c_float)
    b.labels.names = _names(h, ["click"])
    b.sample_ids = _ptr(h, ids, ctypes.c_int64)
    truth.update(dense=dense, labels=labels, ids=ids)
    return Batch(h, ctypes.pointer(b)), h, truth


def expand_reference(lengths, values, weights, inverse, nkeys):
    """Expansion by plain Python loops, for comparison."""
    U = lengths.size // nkeys
    offs = np.concatenate([[0], np.cumsum(lengths)])
    out_l, out_v, out_w = [], [], []
    for f in range(nkeys):
        for b in inverse:
            r = f * U + int(b)
            out_l.append(int(lengths[r]))
            out_v.extend(values[offs[r] : offs[r + 1]].tolist())
            if weights is not None:
                out_w.extend(weights[offs[r] : offs[r + 1]].tolist())
    return out_l, out_v, out_w
