#!/usr/bin/python3
"""Training throughput with and without dedup groups: the DLRM-like model of
examples/train_dlrm.py on the same sessions table, fed by sluice workers,
each variant in the same process, rounds interleaved with the order rotated
per round; prints samples/s and the time per step split into phases.

    "$(ops/torchrec-venv)/bin/python" bench/train_dedup.py --sluice build/sluice
    # longer: --rows 400000 --rounds 5 --steps 60; only the headline figure:
    #   --sweep ""; only TorchRec or plain torch: --paths torchrec / plain

The variants (--paths picks the families):

  torchrec-kjt     TorchRec: EmbeddingBagCollection sharded by
                   DistributedModelParallel (one CPU rank, gloo, fused
                   row-wise Adagrad), TrainPipelineSparseDist, batches of a
                   job WITHOUT dedup groups (one KJT of stride B)
  torchrec-vbe     the same model and pipeline on the job WITH the dedup
                   group "user": the merged variable-batch KJT
                   (sluice.torchrec.to_batch's default form)
  torchrec-unique  RecD's form: sluice.torchrec.DedupEmbeddingBagCollection
                   on to_batch(form="unique") - the group's unique rows as
                   their own KJT (stride U), pooled, then expanded by the
                   inverse indices
  plain-kjt        no TorchRec: torch.nn.EmbeddingBag per feature, sparse
                   Adagrad, on the job without dedup groups
  plain-unique     the same on the job with the group: the user features
                   pooled on the U unique rows, then index_select

A round runs --steps steps of every variant of one session length, in an
order rotated per round; before the first round each variant runs --warmup
steps (not counted). Throughput is samples over the wall time of all of a
variant's timed steps, and over the main thread's CPU time of them (the
trainer's own work: on a loaded machine less disturbed by the other
processes than wall time; the client's receive threads are not in it). The phases (ms per step, means over the timed steps):

  data     waiting for the next batch and converting it (the client's
           next() and to_batch), in the pipeline's enqueue of batch i+2
  in-dist  the sharded collections' input distribution (TorchRec:
           start_sparse_data_dist + wait_sparse_data_dist; on one rank the
           KJT permutes, splits and, for variable-batch KJTs, the VBE
           metadata)
  emb-fwd  the embedding lookups and pooling (TorchRec: the sharded
           modules' compute_and_output_dist; plain: the EmbeddingBags and
           index_select)
  dense    the dense forward: bottom MLP, interaction, top MLP, loss
  dns-bwd  backward until the pooled embeddings' gradient is ready (the
           dense part's backward)
  emb-bwd  the rest of backward: the embeddings' (with TorchRec the fused
           row-wise Adagrad update in it; plain: the sparse Adagrad step
           too)
  opt      the dense optimizer's step
  other    the rest of the step (the pipeline's own bookkeeping, zero_grad)

The session length sweep (--sweep, default 1,2,4,8,16,32) generates a table
per session length L (--session-length of `sluice table gen --preset
sessions`, clustered: a batch of 512 holds ~512/L sessions, so the user
features' dedup factor B/U is ~L) and prints the unique/KJT ratio of each
path, to show where dedup starts to pay.

--profile N: after the rounds, torch.profiler over N steps of each variant
of the headline session length, printing the operators with the most CPU
time (docs/TRAINER.md "Dedup groups in TorchRec" has one).

Torch threads are fixed (--threads, default 1) and each worker runs one
transform thread, so the trainer, not the machine's other load, sets the
pace as far as it can; the figures of a loaded machine still move from run
to run, the ratios in one run less. Needs the sluice package (python/ of
this checkout), libsluice_trainer.so and, for the torchrec variants,
ops/torchrec-venv.
"""

import argparse
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import sluice  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "train_dlrm", os.path.join(HERE, "..", "examples", "train_dlrm.py"))
dlrm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dlrm)

PHASES = ["data", "in-dist", "emb-fwd", "dense", "dns-bwd", "emb-bwd", "opt", "other"]


def tracing():
    return torch.fx._symbolic_trace.is_fx_tracing()


