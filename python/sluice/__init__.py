"""sluice: receive training batches from sluice DPP workers in Python.

    import sluice
    with sluice.Client("127.0.0.1:7077") as c:
        for batch in c:
            with batch:
                ...   # batch.sparse / batch.groups / batch.dense: numpy views

sluice.Dataset (imports torch when first used): a job spec and a table as a
torch IterableDataset, one epoch per iteration, exact checkpoints:

    ds = sluice.Dataset("/data/sessions", {"batch": {"size": 512, "epochs": 2}})
    for epoch in range(2):
        for batch in ds:            # dicts of tensors, batch["epoch"] == epoch
            ...

PyTorch helpers (IterableDataset, TorchRec KJT keyword arguments, IKJT
expansion) are in sluice.torch, imported on demand so that numpy-only users
do not load torch; TorchRec's Batch, one KJT per batch and a rank-aware
dataset for DDP in sluice.torchrec (which imports torchrec).

Installed with `pip install .` from a checkout (distribution sluice-trainer:
`sluice` on PyPI is another project); python/README.md.
"""

from typing import Any

from .client import IKJT, KJT, Batch, Client, Jagged, SluiceError, SluiceTimeout, library_path


def __getattr__(name: str) -> Any:
    # sluice.Dataset imports torch: only when asked for
    if name == "Dataset":
        from .dataset import Dataset

        return Dataset
    raise AttributeError("module 'sluice' has no attribute %r" % name)


__all__ = [
    "Batch",
    "Client",
    "Dataset",
    "IKJT",
    "Jagged",
    "KJT",
    "SluiceError",
    "SluiceTimeout",
    "library_path",
]
__version__ = "0.1.0"
