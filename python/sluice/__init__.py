"""sluice: receive training batches from sluice DPP workers in Python.

    import sluice
    with sluice.Client("127.0.0.1:7077") as c:
        for batch in c:
            with batch:
                ...   # batch.sparse / batch.groups / batch.dense: numpy views

PyTorch helpers (IterableDataset, TorchRec KJT keyword arguments, IKJT
expansion) are in sluice.torch, imported on demand so that numpy-only users
do not load torch; TorchRec's Batch, one KJT per batch and a rank-aware
dataset for DDP in sluice.torchrec (which imports torchrec).

Installed with `pip install .` from a checkout (distribution sluice-trainer:
`sluice` on PyPI is another project); python/README.md.
"""

from .client import IKJT, KJT, Batch, Client, SluiceError, SluiceTimeout, library_path

__all__ = [
    "Batch",
    "Client",
    "IKJT",
    "KJT",
    "SluiceError",
    "SluiceTimeout",
    "library_path",
]
__version__ = "0.1.0"