class Timer:
    """Accumulated seconds per phase over the steps since reset()."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.t = {p: 0.0 for p in PHASES}
        self.steps = 0
        self.bwd_start = None
        self.grad_ready = None

    def wrap(self, phase, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.t[phase] += time.perf_counter() - t0
        return timed

    def mark_grad(self, grad):
        """Tensor hook on the pooled embeddings: their gradient is ready,
        the dense part's backward is done."""
        if self.grad_ready is None:
            self.grad_ready = time.perf_counter()
        return grad

    def backward(self, fn):
        """fn() runs a backward; split it at mark_grad."""
        self.grad_ready = None
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        mid = self.grad_ready if self.grad_ready is not None else t1
        self.t["dns-bwd"] += mid - t0
        self.t["emb-bwd"] += t1 - mid

    def per_step(self, wall):
        """ms per step of each phase, 'other' the rest of the wall time."""
        n = max(1, self.steps)
        out = {p: 1e3 * v / n for p, v in self.t.items()}
        # "dense" was timed as the whole forward, the lookups in it.
        out["dense"] -= out["emb-fwd"]
        out["other"] = 1e3 * wall / n - sum(v for p, v in out.items() if p != "other")
        return out


def timed_iter(it, timer):
    while True:
        t0 = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            return
        finally:
            timer.t["data"] += time.perf_counter() - t0
        yield b


