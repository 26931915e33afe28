"""One trainer rank for test_torchrec.py: joins torch.distributed (gloo,
a FileStore at $SLUICE_TEST_STORE, RANK / WORLD_SIZE from the environment
as torchrun sets them), reads its share of a master job through
sluice.torchrec.MasterDataset (rank and world size taken from
torch.distributed) in TrainPipelineBase, and saves what it trained on.

--steps N: after N steps take the checkpoint (state_dict(pending=1)), run
--extra-steps more, and stop (a crash after the checkpoint); -1: run to the
end of the job. --state FILE: a first run's output to resume from.
--lag S: wait S seconds before reading (a rank that runs behind)."""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice.torchrec import MasterDataset  # noqa: E402
from test_torchrec import TinyDLRM  # noqa: E402
from torchrec.distributed.train_pipeline import TrainPipelineBase  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=-1)
    ap.add_argument("--extra-steps", type=int, default=0)
    ap.add_argument("--state")
    ap.add_argument("--lag", type=float, default=0.0)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.FileStore(os.environ["SLUICE_TEST_STORE"], world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)

    scale = float(os.environ.get("SLUICE_TIMEOUT_SCALE", "1"))
    data = MasterDataset(a.master, a.job, timeout_ms=int(60000 * scale))
    if a.state:
        data.load_state_dict(torch.load(a.state, weights_only=False)["state"])
    model = TinyDLRM()
    pipeline = TrainPipelineBase(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                 torch.device("cpu"))
    time.sleep(a.lag)
    it = iter(data)
    out = {"rank": data.rank, "world_size": data.world_size}
    step = 0
    while a.steps < 0 or step < a.steps + a.extra_steps:
        try:
            pipeline.progress(it)
        except StopIteration:
            break
        step += 1
        if step == a.steps:
            out["state"] = data.state_dict(pending=1, step=step)
            out["trained_at_checkpoint"] = [s.numpy() for s in model.seen]
            out["trained_g_at_checkpoint"] = list(model.seen_g)
    out["trained"] = [s.numpy() for s in model.seen]
    out["trained_g"] = list(model.seen_g)  # each batch's order_g (None: dynamic order)
    torch.save(out, a.out)
    data.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
