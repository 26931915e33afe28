"""PyTorch side of the sluice client: batches as dicts of torch tensors that
share the C buffers, TorchRec KeyedJaggedTensor keyword arguments (plain and
deduplicated / variable-batch), IKJT expansion, and an IterableDataset.

An IKJT (one dedup group: the group's features over U unique rows plus
inverse indices [B]) is what TorchRec calls a variable-batch KJT: every key
has stride U (`stride_per_key_per_rank=[[U]] * F`) and
`inverse_indices=(keys, int64 tensor [F, B])` says which unique row each
batch row uses, so an EmbeddingBagCollection pools the U unique rows once
and expands the pooled output to B rows.
"""

from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch

from .client import IKJT, KJT, Batch, Client, SluiceError

try:  # TorchRec is optional: without it we hand out the keyword arguments.
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as _TorchrecKJT

    HAVE_TORCHREC = True
except Exception:  # ImportError, or a torchrec/fbgemm that fails to load
    _TorchrecKJT = None
    HAVE_TORCHREC = False


def _t(a: Optional[np.ndarray]) -> Optional[torch.Tensor]:
    """numpy -> torch without copying (None stays None)."""
    return None if a is None else torch.from_numpy(a)


def kjt_kwargs(part: Union[KJT, IKJT, Dict[str, Any]]) -> Dict[str, Any]:
    """Keyword arguments for torchrec's KeyedJaggedTensor(**kwargs).

    part: a KJT (batch.sparse, or expand_ikjt's result as a dict) gives
    keys, values (int64), lengths (int32, key-major), weights (float32 or
    None) and stride (B). An IKJT (a dedup group) gives the unique rows:
    stride U, stride_per_key_per_rank [[U]] * F, and inverse_indices
    (keys, int64 [F, B]) - the group's inverse indices once per key. The
    tensors share the batch's buffers except inverse_indices (int32 -> int64,
    F x B: a small copy)."""
    if isinstance(part, IKJT):
        u = part.unique
        f = len(u.keys)
        inv = torch.from_numpy(part.inverse.astype(np.int64))
        return {
            "keys": list(u.keys),
            "values": _t(u.values),
            "lengths": _t(u.lengths),
            "weights": _t(u.weights),
            "stride": u.stride,
            "stride_per_key_per_rank": [[u.stride] for _ in range(f)],
            "inverse_indices": (list(u.keys), inv.unsqueeze(0).expand(f, -1).contiguous()),
        }
    if isinstance(part, KJT):
        return {
            "keys": list(part.keys),
            "values": _t(part.values),
            "lengths": _t(part.lengths),
            "weights": _t(part.weights),
            "stride": part.stride,
        }
    if isinstance(part, dict):  # expand_ikjt / expand_batch output (numpy)

        def conv(a: Any) -> Any:
            return a if a is None or isinstance(a, torch.Tensor) else torch.from_numpy(a)

        return {
            "keys": list(part["keys"]),
            "values": conv(part["values"]),
            "lengths": conv(part["lengths"]),
            "weights": conv(part.get("weights")),
            "stride": int(part["stride"]),
        }
    raise TypeError("kjt_kwargs: expected a sluice KJT, IKJT or expanded dict, got %r" % type(part))


def make_kjt(kwargs: Dict[str, Any]) -> Any:
    """torchrec KeyedJaggedTensor(**kwargs). Raises ImportError without TorchRec."""
    if not HAVE_TORCHREC:
        raise ImportError("torchrec is not importable: use the keyword arguments (kjt_kwargs)")
    return _TorchrecKJT(**kwargs)


