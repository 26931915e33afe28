"""sluice.Dataset: one object a PyTorch user makes from a table and a job
spec, that iterates like a torch IterableDataset: each iteration is one
epoch, exactly once, and state_dict()/load_state_dict() resume exactly
mid-epoch, locally or on a fleet, with the same or another number of ranks
(docs/TRAINER.md, "sluice.Dataset").

How it works: every epoch is a job of one epoch on a DPP master, submitted
by the Dataset when the epoch starts (id "<spec id>-e<epoch>", its shuffle
seed the spec's plus the epoch), read through sluice.Client in master mode
(each batch committed before it is handed out). Without master=, the
Dataset runs its own master with a local executor (sluice._local), which
starts the workers; with master= and admin=, it submits to that fleet. An
epoch that is a job of its own ends when its job does, so no batch of the
next epoch is ever taken early, and a checkpoint is that job's resume
tokens (one per rank, combined by the master)."""

import base64
import copy
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
import torch.utils.data

from ._local import Admin, AdminError, LocalMaster
from .client import Batch, Client, SluiceError

_CLOSED = -11  # SL_ERR_CLOSED
_STATE_VERSION = 1


def _dist() -> Tuple[int, int]:
    """(rank, world_size) from torch.distributed when it is initialized."""
    d = torch.distributed
    if d.is_available() and d.is_initialized():
        return int(d.get_rank()), int(d.get_world_size())
    return 0, 1


def _load_spec(job: Union[str, Dict[str, Any], None], table: Optional[str]) -> Dict[str, Any]:
    if job is None:
        spec: Dict[str, Any] = {}
    elif isinstance(job, dict):
        spec = copy.deepcopy(job)
    else:
        with open(job) as f:
            spec = json.load(f)
    if table is not None:
        spec.setdefault("source", {})["table"] = os.path.abspath(table)
    if not spec.get("source"):
        raise ValueError("sluice.Dataset: give a table (table=) or a job spec with a source")
    return spec


