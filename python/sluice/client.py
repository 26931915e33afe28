"""The trainer client: batches from a sluice DPP worker as numpy arrays that
share the C buffers (no element-by-element copy).

    with sluice.Client("127.0.0.1:7077", prefetch=4) as client:
        for batch in client:
            with batch:                      # released at the end of the block
                ids = batch.sparse.values    # numpy int64 view on the C buffer
                t = sluice.torch.batch_to_torch(batch)  # torch tensors, same memory

Lifetime: every array a Batch hands out holds a reference to the Batch (its
`.base` is a small view object whose `.owner` is the Batch), so the C batch
stays alive as long as any array or tensor made from it does, and is
released when the last of them and the Batch are gone. batch.release() (or
leaving a `with batch:` block) gives it back at once when nothing made from
it is alive any more, otherwise as soon as the last array goes; either way
the Batch object itself can no longer be read.

A batch from a worker on the same host is read in place in the worker's
shared memory (zero copy, docs/PROTOCOL.md "Shared-memory hand-over"), and
its block goes back to the worker when the C batch is released as above.
Arrays and tensors made from it stay valid after the client closes or the
worker goes, and may be written (in-place ops): the client's mapping is
private, so a write copies the page into this process and the worker never
sees it. Client(shm_copy=True) (or $SLUICE_TRAINER_SHM_COPY=1) makes the
client copy every frame out instead, as over the socket.
"""

import ctypes
import os
import threading
from typing import Any, Dict, Iterator, List, NoReturn, Optional, Tuple, Union

import numpy as np

from . import _native


