"""sluice for TorchRec: batches that TorchRec's train pipelines accept, one
KeyedJaggedTensor per batch, and a rank-aware dataset for DDP in master mode.

    from sluice.torchrec import MasterDataset
    from torchrec.distributed.train_pipeline import TrainPipelineBase

    data = MasterDataset(master="10.0.0.1:7070", job="ctr-train")  # rank from torch.distributed
    pipeline = TrainPipelineBase(model, optimizer, torch.device("cpu"))
    it = iter(data)
    for step in range(steps):
        pipeline.progress(it)                  # model(batch) gets a sluice.torchrec.Batch
        if step % 1000 == 999:                 # TrainPipelineBase holds 1 batch ahead
            torch.save({"model": model.state_dict(), "data": data.state_dict(pending=1)}, path)

Dedup groups train fastest in RecD's form: `MasterDataset(..., form="unique")`
(or `to_batch(b, form="unique")`) hands each group's unique rows as their
own KJT plus the inverse indices, and DedupEmbeddingBagCollection in the
model looks up and pools the unique rows only, then expands the pooled
rows to the batch (docs/TRAINER.md, "Dedup groups in TorchRec").

Importing this module imports torchrec (`import sluice` does not): Batch is
a torchrec Pipelineable. TorchRec and torch versions tested:
ops/torchrec-requirements.txt (ops/torchrec-venv makes that environment).
"""

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import torch

try:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor
    from torchrec.streamable import Pipelineable
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sluice.torchrec needs torchrec (%s); ops/torchrec-venv makes a CPU environment with "
        "torch, fbgemm-gpu-cpu and torchrec (python/README.md, 'TorchRec')" % e
    ) from e

from . import client as _client
from .torch import kjt_kwargs, merged_kjt_kwargs


class _ByGroup(Dict[str, Any]):
    """Batch.unique_features / inverse_indices: a dict whose missing group
    says what to do (TorchRec's pipeline looks groups up by name)."""

    def __missing__(self, key: Any) -> Any:
        raise KeyError(
            "sluice.torchrec.Batch has no dedup group %r in its unique form (groups: %s): "
            "the job must declare it (batch.dedup_groups) and the batches be made with "
            "to_batch(..., form='unique')" % (key, ", ".join(sorted(self)) or "none")
        )


