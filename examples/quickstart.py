"""The Python quick start (README.md, "Installing"): a PyTorch training loop
over the batches of a sluice worker; `python quickstart.py WORKER_ADDRESS`.
ctest wheel runs it in a fresh venv where only the wheel is installed."""
import sys

import torch
from sluice.torch import SluiceIterableDataset

loader = torch.utils.data.DataLoader(SluiceIterableDataset(sys.argv[1]), batch_size=None)
model, samples = None, 0
for batch in loader:  # a dict of tensors sharing the C buffers, until the job ends
    x = torch.log1p(torch.nan_to_num(batch["dense"]))  # float32 [B, D] counts; missing (NaN): 0
    y = batch["labels"][:, :1]  # the click label, [B, 1]
    if model is None:
        model = torch.nn.Linear(x.shape[1], 1)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    samples += batch["batch_size"]
print(f"quickstart: {samples} samples, last loss {loss.item():.4f}")