class SluiceError(Exception):
    """A sluice C call failed: .code is the sl_err_t value, .name its name,
    the message the C library's description of what failed and where."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.name = _native.err_name(code)
        super().__init__("%s: %s" % (self.name, message) if message else self.name)


class SluiceTimeout(SluiceError, TimeoutError):
    """No batch arrived within the timeout (the connection is still fine)."""


def _raise(code: int, err: Any, what: str) -> NoReturn:
    msg = err.msg.decode("utf-8", "replace") if err.msg else ""
    if not msg:
        msg = _native.load().sl_err_str(code).decode()
    cls = SluiceTimeout if code == _native.SL_ERR_TIMEOUT else SluiceError
    raise cls(code, "%s: %s" % (what, msg))


class _View:
    """The numpy base of one array: exposes one C buffer through the array
    interface and keeps the Batch that owns the buffer alive."""

    __slots__ = ("owner", "__array_interface__")

    def __init__(self, owner: "Batch", addr: int, shape: Tuple[int, ...], typestr: str) -> None:
        self.owner = owner
        self.__array_interface__ = {
            "version": 3,
            # writable, read in place too: the client's mapping of a
            # worker's heap is private (copy on write)
            "data": (addr, False),
            "shape": shape,
            "typestr": typestr,
        }
        owner._live += 1

    def __del__(self) -> None:
        # The array this view backs is gone: a batch released while arrays
        # were alive goes back with its last one.
        o = self.owner
        o._live -= 1
        if o._live == 0 and o._released:
            o._free()


class _Handle:
    """The sl_trainer_t and the lock that serialises next/release on it
    (trainer.h: one thread at a time). Batches hold the handle, so it lives
    until they are gone; a batch released after close() is freed with
    sl_batch_destroy, as trainer.h allows."""

    def __init__(self, lib: Any, ptr: Any) -> None:
        self.lib = lib
        self.ptr = ptr
        self.lock = threading.Lock()
        # Batches whose owner died while the lock was held elsewhere (a
        # finalizer must never block): freed by the next call that holds it.
        self.pending: List[Any] = []

    def free_batch(self, bptr: Any) -> None:
        if not self.lock.acquire(blocking=False):
            self.pending.append(bptr)
            return
        try:
            self._free(bptr)
            self._drain()
        finally:
            self.lock.release()

    def _free(self, bptr: Any) -> None:
        if self.ptr is not None:
            self.lib.sl_trainer_release(self.ptr, bptr)
        else:
            self.lib.sl_batch_destroy(bptr)

    def _drain(self) -> None:
        # Caller holds self.lock.
        while self.pending:
            self._free(self.pending.pop())

    def close(self) -> None:
        with self.lock:
            self._drain()
            if self.ptr is not None:
                self.lib.sl_trainer_close(self.ptr)
                self.ptr = None


def _strings(pp: Any, n: int) -> List[str]:
    if n == 0 or not pp:
        return []
    return [pp[i].decode("utf-8", "replace") for i in range(n)]


class Jagged:
    """One feature of a KJT, as TorchRec's JaggedTensor: values (int64),
    lengths (int32 [stride]), weights (float32 or None) - views into the
    batch's buffers, nothing copied. offsets() makes the [stride + 1]
    prefix sum; to_list() the ids row by row (a copy, for looking)."""

    __slots__ = ("key", "values", "lengths", "weights")

    def __init__(self, key: str, values: np.ndarray, lengths: np.ndarray,
                 weights: Optional[np.ndarray]) -> None:
        self.key = key
        self.values = values
        self.lengths = lengths
        self.weights = weights

    def offsets(self) -> np.ndarray:
        out = np.zeros(self.lengths.size + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=out[1:])
        return out

    def to_list(self) -> List[List[int]]:
        o = self.offsets()
        return [self.values[o[i]:o[i + 1]].tolist() for i in range(self.lengths.size)]

    def __repr__(self) -> str:
        return "Jagged(%r, rows=%d, values=%d)" % (self.key, self.lengths.size, self.values.size)


class KJT:
    """A KeyedJaggedTensor of a batch, TorchRec layout: keys [F], lengths
    int32 [F*stride] key-major, values int64, weights float32 or None.
    kjt["item_id"] is that feature as a Jagged (views, no copy), as
    TorchRec's kjt["item_id"]; to_dict() every feature so."""

    __slots__ = ("keys", "stride", "lengths", "values", "weights")

    keys: List[str]
    stride: int
    lengths: np.ndarray
    values: np.ndarray
    weights: Optional[np.ndarray]

    def __init__(
        self,
        keys: List[str],
        stride: int,
        lengths: np.ndarray,
        values: np.ndarray,
        weights: Optional[np.ndarray],
    ) -> None:
        self.keys = keys
        self.stride = stride
        self.lengths = lengths
        self.values = values
        self.weights = weights

    def offsets(self) -> np.ndarray:
        """int64 [F*stride + 1]: exclusive prefix sum of lengths (a new array)."""
        out = np.zeros(self.lengths.size + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=out[1:])
        return out

    def lengths_2d(self) -> np.ndarray:
        """lengths as [F, stride] (a view)."""
        return self.lengths.reshape(len(self.keys), self.stride)

    def __getitem__(self, key: str) -> Jagged:
        try:
            f = self.keys.index(key)
        except ValueError:
            raise KeyError("%r: the batch's features here are %s" % (key, self.keys)) from None
        lo, hi = f * self.stride, (f + 1) * self.stride
        start = int(self.lengths[:lo].sum(dtype=np.int64))
        end = start + int(self.lengths[lo:hi].sum(dtype=np.int64))
        w = self.weights[start:end] if self.weights is not None else None
        return Jagged(key, self.values[start:end], self.lengths[lo:hi], w)

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)

    def to_dict(self) -> Dict[str, Jagged]:
        """Every feature by name (TorchRec's KeyedJaggedTensor.to_dict)."""
        return {k: self[k] for k in self.keys}

    def __repr__(self) -> str:
        return "KJT(keys=%r, stride=%d, values=%d)" % (self.keys, self.stride, self.values.size)