@dataclass
class Batch(Pipelineable):
    """A training batch as torchrec.datasets.utils.Batch has it, so that
    TorchRec's train pipelines (TrainPipelineBase, TrainPipelineSparseDist)
    take it: dense_features float32 [B, D], sparse_features a
    KeyedJaggedTensor, labels float32 [B] (or [B, T] for T label columns),
    plus sample_ids int64 [B] (or None), and order_g: under a job in the
    deterministic order, the batch's index g in its epoch's global sequence
    (sluice.Batch.order_g; rank r of R gets g = r, r + R, ...), else None.
    After a resume, g counts the resumed job's sequence (the original one
    less the batches handed out before the checkpoint), except for the
    pending batches MasterDataset.load_state_dict hands out again first,
    which keep the g they had when first handed out.

    With dedup groups, to_batch() gives one of two forms:
    - "variable_batch" (the default): sparse_features is ONE variable-batch
      KJT of every feature, plain and deduplicated (merged_kjt_kwargs), for
      a plain EmbeddingBagCollection; unique_features and inverse_indices
      are empty.
    - "unique" (RecD's form, for DedupEmbeddingBagCollection):
      sparse_features holds the plain features only (stride B), and per
      group unique_features[name] its features over the U unique rows
      (a KJT of stride U) and inverse_indices[name] int64 [B] (batch row ->
      unique row).

    dense_features, labels and sample_ids share the received buffers (the C
    batch goes back when they are all gone), and so do the KJTs of the
    "unique" form; the merged KJT of the "variable_batch" form is a copy."""

    dense_features: torch.Tensor
    sparse_features: KeyedJaggedTensor
    labels: torch.Tensor
    sample_ids: Optional[torch.Tensor] = None
    unique_features: Dict[str, KeyedJaggedTensor] = field(default_factory=_ByGroup)
    inverse_indices: Dict[str, torch.Tensor] = field(default_factory=_ByGroup)
    order_g: Optional[int] = None

    def __post_init__(self) -> None:
        self.unique_features = _ByGroup(self.unique_features)
        self.inverse_indices = _ByGroup(self.inverse_indices)

    @property
    def batch_size(self) -> int:
        return int(self.dense_features.shape[0])

    def _map(self, fn: Any) -> "Batch":
        return Batch(
            dense_features=fn(self.dense_features),
            sparse_features=fn(self.sparse_features),
            labels=fn(self.labels),
            sample_ids=None if self.sample_ids is None else fn(self.sample_ids),
            unique_features={g: fn(k) for g, k in self.unique_features.items()},
            inverse_indices={g: fn(i) for g, i in self.inverse_indices.items()},
            order_g=self.order_g,
        )

    def to(self, device: torch.device, non_blocking: bool = False) -> "Batch":
        return self._map(lambda t: t.to(device=device, non_blocking=non_blocking))

    def record_stream(self, stream: Any) -> None:
        for t in [self.dense_features, self.sparse_features, self.labels, self.sample_ids]:
            if t is not None:
                t.record_stream(stream)
        for k in self.unique_features.values():
            k.record_stream(stream)
        for i in self.inverse_indices.values():
            i.record_stream(stream)

    def pin_memory(self) -> "Batch":
        """Page-locked copies for fast host-to-device copies. Without an
        accelerator there is nothing to pin for: the batch itself."""
        if not torch.cuda.is_available():
            return self
        return self._map(lambda t: t.pin_memory())

    def state(self) -> Dict[str, Any]:
        """The batch as plain tensors and lists (copies), for torch.save."""
        out: Dict[str, Any] = {
            "dense_features": self.dense_features.clone(),
            "labels": self.labels.clone(),
            "sample_ids": None if self.sample_ids is None else self.sample_ids.clone(),
        }
        out.update(_kjt_state(self.sparse_features))
        out["unique_features"] = {g: _kjt_state(k) for g, k in self.unique_features.items()}
        out["unique_inverse_indices"] = {g: i.clone() for g, i in self.inverse_indices.items()}
        out["order_g"] = self.order_g
        return out

    @staticmethod
    def from_state(state: Dict[str, Any]) -> "Batch":
        """The inverse of state()."""
        return Batch(
            dense_features=state["dense_features"],
            sparse_features=_kjt_from_state(state),
            labels=state["labels"],
            sample_ids=state.get("sample_ids"),
            unique_features={
                g: _kjt_from_state(s) for g, s in state.get("unique_features", {}).items()
            },
            inverse_indices=dict(state.get("unique_inverse_indices", {})),
            order_g=state.get("order_g"),
        )


def _kjt_state(kjt: KeyedJaggedTensor) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "keys": list(kjt.keys()),
        "values": kjt.values().clone(),
        "lengths": kjt.lengths().clone(),
        "weights": None if kjt.weights_or_none() is None else kjt.weights().clone(),
        "stride": kjt.stride(),
        "stride_per_key_per_rank": None,
        "inverse_indices": None,
    }
    if kjt.variable_stride_per_key():
        out["stride_per_key_per_rank"] = [list(s) for s in kjt.stride_per_key_per_rank()]
        keys, inv = kjt.inverse_indices()
        out["inverse_indices"] = (list(keys), inv.clone())
    return out


def _kjt_from_state(state: Dict[str, Any]) -> KeyedJaggedTensor:
    kw = {k: state[k] for k in ("keys", "values", "lengths", "weights", "stride")}
    if state.get("stride_per_key_per_rank") is not None:
        kw["stride_per_key_per_rank"] = state["stride_per_key_per_rank"]
        kw["inverse_indices"] = state["inverse_indices"]
    return KeyedJaggedTensor(**kw)


FORMS = ("variable_batch", "unique")


def _unique_kjt(group: "_client.IKJT", rows: Optional[int]) -> KeyedJaggedTensor:
    """A group's unique rows as a KJT of stride U, or of stride `rows` with
    empty bags after the U unique rows (no inverse index points at them)."""
    kw = kjt_kwargs(group.unique)
    u = group.unique.stride
    if rows is not None and rows != u:
        if rows < u:
            raise ValueError(
                "to_batch: unique_rows=%d, but group %r of this batch has %d unique rows"
                % (rows, group.name, u)
            )
        f = len(group.unique.keys)
        lengths = np.zeros((f, rows), dtype=np.int32)
        lengths[:, :u] = group.unique.lengths.reshape(f, u)
        kw["lengths"] = torch.from_numpy(lengths.reshape(-1))
        kw["stride"] = rows
    return KeyedJaggedTensor(**kw)