def _gather_segments(lengths: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Indices that concatenate segments [starts[i], starts[i] + lengths[i])."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    # Each output slot j of segment i takes starts[i] + (j - (ends[i] - lengths[i])).
    shift = np.repeat(starts - (ends - lengths), lengths)
    return shift + np.arange(total, dtype=np.int64)


def expand_ikjt(group: IKJT, as_torch: bool = False) -> Dict[str, Any]:
    """The KJT of stride B that an IKJT stands for: row b of every key is
    unique row inverse[b]. Returns a dict keys, values, lengths, weights,
    stride (new numpy arrays; torch tensors when as_torch)."""
    u = group.unique
    f, nu, b = len(u.keys), u.stride, group.batch_size
    inv = group.inverse.astype(np.int64)
    if inv.size and (inv.min() < 0 or inv.max() >= max(nu, 1)):
        raise ValueError("group %r: inverse index out of [0, %d)" % (group.name, nu))
    rows = (np.arange(f, dtype=np.int64)[:, None] * nu + inv[None, :]).reshape(-1)
    offsets = np.zeros(u.lengths.size + 1, dtype=np.int64)
    np.cumsum(u.lengths, out=offsets[1:])
    lengths = u.lengths[rows] if rows.size else np.zeros(0, dtype=np.int32)
    idx = _gather_segments(lengths, offsets[:-1][rows] if rows.size else offsets[:0])
    out = {
        "keys": list(u.keys),
        "values": u.values[idx],
        "lengths": np.ascontiguousarray(lengths, dtype=np.int32),
        "weights": None if u.weights is None else u.weights[idx],
        "stride": b,
    }
    if as_torch:
        for k in ("values", "lengths", "weights"):
            out[k] = _t(out[k])
    return out


def expand_batch(batch: Batch, as_torch: bool = False) -> Dict[str, Any]:
    """One KJT of stride B: the batch's plain KJT keys followed by every
    group's keys expanded, in group order (what sl_batch_expand builds, and
    what the job sends without dedup groups, up to key order)."""
    parts: List[Dict[str, Any]] = [
        {
            "keys": batch.sparse.keys,
            "values": batch.sparse.values,
            "lengths": batch.sparse.lengths,
            "weights": batch.sparse.weights,
        }
    ]
    parts += [expand_ikjt(g) for g in batch.groups]
    weighted = any(p["weights"] is not None for p in parts)
    if weighted:
        for p in parts:
            if p["weights"] is None:
                p["weights"] = np.ones(p["values"].size, dtype=np.float32)
    out: Dict[str, Any] = {
        "keys": [k for p in parts for k in p["keys"]],
        "values": np.concatenate([p["values"] for p in parts]),
        "lengths": np.concatenate([p["lengths"] for p in parts]).astype(np.int32, copy=False),
        "weights": np.concatenate([p["weights"] for p in parts]) if weighted else None,
        "stride": batch.batch_size,
    }
    if as_torch:
        for k in ("values", "lengths", "weights"):
            out[k] = _t(out[k])
    return out


def merged_kjt_kwargs(batch: Batch) -> Dict[str, Any]:
    """Keyword arguments for ONE torchrec KeyedJaggedTensor holding the whole
    batch: the plain KJT's keys (stride B) followed by every dedup group's
    keys (stride U_g, the group's unique rows), as a variable-batch KJT.
    stride_per_key_per_rank gives each key's stride, and inverse_indices
    (keys, int64 [F, B]) maps every batch row to its row of each key:
    arange(B) for plain keys, the group's inverse indices for group keys. So
    to_dict() holds the unique rows per group key, inverse_indices() expands
    them, and an EmbeddingBagCollection pools each group key's U_g rows once
    and returns [B, ...] outputs equal to those of the expanded batch
    (expand_batch). Without dedup groups this is kjt_kwargs(batch.sparse).
    values/lengths/weights are new tensors (one concatenation per batch)."""
    groups = batch.groups
    if not groups:
        return kjt_kwargs(batch.sparse)
    b = batch.batch_size
    sp = batch.sparse
    parts = [(sp, b, None)] + [(g.unique, g.unique.stride, g.inverse) for g in groups]
    weighted = any(k.weights is not None for k, _, _ in parts)
    keys: List[str] = []
    strides: List[List[int]] = []
    rows: List[torch.Tensor] = []
    values, lengths, weights = [], [], []
    plain_rows = torch.arange(b, dtype=torch.int64)
    for k, stride, inverse in parts:
        f = len(k.keys)
        keys += k.keys
        strides += [[stride]] * f
        r = plain_rows if inverse is None else torch.from_numpy(inverse.astype(np.int64))
        rows += [r] * f
        values.append(torch.from_numpy(k.values))
        lengths.append(torch.from_numpy(k.lengths))
        if weighted:
            w = k.weights if k.weights is not None else np.ones(k.values.size, np.float32)
            weights.append(torch.from_numpy(w))
    return {
        "keys": keys,
        "values": torch.cat(values),
        "lengths": torch.cat(lengths),
        "weights": torch.cat(weights) if weighted else None,
        "stride": b,
        "stride_per_key_per_rank": strides,
        "inverse_indices": (list(keys), torch.stack(rows)),
    }


def batch_to_torch(batch: Batch, expand: bool = False, as_kjt: bool = False) -> Dict[str, Any]:
    """A Batch as a dict of torch tensors sharing its buffers:
    batch_size, dense [B, D], labels [B, T], sample_ids [B] (or None),
    dense_names, label_names, order_g (Batch.order_g: the batch's index in
    the deterministic order's global sequence, or None), sparse (kjt_kwargs
    of the plain KJT) and groups {name: kjt_kwargs of the IKJT}. expand=True folds the groups into
    sparse (expanded, new buffers) and leaves groups empty; as_kjt=True
    makes torchrec KeyedJaggedTensors of the keyword arguments."""
    out: Dict[str, Any] = {
        "batch_size": batch.batch_size,
        "dense": _t(batch.dense),
        "labels": _t(batch.labels),
        "sample_ids": _t(batch.sample_ids),
        "dense_names": list(batch.dense_names),
        "label_names": list(batch.label_names),
        "order_g": getattr(batch, "order_g", None),
    }
    if expand:
        out["sparse"] = kjt_kwargs(expand_batch(batch))
        out["groups"] = {}
    else:
        out["sparse"] = kjt_kwargs(batch.sparse)
        out["groups"] = {g.name: kjt_kwargs(g) for g in batch.groups}
    if as_kjt:
        out["sparse"] = make_kjt(out["sparse"])
        out["groups"] = {n: make_kjt(kw) for n, kw in out["groups"].items()}
    return out


class SluiceIterableDataset(torch.utils.data.IterableDataset):
    """Batches from one or more sluice workers for a torch DataLoader (use
    batch_size=None: the batches are already batched).

    With DataLoader workers, each worker process opens its own clients (never
    before the fork): worker i of n takes addresses[i::n], or, with fewer
    addresses than workers, addresses[i % len]. A DPP worker hands every
    batch to exactly one client, so clients sharing a worker split its
    batches between them and nothing is delivered twice.

    Each item is batch_to_torch(batch, expand, as_kjt). Tensors share the C
    buffers in the main process (num_workers=0); DataLoader workers move
    them to shared memory to send them over.

    metrics_address: passed to every client opened (sluice.Client): each
    serves its own /metrics there. With more than one client per process
    (several addresses) or DataLoader workers, give port 0 ("host:0") so
    that each picks a free port, or leave it None and use
    $SLUICE_TRAINER_METRICS the same way."""

    def __init__(
        self,
        addresses: Union[str, Sequence[str]],
        prefetch: int = 4,
        timeout_ms: int = 60000,
        expand: bool = False,
        as_kjt: bool = False,
        metrics_address: Optional[str] = None,
    ) -> None:
        super().__init__()
        if isinstance(addresses, str):
            addresses = [addresses]
        if not addresses:
            raise ValueError("SluiceIterableDataset: no worker address")
        self.addresses = list(addresses)
        self.prefetch = prefetch
        self.timeout_ms = timeout_ms
        self.expand = expand
        self.as_kjt = as_kjt
        self.metrics_address = metrics_address

    def _my_addresses(self) -> List[str]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self.addresses
        n, i = info.num_workers, info.id
        if len(self.addresses) >= n:
            return self.addresses[i::n]
        return [self.addresses[i % len(self.addresses)]]

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        clients = [
            Client(a, prefetch=self.prefetch, timeout_ms=self.timeout_ms,
                   metrics_address=self.metrics_address)
            for a in self._my_addresses()
        ]
        n = 0
        try:
            # Round-robin over the clients until every one is exhausted.
            while clients:
                for c in list(clients):
                    b = c.next()
                    if b is None:
                        c.close()
                        clients.remove(c)
                        continue
                    n += 1
                    yield batch_to_torch(b, expand=self.expand, as_kjt=self.as_kjt)
                    del b  # the tensors keep the C batch alive as long as needed
        finally:
            for c in clients:
                c.close()
        if n == 0 and torch.utils.data.get_worker_info() is None:
            # A second `for` over the loader finds the job done: epochs live
            # in the job spec, not in the loop. Say so instead of an empty
            # epoch. (A DataLoader worker may see none when others took all.)
            raise SluiceError(-11, "SluiceIterableDataset: no batch from %s: the job has no "
                              "more data (its epochs are the spec's batch.epochs; each "
                              "iteration here reads on from where the last stopped). For one "
                              "epoch per iteration use sluice.Dataset" % ", ".join(self.addresses))