class IKJT:
    """One dedup group: `unique` holds the group's features over U unique
    rows, `inverse` (int32 [B]) maps every batch row to its unique row."""

    __slots__ = ("name", "unique", "batch_size", "inverse")

    name: str
    unique: KJT
    batch_size: int
    inverse: np.ndarray

    def __init__(self, name: str, unique: KJT, batch_size: int, inverse: np.ndarray) -> None:
        self.name = name
        self.unique = unique
        self.batch_size = batch_size
        self.inverse = inverse

    @property
    def keys(self) -> List[str]:
        return self.unique.keys

    def __getitem__(self, key: str) -> Jagged:
        """The feature over the group's unique rows (stride U); row i of the
        batch is unique row inverse[i]."""
        return self.unique[key]

    def __repr__(self) -> str:
        return "IKJT(%r, keys=%r, unique=%d of %d)" % (
            self.name,
            self.unique.keys,
            self.unique.stride,
            self.batch_size,
        )


class Batch:
    """One batch from the worker. Attributes (numpy views on the C buffers,
    made afresh on each access - cheap, nothing is copied): sparse (KJT),
    groups (list of IKJT), dense (float32 [B, D]), labels (float32 [B, T]),
    sample_ids (int64 [B] or None), record_ms (int64 [B]: Kafka batches,
    each sample's record CreateTime in ms since the epoch; None for table
    batches); plain data: batch_size, dense_names,
    label_names, origin (dict), order_g (int or None: under a job in the
    deterministic order, the batch's index g in its epoch's global sequence,
    this rank r of R getting g = r, r + R, ...; after a resume, g in the
    resumed job's sequence, the original one less what was handed out before
    the checkpoint; None in the dynamic order). sluice.torch.batch_to_torch
    gives the same as torch tensors.

    The Batch holds no array itself (each array holds the Batch), so there is
    no reference cycle: the C batch goes back as soon as the last reference
    to the Batch or to anything made from it is dropped."""

    batch_size: int
    dense_names: List[str]
    label_names: List[str]
    origin: Dict[str, int]
    order_g: Optional[int]

    def __init__(self, handle: "_Handle", bptr: Any) -> None:
        self._handle = handle
        self._ptr = bptr
        self._released = False
        self._live = 0  # arrays alive that point into the batch (see _View)
        b = bptr.contents
        self.batch_size = int(b.batch_size)
        self.dense_names = _strings(b.dense.names, b.dense.cols)
        self.label_names = _strings(b.labels.names, b.labels.cols)
        self._sparse_keys = _strings(b.sparse.keys, b.sparse.num_keys)
        self._group_names = [
            b.groups[g].name.decode("utf-8", "replace") if b.groups[g].name else ""
            for g in range(b.num_groups)
        ]
        self._group_keys = [
            _strings(b.groups[g].unique.keys, b.groups[g].unique.num_keys)
            for g in range(b.num_groups)
        ]
        o = b.origin
        self.origin = {
            "job_id": int(o.job_id),
            "epoch": int(o.epoch),
            "split_id": int(o.split_id),
            "first_row": int(o.first_row),
            "sequence": int(o.sequence),
        }
        self.order_g = int(b.order_g_plus_one) - 1 if b.order_g_plus_one else None

    def _c(self) -> Any:
        if self._released or self._ptr is None:
            raise SluiceError(-2, "batch was released")
        return self._ptr.contents

    def _array(self, ptr: Any, shape: Tuple[int, ...], typestr: str) -> np.ndarray:
        n = 1
        for s in shape:
            n *= s
        if n == 0:
            # An empty buffer may be NULL: nothing to share.
            return np.empty(shape, dtype=np.dtype(typestr))
        addr = ctypes.cast(ptr, ctypes.c_void_p).value
        if not addr:
            raise SluiceError(-2, "batch buffer of %d elements is NULL" % n)
        return np.asarray(_View(self, addr, shape, typestr))

    def _kjt(self, k: Any, keys: List[str]) -> KJT:
        nk, stride, nv = int(k.num_keys), int(k.stride), int(k.num_values)
        return KJT(
            keys,
            stride,
            self._array(k.lengths, (nk * stride,), "<i4"),
            self._array(k.values, (nv,), "<i8"),
            self._array(k.weights, (nv,), "<f4") if k.weights else None,
        )

    @property
    def sparse(self) -> KJT:
        return self._kjt(self._c().sparse, self._sparse_keys)

    @property
    def num_groups(self) -> int:
        return len(self._group_names)

    def group(self, g: Union[int, str]) -> IKJT:
        """Dedup group g (an index or a name) as an IKJT."""
        if isinstance(g, str):
            g = self._group_names.index(g)
        ik = self._c().groups[g]
        return IKJT(
            self._group_names[g],
            self._kjt(ik.unique, self._group_keys[g]),
            int(ik.batch_size),
            self._array(ik.inverse, (int(ik.batch_size),), "<i4"),
        )

    @property
    def groups(self) -> List[IKJT]:
        return [self.group(g) for g in range(len(self._group_names))]

    @property
    def dense(self) -> np.ndarray:
        d = self._c().dense
        return self._array(d.data, (int(d.rows), int(d.cols)), "<f4")

    def to_dict(self) -> Dict[str, Any]:
        """The batch by name, views nothing copied: "sparse" {feature:
        Jagged}, "groups" {group: {"inverse": int32 [B], "features":
        {feature: Jagged over the unique rows}}}, "dense" {name: float32
        [B]}, "labels" {name: float32 [B]} (label_names says the columns:
        a negative_downsample filter adds its weight column), "sample_ids"."""
        dense, labels = self.dense, self.labels
        return {
            "sparse": self.sparse.to_dict(),
            "groups": {g.name: {"inverse": g.inverse, "features": g.unique.to_dict()}
                       for g in self.groups},
            "dense": {n: dense[:, i] for i, n in enumerate(self.dense_names)},
            "labels": {n: labels[:, i] for i, n in enumerate(self.label_names)},
            "sample_ids": self.sample_ids,
        }

    @property
    def labels(self) -> np.ndarray:
        d = self._c().labels
        return self._array(d.data, (int(d.rows), int(d.cols)), "<f4")

    @property
    def sample_ids(self) -> Optional[np.ndarray]:
        b = self._c()
        return self._array(b.sample_ids, (self.batch_size,), "<i8") if b.sample_ids else None

    @property
    def record_ms(self) -> Optional[np.ndarray]:
        b = self._c()
        return self._array(b.record_ms, (self.batch_size,), "<i8") if b.record_ms else None

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the C batch back: now when no array made from it is alive,
        otherwise as soon as the last one goes. The Batch can no longer be
        read. Idempotent."""
        if self._released:
            return
        self._released = True
        if self._live == 0:
            self._free()

    def _free(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            self._handle.free_batch(ptr)

    def __del__(self) -> None:
        # Runs once neither the caller nor any array refers to the batch.
        try:
            self._free()
        except Exception:
            pass

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        if self._released:
            return "Batch(released)"
        return "Batch(B=%d, sparse=%r, groups=%r, dense=%d, labels=%d)" % (
            self.batch_size,
            self._sparse_keys,
            self._group_names,
            len(self.dense_names) if self.dense_names else self._c().dense.cols,
            self._c().labels.cols,
        )


class Client:
    """A connection to one DPP worker ("host:port"), or, with master= and
    job=, to every worker of a job through the DPP master (each batch is
    committed at the master before it is handed out: exactly once per
    epoch). Iterating yields Batch objects until the job has no more data.
    prefetch: decoded batches the C library keeps ready (per worker in
    master mode); timeout_ms: how long one next() waits for a batch (< 0:
    forever) before SluiceTimeout. cluster_secret_file: the file holding the
    cluster secret the workers and master require (default: the file named
    by $SLUICE_CLUSTER_SECRET_FILE, if set; docs/PROTOCOL.md
    "Authentication"). metrics_address: serve the client's own Prometheus
    metrics (GET /metrics: every counter of stats(), labelled job, rank and
    client; docs/TRAINER.md "Metrics") on this "host:port" while the client
    is open; port 0 picks a free one (see metrics_port). None: the address
    in $SLUICE_TRAINER_METRICS, if set; "": none. shm: take batches from
    workers on this host through shared memory (docs/PROTOCOL.md
    "Shared-memory hand-over"; off also with $SLUICE_TRAINER_SHM=0).
    shm_copy: copy each such batch out of the worker's shared memory
    (writable arrays, as over the socket) instead of reading it in place
    (also on with $SLUICE_TRAINER_SHM_COPY=1)."""

    def __init__(
        self,
        address: Optional[str] = None,
        prefetch: int = 4,
        timeout_ms: int = 60000,
        client_name: Optional[str] = None,
        connect_timeout_ms: int = 0,
        reconnect_ms: int = 0,
        rank: int = 0,
        world_size: int = 1,
        master: Optional[str] = None,
        job: Optional[str] = None,
        client_id: Optional[str] = None,
        refresh_ms: int = 0,
        cluster_secret_file: Optional[str] = None,
        metrics_address: Optional[str] = None,
        shm: bool = True,
        shm_copy: bool = False,
    ) -> None:
        lib = _native.load()
        self._lib = lib
        self._handle = None
        if (address is None) == (master is None):
            raise ValueError("sluice.Client: give a worker address or master=, not both or neither")
        if master is not None and not job:
            raise ValueError("sluice.Client: master= needs job=")
        self.address = address if address is not None else master
        self.master = master
        self.job = job
        self.timeout_ms = timeout_ms
        opts = lib.sl_trainer_opts_default()
        self._address_b = address.encode() if address is not None else None
        self._master_b = master.encode() if master is not None else None
        self._job_b = job.encode() if job else None
        self._cid_b = client_id.encode() if client_id else None
        self._name_b = client_name.encode() if client_name else None
        self._secret_b = os.fsencode(cluster_secret_file) if cluster_secret_file else None
        self._metrics_b = metrics_address.encode() if metrics_address is not None else None
        opts.address = self._address_b
        opts.master = self._master_b
        opts.job_id = self._job_b
        opts.client_id = self._cid_b
        if refresh_ms:
            opts.refresh_ms = refresh_ms
        opts.client_name = self._name_b
        opts.cluster_secret_file = self._secret_b
        opts.metrics_address = self._metrics_b
        opts.no_shm = not shm
        opts.shm_copy = shm_copy
        opts.prefetch = prefetch
        opts.connect_timeout_ms = connect_timeout_ms
        opts.reconnect_ms = reconnect_ms
        opts.rank = rank
        opts.world_size = world_size
        err = _native.sl_error_t()
        t = ctypes.c_void_p()
        rc = lib.sl_trainer_connect(ctypes.byref(opts), ctypes.byref(t), ctypes.byref(err))
        if rc != _native.SL_OK:
            if master is not None:
                _raise(rc, err, "connect to master %s (job %s)" % (master, job))
            _raise(rc, err, "connect to %s" % address)
        self._handle = _Handle(lib, t)
        self._done = False

    def next(self, timeout_ms: Optional[int] = None) -> Optional[Batch]:
        """The next Batch, or None when the job has no more batches. Raises
        SluiceTimeout when none arrived in time, SluiceError when the
        connection failed for good."""
        h = self._handle
        if h is None or h.ptr is None:
            raise SluiceError(-11, "client for %s is closed" % self.address)
        if self._done:
            return None
        tmo = self.timeout_ms if timeout_ms is None else timeout_ms
        err = _native.sl_error_t()
        out = ctypes.POINTER(_native.sl_batch_t)()
        with h.lock:
            h._drain()
            # ctypes drops the GIL for the call, so other threads run while
            # this one waits for data.
            rc = self._lib.sl_trainer_next(h.ptr, tmo, ctypes.byref(out), ctypes.byref(err))
        if rc == _native.SL_ERR_CLOSED:
            self._done = True
            return None
        if rc != _native.SL_OK:
            _raise(rc, err, "next batch from %s" % self.address)
        try:
            return Batch(h, out)
        except Exception:
            h.free_batch(out)
            raise

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        b = self.next()
        if b is None:
            raise StopIteration
        return b

    def resume_token(self, timeout_ms: int = 30000, step: Optional[int] = None) -> bytes:
        """Master mode: this rank's opaque resume token (bytes) for a
        checkpoint at this batch boundary: the batches this client handed
        out so far count as delivered, nothing else. A checkpoint is the
        tokens of every rank (each taken once its rank hands out nothing
        more, at any moment); give them all to `sluice submit
        --resume-token` (once per token) to deliver exactly the rest, with
        any number of ranks. step (>= 0): the trainer's checkpoint step,
        carried in the token (a resume refuses tokens whose steps differ).
        Call it from the thread that iterates. Raises SluiceError
        (SL_ERR_UNSUPPORTED for a direct worker client)."""
        if step is not None and step < 0:
            raise ValueError("resume_token: step %d (>= 0)" % step)
        h = self._handle
        if h is None or h.ptr is None:
            raise SluiceError(-11, "client for %s is closed" % self.address)
        err = _native.sl_error_t()
        tok = ctypes.POINTER(ctypes.c_uint8)()
        n = ctypes.c_size_t(0)
        with h.lock:
            if step is None:
                rc = self._lib.sl_trainer_resume_token(
                    h.ptr, timeout_ms, ctypes.byref(tok), ctypes.byref(n), ctypes.byref(err)
                )
            else:
                rc = self._lib.sl_trainer_resume_token_at(
                    h.ptr, step, timeout_ms, ctypes.byref(tok), ctypes.byref(n), ctypes.byref(err)
                )
            if rc != _native.SL_OK:
                _raise(rc, err, "resume token from %s" % self.address)
            try:
                return ctypes.string_at(tok, n.value)
            finally:
                self._lib.sl_trainer_token_free(h.ptr, tok, n)

    def stats(self) -> Dict[str, Any]:
        """The C client's counters as a dict (batches, samples, bytes,
        wait_ns: time next() spent waiting for data, the call in progress
        included, as /metrics counts it, never falling; reconnects, queued;
        in master mode also workers, committed,
        dropped; batches_shm and batches_socket: batches received through
        shared memory and over the socket) and the freshness of Kafka samples at hand-over:
        freshness_buckets (a list of counts, not cumulative),
        freshness_bounds_ms (the buckets' upper bounds; the last bucket has
        none), freshness_count, freshness_sum_ms."""
        h = self._handle
        s = _native.sl_trainer_stats_t()
        if h is not None and h.ptr is not None:
            self._lib.sl_trainer_stats(h.ptr, ctypes.byref(s))
        out: Dict[str, Any] = {}
        for field in s._fields_:
            name = field[0]
            v = getattr(s, name)
            out[name] = [int(x) for x in v] if isinstance(v, ctypes.Array) else int(v)
        out["freshness_bounds_ms"] = _native.freshness_bounds_ms(self._lib)
        return out

    @property
    def metrics_port(self) -> int:
        """The port of the client's metrics endpoint (the one picked when
        metrics_address asked for port 0), or 0 when it serves none or is
        closed."""
        h = self._handle
        if h is None or h.ptr is None:
            return 0
        return int(self._lib.sl_trainer_metrics_port(h.ptr))

    def close(self) -> None:
        """Disconnect. Batches already handed out stay valid until released."""
        if self._handle is not None:
            self._handle.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def library_path() -> str:
    """Path of the loaded libsluice_trainer.so (see sluice._native)."""
    return _native.library_path()