def to_batch(
    batch: "_client.Batch", form: str = "variable_batch", unique_rows: Optional[int] = None
) -> Batch:
    """A received sluice batch as a sluice.torchrec.Batch, its dedup groups
    in `form` (see Batch): "variable_batch", one KJT with the plain features
    and every group merged (merged_kjt_kwargs), or "unique", the plain
    features' KJT plus each group's unique rows and inverse indices, for
    DedupEmbeddingBagCollection. Without dedup groups both are the same.

    unique_rows (form "unique"): pad every group's KJT with empty bags to
    this many rows (at least its unique rows; the batch size always
    fits). Needed for row-wise (or any reduce-scatter) sharding over gloo:
    TorchRec's backward of the reduce-scatter is an all_gather that gloo
    only does with the same row count on every rank. NCCL, and table-wise
    sharding, do without."""
    if form not in FORMS:
        raise ValueError("to_batch: form %r is not one of %s" % (form, ", ".join(FORMS)))
    if unique_rows is not None and form != "unique":
        raise ValueError("to_batch: unique_rows is for form 'unique', not %r" % form)
    labels = torch.from_numpy(batch.labels)
    if labels.dim() == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    ids = batch.sample_ids
    unique: Dict[str, KeyedJaggedTensor] = {}
    inverse: Dict[str, torch.Tensor] = {}
    if form == "unique":
        sparse = KeyedJaggedTensor(**kjt_kwargs(batch.sparse))
        for g in batch.groups:
            unique[g.name] = _unique_kjt(g, unique_rows)
            inverse[g.name] = torch.from_numpy(g.inverse.astype(np.int64))
    else:
        sparse = KeyedJaggedTensor(**merged_kjt_kwargs(batch))
    return Batch(
        dense_features=torch.from_numpy(batch.dense),
        sparse_features=sparse,
        labels=labels,
        sample_ids=None if ids is None else torch.from_numpy(ids),
        unique_features=unique,
        inverse_indices=inverse,
        order_g=getattr(batch, "order_g", None),
    )


@torch.fx.wrap  # type: ignore[untyped-decorator]
def _expand_pooled(
    keys: List[str],
    dims: List[int],
    pooled: List[KeyedTensor],
    inverses: List[Optional[torch.Tensor]],
) -> KeyedTensor:
    """The KeyedTensor (keys, dims) [B, sum(dims)] of the inner collections'
    outputs: pooled[i] as it is (inverses[i] None: the plain features, B
    rows) or expanded from its U unique rows to B rows (index_select by
    inverses[i] [B]), its keys' columns put in `keys` order. A sharded
    collection orders its output's keys by shard, not by table: the columns
    are found by the output's own keys. fx-wrapped: TorchRec's pipelines
    trace the model symbolically and must see this as one call on the
    embedding modules' outputs."""
    cols: Dict[str, torch.Tensor] = {}
    for kt, inv in zip(pooled, inverses):
        values = kt.values() if inv is None else kt.values().index_select(0, inv)
        offsets = kt.offset_per_key()
        for i, k in enumerate(kt.keys()):
            cols[k] = values[:, offsets[i] : offsets[i + 1]]
    values = torch.cat([cols[k] for k in keys], dim=1)
    return KeyedTensor(keys=keys, length_per_key=dims, values=values)


