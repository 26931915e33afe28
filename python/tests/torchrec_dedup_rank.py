"""One trainer rank for test_torchrec.py's DedupEmbeddingBagCollection
test: joins torch.distributed (gloo, a FileStore at $SLUICE_TEST_STORE,
RANK / WORLD_SIZE from the environment), takes its share (every
world-size-th batch) of the batches saved by the test, and trains two
models on them with DistributedModelParallel and TrainPipelineSparseDist:
one with sluice.torchrec.DedupEmbeddingBagCollection on the "unique" form
(each dedup group's unique rows, expanded with the inverse indices) and one
with a plain EmbeddingBagCollection on the expanded batches. Both start from
the same weights and are sharded by the same plan (--sharding table_wise:
the tables spread over the ranks; row_wise: every table split over all
ranks). Saves each step's logits and, at the end, this rank's shards of
every table and the dense weights of both models, for the test to compare.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sluice.torchrec import Batch, DedupEmbeddingBagCollection  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.distributed import DistributedModelParallel  # noqa: E402
from torchrec.distributed.sharding_plan import (  # noqa: E402
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist  # noqa: E402
from torchrec.distributed.types import ShardingPlan  # noqa: E402
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward  # noqa: E402
from torchrec.optim.keyed import KeyedOptimizerWrapper  # noqa: E402
from torchrec.optim.optimizers import in_backward_optimizer_filter  # noqa: E402

DIM = 4


class Model(torch.nn.Module):
    """Pooled embeddings and a linear layer on the dense features, one logit;
    `dedup`: the embeddings in a DedupEmbeddingBagCollection fed the
    batch's unique form, else one EmbeddingBagCollection fed sparse_features."""

    def __init__(self, tables, groups, dense_dim, dedup):
        super().__init__()
        self.dedup = dedup
        self.keys = [f for t in tables for f in t.feature_names]
        if dedup:
            self.ebc = DedupEmbeddingBagCollection(tables, groups)
        else:
            self.ebc = EmbeddingBagCollection(tables)
        self.dense = torch.nn.Linear(dense_dim, DIM)
        self.top = torch.nn.Linear(DIM * (len(tables) + 1), 1)

    def forward(self, batch):
        if self.dedup:
            pooled = self.ebc(batch.sparse_features, batch.unique_features, batch.inverse_indices)
        else:
            pooled = self.ebc(batch.sparse_features)
        # By key: a sharded collection's values() are in shard order.
        pooled = pooled.to_dict()
        x = torch.cat([pooled[k] for k in self.keys]
                      + [self.dense(torch.log1p(batch.dense_features))], dim=1)
        logits = self.top(x).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        return loss, logits.detach()


def table_weights(model):
    """{table name: weight} of an unsharded model (either kind)."""
    return {
        n.split(".")[-2]: p for n, p in model.named_parameters() if "embedding_bags" in n
    }


def plan_for(model, sharding, world):
    """The same placement for both models: table i on rank i % world
    (table_wise), or every table over all ranks (row_wise)."""
    names = sorted(table_weights(model))
    gen = {n: table_wise(rank=i % world) if sharding == "table_wise" else row_wise()
           for i, n in enumerate(names)}
    if not model.dedup:
        return ShardingPlan({"ebc": construct_module_sharding_plan(model.ebc, gen)})
    plan = {}
    subs = [("ebc.plain", model.ebc.plain)] if model.ebc.plain is not None else []
    subs += [("ebc.unique." + g, m) for g, m in model.ebc.unique.items()]
    for path, ebc in subs:
        mine = {n: gen[n] for n in table_weights(ebc)}
        plan[path] = construct_module_sharding_plan(ebc, mine)
    return ShardingPlan(plan)


def set_tables(dmp, weights):
    """Every table's shards on this rank from the full tables `weights`
    (sharding may initialise them afresh)."""
    n = 0
    with torch.no_grad():
        for name, t in dmp.state_dict().items():
            if "embedding_bags" not in name:
                continue
            full = weights[name.split(".")[-2]]
            for s in t.local_shards():
                (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
                s.tensor.copy_(full[r0 : r0 + nr, c0 : c0 + nc])
                n += 1
    assert n > 0 or dist.get_world_size() > 1


def local_state(dmp):
    """{table name or dense parameter: this rank's tensors} of a DMP model."""
    out = {}
    for name, t in dmp.state_dict().items():
        key = name.split(".")[-2] if "embedding_bags" in name else name.split("ebc.")[-1]
        if hasattr(t, "local_shards"):
            out[key] = [(list(s.metadata.shard_offsets), s.tensor.clone()) for s in t.local_shards()]
        else:
            out[key] = [([], t.detach().clone())]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", required=True)
    ap.add_argument("--sharding", choices=["table_wise", "row_wise"], required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", store=dist.FileStore(os.environ["SLUICE_TEST_STORE"], world),
                            rank=rank, world_size=world)
    saved = torch.load(a.batches, weights_only=False)
    tables = [EmbeddingBagConfig(name="t_" + f, embedding_dim=DIM,
                                 num_embeddings=saved["table_size"], feature_names=[f])
              for f in saved["features"]]
    out = {"rank": rank}
    ref_weights = None
    for dedup in (False, True):
        torch.manual_seed(0)
        model = Model(tables, saved["groups"], saved["dense_dim"], dedup)
        if ref_weights is None:
            ref_weights = {k: v.detach().clone() for k, v in table_weights(model).items()}
            ref_dense = {k: v.detach().clone() for k, v in model.state_dict().items()
                         if not k.startswith("ebc.")}
        else:
            model.load_state_dict(ref_dense, strict=False)
        apply_optimizer_in_backward(torch.optim.SGD, model.ebc.parameters(), {"lr": 0.5})
        dmp = DistributedModelParallel(model, device=torch.device("cpu"),
                                       plan=plan_for(model, a.sharding, world))
        set_tables(dmp, ref_weights)
        opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                    lambda p: torch.optim.SGD(p, lr=0.1))
        pipeline = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
        form = "unique" if dedup else "expanded"
        mine = saved[form][rank::world]
        it = iter([Batch.from_state(s) for s in mine])
        logits = []
        while True:
            try:
                logits.append(pipeline.progress(it).clone())
            except StopIteration:
                break
        out[form] = {"logits": logits, "state": local_state(dmp)}
        # The batches really differ in unique rows per rank (the input
        # distribution sees different strides from the two ranks).
        if dedup:
            out["unique_rows"] = [s["unique_features"]["user"]["stride"] for s in mine]
    torch.save(out, a.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