def start_worker(binary, spec, path):
    with open(path, "w") as f:
        json.dump(spec, f)
    p = subprocess.Popen([binary, "worker", "--job", path, "--listen", "127.0.0.1:0",
                          "--threads", "1"], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if "listening on" in line:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, line.split("listening on", 1)[1].split()[0]
    p.wait()
    raise SystemExit("worker exited (%d) before listening" % p.returncode)


# ---- the plain torch path ------------------------------------------------------------


class PlainRunner:
    """examples/train_dlrm.py's PlainDLRM: EmbeddingBag per feature (sparse
    Adagrad), dense Adam; `unique`: the user group pooled on unique rows."""

    def __init__(self, name, client, unique, seed, lr):
        self.name, self.unique = name, unique
        torch.manual_seed(seed)
        self.model = dlrm.PlainDLRM()
        self.opt_sparse = torch.optim.Adagrad(self.model.embedding_parameters(), lr=lr * 30)
        self.opt_dense = torch.optim.Adam(self.model.dense_arch.parameters(), lr=lr)
        self.lossf = nn.BCEWithLogitsLoss()
        self.timer = Timer()
        self.it = timed_iter(dlrm.plain_batches(client, expand=False), self.timer)
        self.samples = 0
        self.dedup = []

    def step(self):
        t = self.timer
        dense, label, kjt, groups = next(self.it)
        m = self.model
        t0 = time.perf_counter()
        pooled = m._pool(*kjt, dense.shape[0])
        for keys, values, lengths, U, inverse in groups:
            self.dedup.append(dense.shape[0] / U)
            for k, e in m._pool(keys, values, lengths, U).items():
                pooled[k] = e.index_select(0, inverse)
        t1 = time.perf_counter()
        t.t["emb-fwd"] += t1 - t0
        values = torch.cat([pooled[k] for k in m.dense_arch.keys], dim=1)
        values.register_hook(t.mark_grad)
        split = values.split(dlrm.DIM, dim=1)
        loss = self.lossf(m.dense_arch(dense, dict(zip(m.dense_arch.keys, split))), label)
        t.t["dense"] += time.perf_counter() - t0  # emb-fwd is taken off in per_step
        self.opt_sparse.zero_grad()
        self.opt_dense.zero_grad()

        def bwd():
            loss.backward()
            self.opt_sparse.step()
        t.backward(bwd)
        t.wrap("opt", self.opt_dense.step)()
        t.steps += 1
        self.samples += int(label.shape[0])


# ---- the TorchRec path ----------------------------------------------------------------


def init_torchrec():
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    for name in ("torchrec", "torch.fx", "root", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


class TorchrecRunner:
    """The DLRM with its embeddings in a TorchRec EmbeddingBagCollection
    (form "kjt" and "vbe") or a DedupEmbeddingBagCollection ("unique"),
    sharded by DMP on one CPU rank, fused row-wise Adagrad, dense Adam,
    trained by TrainPipelineSparseDist."""

    def __init__(self, name, client, form, seed, lr):
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
        from torchrec.distributed import DistributedModelParallel
        from torchrec.distributed.types import ShardedModule
        from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
        from torchrec.optim.keyed import KeyedOptimizerWrapper
        from torchrec.optim.optimizers import in_backward_optimizer_filter
        from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

        from sluice.torchrec import DedupEmbeddingBagCollection, batches

        self.name, self.form = name, form
        timer = self.timer = Timer()
        torch.manual_seed(seed)
        tables = [EmbeddingBagConfig(name="t_" + k, embedding_dim=dlrm.DIM, num_embeddings=n,
                                     feature_names=[k], pooling=PoolingType.MEAN)
                  for k, n in dlrm.TABLES.items()]
        unique = form == "unique"

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                if unique:
                    self.ebc = DedupEmbeddingBagCollection(tables, {"user": dlrm.USER})
                else:
                    self.ebc = EmbeddingBagCollection(tables=tables)
                self.dense_arch = dlrm.Interaction(dlrm.TABLES)
                self.lossf = nn.BCEWithLogitsLoss()

            def forward(self, batch):
                if unique:
                    kt = self.ebc(batch.sparse_features, batch.unique_features,
                                  batch.inverse_indices)
                else:
                    kt = self.ebc(batch.sparse_features)
                pooled = kt.to_dict()
                if not tracing():
                    kt.values().register_hook(timer.mark_grad)
                loss = self.lossf(self.dense_arch(batch.dense_features, pooled), batch.labels)
                return loss, (loss.detach(), batch.labels)

        model = Model()
        apply_optimizer_in_backward(RowWiseAdagrad, model.ebc.parameters(), {"lr": lr * 30})
        dmp = DistributedModelParallel(model, device=torch.device("cpu"))
        for m in dmp.modules():
            if isinstance(m, ShardedModule):
                m.compute_and_output_dist = timer.wrap("emb-fwd", m.compute_and_output_dist)
        opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                    lambda params: torch.optim.Adam(params, lr=lr))
        p = self.pipeline = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
        p.start_sparse_data_dist = timer.wrap("in-dist", p.start_sparse_data_dist)
        p.wait_sparse_data_dist = timer.wrap("in-dist", p.wait_sparse_data_dist)
        p._model_fwd = timer.wrap("dense", p._model_fwd)
        back = p._backward
        p._backward = lambda losses: timer.backward(lambda: back(losses))
        p._optimizer_step = timer.wrap("opt", p._optimizer_step)
        self.dedup = []

        def feed():
            for b in batches(client, "unique" if unique else "variable_batch"):
                if b.unique_features:
                    self.dedup.append(b.batch_size / b.unique_features["user"].stride())
                elif b.sparse_features.variable_stride_per_key():
                    self.dedup.append(b.batch_size / b.sparse_features.stride_per_key()[-1])
                yield b
        self.it = timed_iter(feed(), timer)
        self.samples = 0

    def step(self):
        _, labels = self.pipeline.progress(self.it)
        self.timer.steps += 1
        self.samples += int(labels.shape[0])


# ---- rounds -----------------------------------------------------------------------


def make_runners(a, table, tmp, paths, variants, procs):
    """The runners of one table: a worker (one transform thread) and a
    client per variant, so that each reads the whole table once."""
    runners = []
    for v in variants:
        path, form = v.split("-", 1)
        if path not in paths:
            continue
        dedup = form != "kjt"
        spec = dlrm.job_spec(table, a.batch, dedup)
        p, addr = start_worker(a.sluice, spec, os.path.join(tmp, "%s.json" % v))
        procs.append(p)
        client = sluice.Client(addr, prefetch=a.prefetch)
        if path == "plain":
            runners.append(PlainRunner(v, client, form == "unique", a.seed, a.lr))
        else:
            runners.append(TorchrecRunner(v, client, form, a.seed, a.lr))
        runners[-1].client = client
    return runners


def run_rounds(a, runners):
    """{variant: [per turn: (samples, wall s, main thread CPU s, phases)]}."""
    for r in runners:
        for _ in range(a.warmup):
            r.step()
    res = {r.name: [] for r in runners}
    for rnd in range(a.rounds):
        k = rnd % len(runners)
        for r in runners[k:] + runners[:k]:
            r.timer.reset()
            s0 = r.samples
            c0 = time.thread_time()
            t0 = time.perf_counter()
            for _ in range(a.steps):
                r.step()
            wall = time.perf_counter() - t0
            res[r.name].append((r.samples - s0, wall, time.thread_time() - c0,
                                r.timer.per_step(wall)))
    return res


def rate(rows, cpu=False):
    """Samples per second over all turns: of wall time, or of the main
    thread's CPU time."""
    return sum(x[0] for x in rows) / sum(x[2 if cpu else 1] for x in rows)


def ratio(res, num, den, cpu=False):
    if num not in res or den not in res:
        return None
    return rate(res[num], cpu) / rate(res[den], cpu)


def report(res, runners):
    print("  %-16s %9s %9s %6s" % ("variant", "samples/s", "/CPU-s", "B/U") +
          "".join(" %7s" % p for p in PHASES) + "   (ms/step)")
    for r in runners:
        rows = res[r.name]
        n = sum(1 for _ in rows)
        ph = {p: sum(x[3][p] for x in rows) / n for p in PHASES}
        dd = "%.1f" % np.mean(r.dedup) if r.dedup else "-"
        print("  %-16s %9.0f %9.0f %6s" % (r.name, rate(rows), rate(rows, True), dd)
              + "".join(" %7.2f" % ph[p] for p in PHASES))
    for num, den in (("torchrec-unique", "torchrec-kjt"), ("torchrec-vbe", "torchrec-kjt"),
                     ("plain-unique", "plain-kjt")):
        q = ratio(res, num, den)
        if q is not None:
            print("  %s / %s: %.2fx samples/s, %.2fx samples per CPU-second" % (
                num, den, q, ratio(res, num, den, True)))


def profile(a, runners):
    from torch.profiler import ProfilerActivity, profile as prof

    for r in runners:
        with prof(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(a.profile):
                r.step()
        print("\nprofile of %s, %d steps (CPU time, ms per step):" % (r.name, a.profile))
        ev = [e for e in p.key_averages() if not e.key.startswith("## ")]
        total = sum(e.self_cpu_time_total for e in ev)
        print("  %-58s %9s %9s %8s %6s" % ("operator", "self", "total", "calls", "self%"))
        for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:a.profile_top]:
            print("  %-58s %9.2f %9.2f %8d %5.1f%%" % (
                e.key[:58], e.self_cpu_time_total / 1e3 / a.profile,
                e.cpu_time_total / 1e3 / a.profile, e.count // a.profile,
                100.0 * e.self_cpu_time_total / max(total, 1)))
        vbe = [e for e in p.key_averages() if "generate_vbe_metadata" in e.key]
        for e in vbe:
            print("  %s: %.2f ms per step (total)" % (e.key, e.cpu_time_total / 1e3 / a.profile))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", required=True, help="the sluice program (build/sluice)")
    ap.add_argument("--rows", type=int, default=120000,
                    help="rows of each generated table (each variant reads it once)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=10, help="steps per variant before timing")
    ap.add_argument("--steps", type=int, default=5,
                    help="timed steps per variant and round: short turns, so that the "
                         "machine's other load falls on every variant alike")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--session-length", type=int, default=16,
                    help="the headline table's (the sessions preset's default, 16)")
    ap.add_argument("--sweep", default="1,2,4,8,16,32",
                    help="session lengths of the sweep ('' for none)")
    ap.add_argument("--sweep-rounds", type=int, default=6, help="rounds of the sweep")
    ap.add_argument("--paths", default="torchrec,plain", help="torchrec, plain or both")
    ap.add_argument("--variants", default="",
                    help="only these variants of the headline table (comma-separated names)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--prefetch", type=int, default=32,
                    help="batches each client holds ahead: a round's batches are received "
                         "while the other variants train, so that a worker's one thread "
                         "does not set the pace")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile N steps of each headline variant after the rounds")
    ap.add_argument("--profile-top", type=int, default=15)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    paths = set(p for p in a.paths.split(",") if p)
    if paths - {"torchrec", "plain"}:
        ap.error("--paths: torchrec, plain")
    if "torchrec" in paths:
        init_torchrec()
    sweep = [int(x) for x in a.sweep.split(",") if x]
    need = (a.warmup + max(a.rounds, a.sweep_rounds if sweep else 0) * a.steps + 3) * a.batch
    if need > a.rows:
        ap.error("--rows %d is fewer than the %d the steps read per variant" % (a.rows, need))
    print("torch %s, %d torch thread(s), batch %d, %d rows per table, %d cores online, "
          "load average %.1f" % (torch.__version__, a.threads, a.batch, a.rows,
                                 os.cpu_count(), os.getloadavg()[0]))
    tmp = tempfile.TemporaryDirectory(prefix="sluice-train-dedup-")
    procs = []

    def table_for(L):
        path = os.path.join(tmp.name, "sessions-L%d" % L)
        if not os.path.exists(path):
            subprocess.run([a.sluice, "table", "gen", "--preset", "sessions", "--rows",
                            str(a.rows), "--table", path, "--seed", "7", "--session-length",
                            str(L), "--cluster", "--no-sync", "--quiet"],
                           check=True, stdout=subprocess.DEVNULL)
        return path

    def close(runners):
        for r in runners:
            r.client.close()
        for p in procs:
            p.terminate()
            p.wait()
        procs.clear()

    try:
        all_v = ["torchrec-kjt", "torchrec-vbe", "torchrec-unique", "plain-kjt", "plain-unique"]
        print("\nsession length %d (the sessions preset's shape), %d rounds of %d steps, "
              "%d warm-up steps:" % (a.session_length, a.rounds, a.steps, a.warmup))
        if a.variants:
            all_v = [v for v in all_v if v in a.variants.split(",")]
        runners = make_runners(a, table_for(a.session_length), tmp.name, paths, all_v, procs)
        res = run_rounds(a, runners)
        report(res, runners)
        if a.profile:
            profile(a, runners)
        close(runners)
        if sweep:
            print("\nsweep: unique / KJT per session length (%d rounds of %d steps):"
                  % (a.sweep_rounds, a.steps))
            print("  %6s %8s %14s %14s %14s %14s" % (
                "L", "B/U", "torchrec-kjt", "unique/kjt", "plain-kjt", "unique/kjt"))
            print("  %6s %8s %14s %14s %14s %14s" % (
                "", "", "samples/s", "wall    CPU", "samples/s", "wall    CPU"))
            rounds = a.rounds
            a.rounds = a.sweep_rounds
            sweep_v = ["torchrec-kjt", "torchrec-unique", "plain-kjt", "plain-unique"]
            for L in sweep:
                runners = make_runners(a, table_for(L), tmp.name, paths, sweep_v, procs)
                res = run_rounds(a, runners)
                dd = [np.mean(r.dedup) for r in runners if r.dedup]
                cells = []
                for path in ("torchrec", "plain"):
                    k = path + "-kjt"
                    if k in res:
                        cells.append("%14.0f" % rate(res[k]))
                        cells.append("%6.2fx %5.2fx" % (ratio(res, path + "-unique", k),
                                                        ratio(res, path + "-unique", k, True)))
                    else:
                        cells += ["%14s" % "-"] * 2
                print("  %6d %8.1f %s" % (L, dd[0] if dd else float("nan"), " ".join(cells)),
                      flush=True)
                close(runners)
            a.rounds = rounds
        print("\nload average at the end %.1f (other processes share these cores)"
              % os.getloadavg()[0])
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        tmp.cleanup()


if __name__ == "__main__":
    main()