class DedupEmbeddingBagCollection(torch.nn.Module):
    """An EmbeddingBagCollection for deduplicated batches, as RecD trains
    on IKJTs: the tables of each dedup group's features look up and pool
    the group's U unique rows only (their own EmbeddingBagCollection, fed a
    KJT of stride U), and the pooled [U, D] rows are expanded to the batch's
    B rows with the inverse indices (index_select; its backward sums each
    unique row's gradient over the rows that use it). The other tables are
    one EmbeddingBagCollection on the plain features (stride B).

        ebc = DedupEmbeddingBagCollection(tables, groups={"user": ["user_id", "user_hist"]})
        pooled = ebc(batch.sparse_features, batch.unique_features, batch.inverse_indices)

    with batch = to_batch(received, form="unique") (MasterDataset(...,
    form="unique")). The output is the KeyedTensor [B, sum of dims] that
    EmbeddingBagCollection(tables) gives for the expanded batch, keys in
    the same order (the tables' features, table by table).

    The inner collections are ordinary EmbeddingBagCollections (attributes
    `plain` and `unique[group]`), so DistributedModelParallel shards them
    (any sharding type; a plan names them by these paths) and
    TrainPipelineSparseDist pipelines their input distribution. Every
    feature of a table must be in the same group, or in none."""

    def __init__(
        self,
        tables: Sequence[EmbeddingBagConfig],
        groups: Dict[str, Sequence[str]],
        is_weighted: bool = False,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        group_of: Dict[str, str] = {}
        for g, feats in groups.items():
            for f in feats:
                if f in group_of:
                    raise ValueError(
                        "DedupEmbeddingBagCollection: feature %r is in groups %r and %r"
                        % (f, group_of[f], g)
                    )
                group_of[f] = g
        plain: List[EmbeddingBagConfig] = []
        by_group: Dict[str, List[EmbeddingBagConfig]] = {g: [] for g in groups}
        for t in tables:
            gs: Set[Optional[str]] = {group_of.get(f) for f in t.feature_names}
            if len(gs) != 1:
                raise ValueError(
                    "DedupEmbeddingBagCollection: table %r has features in different dedup "
                    "groups (%s); a table's features must all be in one group or in none"
                    % (t.name, ", ".join(sorted(str(g) for g in gs)))
                )
            tg = gs.pop()
            (plain if tg is None else by_group[tg]).append(t)
        self.plain = (
            EmbeddingBagCollection(plain, is_weighted=is_weighted, device=device) if plain else None
        )
        self.unique = torch.nn.ModuleDict(
            {
                g: EmbeddingBagCollection(ts, is_weighted=is_weighted, device=device)
                for g, ts in by_group.items()
                if ts
            }
        )
        # The output's keys: the tables' features, table by table.
        self._keys: List[str] = [f for t in tables for f in t.feature_names]
        dim = {f: t.embedding_dim for t in tables for f in t.feature_names}
        self._dims: List[int] = [dim[f] for f in self._keys]
        self._groups = list(self.unique.keys())

    def forward(
        self,
        features: KeyedJaggedTensor,
        unique_features: Dict[str, KeyedJaggedTensor],
        inverse_indices: Dict[str, torch.Tensor],
    ) -> KeyedTensor:
        """features: the plain features (stride B); unique_features[group]:
        the group's features over its U unique rows (stride U);
        inverse_indices[group]: int64 [B], each batch row's unique row."""
        pooled: List[KeyedTensor] = []
        inverses: List[Optional[torch.Tensor]] = []
        if self.plain is not None:
            pooled.append(self.plain(features))
            inverses.append(None)
        for g in self._groups:
            pooled.append(self.unique[g](unique_features[g]))
            inverses.append(inverse_indices[g])
        return _expand_pooled(self._keys, self._dims, pooled, inverses)


def batches(
    client: "_client.Client", form: str = "variable_batch", unique_rows: Optional[int] = None
) -> Iterator[Batch]:
    """Every batch of a sluice.Client as a sluice.torchrec.Batch (to_batch's
    form and unique_rows)."""
    for b in client:
        yield to_batch(b, form, unique_rows)


def rank_and_world_size() -> Tuple[int, int]:
    """This process's trainer rank and the world size: from torch.distributed
    when it is initialised, else from the environment torchrun sets (RANK,
    WORLD_SIZE), else 0 and 1."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as e:
        raise ValueError("sluice: RANK / WORLD_SIZE in the environment are not integers: %s" % e)
    if world < 1 or not 0 <= rank < world:
        raise ValueError("sluice: rank %d is not in [0, world size %d)" % (rank, world))
    return rank, world


class MasterDataset(torch.utils.data.IterableDataset):
    """The batches of one job of a DPP master for this trainer rank, as
    sluice.torchrec.Batch: an IterableDataset for DDP / TorchRec training
    (iterate it directly, or through a DataLoader with batch_size=None and
    num_workers=0: it is already batched, and one client per rank keeps the
    resume token exact).

    rank / world_size: default rank_and_world_size() (torch.distributed,
    else RANK / WORLD_SIZE). The job must be submitted for that many ranks
    (`sluice submit --ranks N`). Each batch is committed at the master before
    it is handed out (sluice.Client master mode), so every sample of an epoch
    reaches exactly one rank once.

    Checkpoints: state_dict(pending) holds this rank's resume token and the
    batches handed out but not yet trained on (`pending`: TorchRec's train
    pipelines fetch ahead - 1 for TrainPipelineBase, 2 for
    TrainPipelineSparseDist); with torch.distributed initialised it also
    holds every rank's token and pending batches (all_gather_object), so
    any one rank's state is the whole checkpoint. Save it with the model.
    To resume, resubmit the job with every rank's token (resume_tokens();
    `sluice submit --resume-token` once per rank), with the same or another
    number of ranks, and call load_state_dict() on the new dataset before
    iterating: it first hands out the saved pending batches (of the old
    ranks r with r % new_world_size == rank), then what the job delivers.

    metrics_address: the rank's client serves its own Prometheus metrics
    there (sluice.Client; labelled with the job, the rank and the client
    id). With several ranks on one host, give each its own port (for
    example 9400 + LOCAL_RANK), or port 0.

    form, unique_rows: how the batches hold their dedup groups (to_batch):
    "unique" for a model with DedupEmbeddingBagCollection."""

    def __init__(
        self,
        master: str,
        job: str,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        prefetch: int = 4,
        timeout_ms: int = 60000,
        client_id: Optional[str] = None,
        metrics_address: Optional[str] = None,
        form: str = "variable_batch",
        unique_rows: Optional[int] = None,
    ) -> None:
        super().__init__()
        if form not in FORMS:
            raise ValueError("MasterDataset: form %r is not one of %s" % (form, ", ".join(FORMS)))
        if (rank is None) != (world_size is None):
            raise ValueError("MasterDataset: give both rank and world_size, or neither")
        if rank is None or world_size is None:
            rank, world_size = rank_and_world_size()
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError("MasterDataset: rank %d is not in [0, %d)" % (rank, world_size))
        self.master = master
        self.job = job
        self.rank = rank
        self.world_size = world_size
        self.prefetch = prefetch
        self.timeout_ms = timeout_ms
        self.client_id = client_id
        self.metrics_address = metrics_address
        self.form = form
        self.unique_rows = unique_rows
        self._client: Optional[_client.Client] = None
        self._replay: List[Dict[str, Any]] = []
        self._recent: List[Batch] = []  # the last batches handed out, for state_dict(pending)
        self._keep = 0
        self.handed_out = 0  # batches handed out by this dataset since it was made

    def _connect(self) -> "_client.Client":
        if self._client is None:
            lr = os.environ.get("LOCAL_RANK")
            name = "rank%d" % self.rank + ("-local%s" % lr if lr is not None else "")
            self._client = _client.Client(
                master=self.master,
                job=self.job,
                rank=self.rank,
                world_size=self.world_size,
                prefetch=self.prefetch,
                timeout_ms=self.timeout_ms,
                client_name=name,
                client_id=self.client_id,
                metrics_address=self.metrics_address,
            )
        return self._client

    def keep_pending(self, n: int) -> None:
        """Keep the last n batches handed out (default 2) so that
        state_dict(pending<=n) can save them; call it before iterating when
        a pipeline holds more than two batches ahead."""
        self._keep = max(self._keep, n)

    def __iter__(self) -> Iterator[Batch]:
        c = self._connect()
        # TrainPipelineBase holds 1 batch ahead, TrainPipelineSparseDist 2.
        self.keep_pending(2)
        while True:
            if self._replay:
                b = Batch.from_state(self._replay.pop(0))
            else:
                raw = c.next()
                if raw is None:
                    return
                b = to_batch(raw, self.form, self.unique_rows)
                del raw
            self.handed_out += 1
            self._recent.append(b)
            del self._recent[: max(0, len(self._recent) - self._keep)]
            yield b

    def state_dict(
        self, pending: int = 0, timeout_ms: int = 30000, step: Optional[int] = None
    ) -> Dict[str, Any]:
        """This rank's checkpoint of the data: its resume token (every batch
        it handed out so far counts as delivered) and copies of the last
        `pending` batches handed out, which the trainer has not trained on
        yet and load_state_dict() hands out again first. Take it on every
        rank at the same step (step: that step, carried in the tokens and
        checked at the resume). With torch.distributed initialised the
        ranks exchange their tokens and pending batches (all_gather_object,
        a collective: every rank must call it), so the state holds the
        whole checkpoint: "tokens" (every rank's, in rank order) and
        "pending_by_rank". A token says what its own rank handed out (a
        table job's version 4, a Kafka stream's version 5), so it may be
        taken at any moment after the step and the tokens combine by union
        (docs/DESIGN.md "Resume tokens"). Call it from the thread that
        iterates."""
        if pending < 0 or pending > len(self._recent) or pending > self.handed_out:
            raise ValueError(
                "MasterDataset.state_dict: pending=%d, but only %d recent batches are kept "
                "(call keep_pending(%d) before iterating)" % (pending, len(self._recent), pending)
            )
        dist = torch.distributed
        gathered = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        token = self._connect().resume_token(timeout_ms, step=step)
        saved = self._recent[len(self._recent) - pending :] if pending else []
        mine = [b.state() for b in saved]
        state: Dict[str, Any] = {
            "version": 2,
            "master": self.master,
            "job": self.job,
            "rank": self.rank,
            "world_size": self.world_size,
            "step": step,
            "token": token,
            "pending": mine,
            "tokens": None,
            "pending_by_rank": None,
        }
        if self.world_size == 1:
            state["tokens"] = [token]
            state["pending_by_rank"] = [mine]
        elif gathered:
            if dist.get_world_size() != self.world_size:
                raise ValueError(
                    "MasterDataset.state_dict: torch.distributed has %d ranks, the dataset %d"
                    % (dist.get_world_size(), self.world_size)
                )
            every: List[Any] = [None] * self.world_size
            dist.all_gather_object(every, {"rank": self.rank, "token": token, "pending": mine})
            by_rank = {e["rank"]: e for e in every}
            if sorted(by_rank) != list(range(self.world_size)):
                raise ValueError(
                    "MasterDataset.state_dict: ranks %s gathered, want 0..%d"
                    % (sorted(by_rank), self.world_size - 1)
                )
            state["tokens"] = [by_rank[r]["token"] for r in range(self.world_size)]
            state["pending_by_rank"] = [by_rank[r]["pending"] for r in range(self.world_size)]
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore from state_dict(), of the same world size or (a state
        holding every rank's, version 2 with torch.distributed) of another:
        the pending batches are handed out first (with another world size,
        those of the old ranks r with r % world_size == this rank, so each
        is trained once). The job must have been resubmitted with every
        rank's token (resume_tokens(state)); the token itself is not needed
        here."""
        version = state.get("version")
        if version not in (1, 2):
            raise ValueError("MasterDataset: unknown state version %r" % version)
        if state["job"] != self.job:
            raise ValueError(
                "MasterDataset: state of job %r, this is job %r" % (state["job"], self.job)
            )
        old_world = state["world_size"]
        if old_world == self.world_size and state["rank"] == self.rank:
            self._replay = list(state["pending"])
            return
        by_rank = state.get("pending_by_rank") if version == 2 else None
        if by_rank is None:
            raise ValueError(
                "MasterDataset: state of rank %d of %d, this is rank %d of %d: a state for "
                "another rank or world size must hold every rank's (state_dict with "
                "torch.distributed initialised)"
                % (state["rank"], old_world, self.rank, self.world_size)
            )
        replay: List[Dict[str, Any]] = []
        for r in range(old_world):
            if r % self.world_size == self.rank:
                replay.extend(by_rank[r])
        self._replay = replay

    def stats(self) -> Dict[str, int]:
        """The client's counters (sluice.Client.stats) plus handed_out."""
        s = self._client.stats() if self._client is not None else {}
        s["handed_out"] = self.handed_out
        return s

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def resume_tokens(
    states: Union[Dict[str, Any], Sequence[Dict[str, Any]]]
) -> List[bytes]:
    """The resume tokens of a checkpoint, in rank order, for resubmitting
    the job (`sluice submit --resume-token FILE` once per token, or the
    admin endpoint's "resume_tokens"): from one state that holds every
    rank's (state_dict() with torch.distributed), or from every rank's
    state. Checks that they are of one job and cover each rank once (the
    master checks again, and that they are of one run and step)."""
    if isinstance(states, dict):
        if states.get("tokens") is None:
            raise ValueError(
                "resume_tokens: this state holds rank %d's token only; give every rank's state"
                % states["rank"]
            )
        return list(states["tokens"])
    if not states:
        raise ValueError("resume_tokens: no states")
    for s in states:
        if s.get("tokens") is not None and s["job"] == states[0]["job"]:
            return list(s["tokens"])
    job, world = states[0]["job"], states[0]["world_size"]
    by_rank: Dict[int, bytes] = {}
    for s in states:
        if s["job"] != job or s["world_size"] != world:
            raise ValueError("resume_tokens: states of different jobs or world sizes")
        if s["rank"] in by_rank:
            raise ValueError("resume_tokens: rank %d given twice" % s["rank"])
        by_rank[s["rank"]] = s["token"]
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        raise ValueError("resume_tokens: no state for rank(s) %s of %d" % (missing, world))
    return [by_rank[r] for r in range(world)]