class Dataset(torch.utils.data.IterableDataset):
    """Batches of a sluice job for PyTorch: `for batch in ds` is one epoch;
    iterating again is the next one (each batch's "epoch" says which).

    table: a sluice table (or the job spec's source); job: the job spec, a
    dict or a JSON file (docs/JOBS.md), its batch.epochs the number of
    epochs unless epochs= is given. master/admin: a fleet's master (control
    and admin addresses; the admin token from admin_token or
    $SLUICE_ADMIN_TOKEN); without them the Dataset runs its own master and
    workers (workers=, worker_threads is the master's default). rank and
    world_size: from torch.distributed when it is initialized. as_torch:
    yield dicts of tensors (sluice.torch.batch_to_torch, plus "epoch");
    False: sluice.Batch objects (DataLoader num_workers=0 only).
    torchrec: a form of sluice.torchrec.to_batch ("unique" for
    DedupEmbeddingBagCollection, "variable_batch"): yield TorchRec
    Pipelineable batches, for TrainPipelineSparseDist(iter(ds)).

    Use it with DataLoader(ds, batch_size=None, num_workers=N): with N > 0,
    call ds.set_epoch(e) before each epoch (as with DistributedSampler) or
    use persistent_workers=True, so that every DataLoader worker reads the
    same epoch; the workers of a rank share that rank's batches."""

    def __init__(
        self,
        table: Optional[str] = None,
        job: Union[str, Dict[str, Any], None] = None,
        *,
        epochs: Optional[int] = None,
        master: Optional[str] = None,
        admin: Optional[str] = None,
        admin_token: Optional[str] = None,
        workers: int = 1,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        prefetch: int = 4,
        timeout_ms: int = 120000,
        as_torch: bool = True,
        expand: bool = False,
        torchrec: Optional[str] = None,
        binary: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.spec = _load_spec(job, table)
        self.name = str(self.spec.get("id", "job"))
        batch = self.spec.setdefault("batch", {})
        self.epochs = int(epochs if epochs is not None else batch.get("epochs", 1))
        if self.epochs < 1:
            raise ValueError("sluice.Dataset: epochs must be at least 1")
        if (master is None) != (admin is None):
            raise ValueError("sluice.Dataset: a fleet needs both master= (control) and admin=")
        r, w = _dist()
        self.rank = r if rank is None else rank
        self.world_size = w if world_size is None else world_size
        self.workers = workers
        self.prefetch = prefetch
        self.timeout_ms = timeout_ms
        self.as_torch = as_torch
        self.expand = expand
        if torchrec is not None:
            from .torchrec import FORMS

            if torchrec not in FORMS:
                raise ValueError("sluice.Dataset: torchrec=%r is not one of %s"
                                 % (torchrec, ", ".join(FORMS)))
        self.torchrec = torchrec
        self._local: Optional[LocalMaster] = None
        if master is None:
            # one master for every rank: rank 0 starts it, the others learn it
            addr: Optional[List[Optional[str]]] = None
            if self.rank == 0:
                self._local = LocalMaster(binary)
                addr = [self._local.control, self._local.admin.base, self._local.admin.token]
            if self.world_size > 1:
                box = [addr]
                torch.distributed.broadcast_object_list(box, src=0)
                addr = box[0]
            if addr is None:
                raise SluiceError(-2, "sluice.Dataset: rank 0 did not say where its master is")
            master, admin, admin_token = addr[0], addr[1], addr[2]
        if admin is None:
            raise ValueError("sluice.Dataset: no admin address")
        self.master = master
        self._admin = Admin(admin, admin_token)
        self._epoch = 0  # the epoch the next iteration reads
        self._tokens: List[bytes] = []  # a checkpoint's, for the next epoch's job
        self._client: Optional[Client] = None
        self._job_id: Optional[str] = None  # the epoch's job being read

    # ---- epochs ----------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Read epoch `epoch` next (0-based; as DistributedSampler.set_epoch).
        A checkpoint loaded for another epoch is dropped."""
        if not 0 <= epoch < self.epochs:
            raise ValueError("sluice.Dataset %r: epoch %d is not in 0..%d (epochs=%d)"
                             % (self.name, epoch, self.epochs - 1, self.epochs))
        if epoch != self._epoch:
            self._tokens = []
        self._epoch = epoch

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration reads."""
        return self._epoch

    def _epoch_spec(self, epoch: int) -> Dict[str, Any]:
        spec = copy.deepcopy(self.spec)
        spec["id"] = "%s-e%d" % (self.name, epoch)
        batch = spec.setdefault("batch", {})
        batch["epochs"] = 1
        shuffle = batch.get("shuffle")
        if isinstance(shuffle, dict):  # another order every epoch, the same in every run
            shuffle["seed"] = int(shuffle.get("seed", 0)) + epoch
        return spec

    def _start_epoch(self) -> str:
        """Submit this epoch's job (rank 0; every rank waits for it)."""
        spec = self._epoch_spec(self._epoch)
        job_id: str = spec["id"]
        in_worker = torch.utils.data.get_worker_info() is not None
        if self.rank == 0:
            self._forget(self._epoch - 2)
            try:
                if self._tokens:
                    # the checkpoint's job: in place when this master has it
                    # (tokens name their job), else anew under its id
                    try:
                        self._admin.resubmit(job_id, self._tokens)
                    except AdminError as e:
                        if e.status != 404:
                            raise
                        self._admin.submit(spec, self.world_size, self.workers, self._tokens)
                else:
                    self._submit_fresh(spec)
            except AdminError as e:
                # DataLoader workers of one rank all try: the first one wins
                if not (in_worker and e.status == 409):
                    raise
        if self.world_size > 1 and not in_worker:
            torch.distributed.barrier()
        return job_id

    def _submit_fresh(self, spec: Dict[str, Any]) -> None:
        """The epoch's job from its start. One of that id that finished (the
        epoch read again: set_epoch) goes first; one still running (an
        iteration left mid-epoch) is read on: nothing is delivered twice."""
        try:
            self._admin.submit(spec, self.world_size, self.workers)
            return
        except AdminError as e:
            if e.status != 409:
                raise
        if self._admin.job(spec["id"]).get("state") == "running":
            return
        self._admin.remove(spec["id"])
        self._admin.submit(spec, self.world_size, self.workers)

    def _forget(self, epoch: int) -> None:
        """Remove an epoch's finished jobs from the master (it holds a bounded
        number of jobs). Two epochs back: every rank passed the barrier at
        the start of the epoch after it, so none reads it any more."""
        if epoch < 0:
            return
        try:
            self._admin.remove("%s-e%d" % (self.name, epoch))
        except AdminError:
            pass  # already gone

    def __iter__(self) -> Iterator[Any]:
        if self._epoch >= self.epochs:
            raise SluiceError(_CLOSED, "sluice.Dataset %r: all %d epochs were read; make a "
                              "Dataset with more epochs (epochs=), or set_epoch/load_state_dict "
                              "to read one again" % (self.name, self.epochs))
        self._close_client()
        job_id = self._start_epoch()
        info = torch.utils.data.get_worker_info()
        self._client = Client(master=self.master, job=job_id, rank=self.rank,
                              world_size=self.world_size, prefetch=self.prefetch,
                              timeout_ms=self.timeout_ms,
                              client_name="dataset-r%d-w%d" % (self.rank, info.id if info else 0))
        self._job_id = job_id
        epoch = self._epoch
        n = 0
        try:
            for b in self._client:
                n += 1
                yield self._item(b, epoch)
        finally:
            if self._job_id == job_id:
                self._close_client()
        self._tokens = []
        self._epoch = epoch + 1
        if n == 0 and info is None and self._delivered_nothing(job_id):
            raise SluiceError(_CLOSED, "sluice.Dataset %r: epoch %d gave no batch (job %s): every "
                              "row was filtered out, or the table is empty"
                              % (self.name, epoch, job_id))

    def _delivered_nothing(self, job_id: str) -> bool:
        """Did the epoch's job deliver nothing at all (not only to this rank)?"""
        try:
            return int(self._admin.job(job_id).get("samples", 0)) == 0
        except Exception:
            return True

    def _item(self, b: Batch, epoch: int) -> Any:
        if self.torchrec is not None:
            from .torchrec import to_batch

            tb = to_batch(b, form=self.torchrec)
            tb.epoch = epoch
            return tb
        if not self.as_torch:
            b.epoch = epoch  # type: ignore[attr-defined]
            return b
        from .torch import batch_to_torch

        d = batch_to_torch(b, expand=self.expand)
        d["epoch"] = epoch
        return d

    # ---- checkpoints -----------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Where this dataset stands, for a checkpoint taken between two
        batches: the epoch, and mid-epoch every rank's resume token (gathered
        with torch.distributed when it is initialized; every rank must call
        it at the same step). load_state_dict of it, with any number of
        ranks, delivers exactly the batches no rank took before."""
        tokens: List[str] = []
        if self._client is not None:
            mine = base64.b64encode(self._client.resume_token()).decode()
            tokens = [mine]
            if self.world_size > 1:
                box: List[Any] = [None] * self.world_size
                torch.distributed.all_gather_object(box, mine)
                tokens = list(box)
        return {"version": _STATE_VERSION, "name": self.name, "epoch": self._epoch,
                "epochs": self.epochs, "world_size": self.world_size, "tokens": tokens}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Go on from a state_dict() (of this job; any world size): the next
        iteration reads the rest of its epoch, or the next epoch."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError("sluice.Dataset: a state of version %r, this one reads %d"
                             % (state.get("version"), _STATE_VERSION))
        if state.get("name") != self.name:
            raise ValueError("sluice.Dataset %r: the state is of job %r" % (self.name,
                                                                            state.get("name")))
        epoch = int(state["epoch"])
        if not 0 <= epoch <= self.epochs:
            raise ValueError("sluice.Dataset %r: the state's epoch %d is past epochs=%d"
                             % (self.name, epoch, self.epochs))
        self._close_client()
        self._epoch = epoch
        self._tokens = [base64.b64decode(t) for t in state.get("tokens", [])]

    # ---- the end ---------------------------------------------------------------

    def _close_client(self) -> None:
        c, self._client, self._job_id = self._client, None, None
        if c is not None:
            c.close()

    def close(self) -> None:
        """Close the client and, when this Dataset runs its own master, stop
        it and its workers."""
        self._close_client()
        if self._local is not None:
            self._local.close()
            self._local = None

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        # DataLoader workers get a copy that reads; the master stays here
        d = dict(self.__dict__)
        d["_local"] = None
        d["_client"] = None
        d["_job_id"] = None
        return d

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
