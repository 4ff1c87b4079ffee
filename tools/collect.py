#!/usr/bin/env python
"""Record real multi-process PyTorch training runs (gloo on 127.0.0.1, or NCCL on GPUs) as PyTorch ETs + Kineto.

Usage::

    python -m tools.collect --out datasets/pytorch-gloo \
        [--scenario mlp_ddp transformer_ddp dlrm collectives] [--world-sizes 2 4] \
        [--timed-steps K] [--settle-steps N] [--size small|large] [--device cpu|cuda] [--probe]

`--device cuda` runs mlp_ddp and transformer_ddp with one GPU per rank over NCCL (world size 1
allowed), into `<scenario>[-<size>]-cuda-w<N>/`; the recorder adds CUDA activity (kernels,
copies, runtime calls) to the Kineto trace, and each timed step ends with
`torch.cuda.synchronize()` (docs/gpu.md).

Every (scenario, world size) pair is one run, written to `<out>/<scenario>-w<N>/`:

- `rank<R>.et.json.gz`, `rank<R>.kineto.json.gz`: written by
  `chakra_core.convert.pytorch.collect.TraceRecorder` (warmup=1, active=2), so steps 1 and 2 (0-based) are
  recorded and appear as `ProfilerStep#1` / `ProfilerStep#2`;
- `rank<R>.program.json`: ground truth written by the program itself: every collective and
  point-to-point call it issued during the recorded steps, in issue order (see
  `tools.programlog.ProgramLog` and datasets/pytorch-gloo/README.md for the fields and the
  byte definitions);
- `job.json`: what the run is;
- with `--settle-steps N`, N steps run before the recorder starts, unrecorded and unlogged: DDP
  rebuilds its gradient buckets in its second iteration (a broadcast of the bucket order, new
  bucket views), and the first collectives on the new buckets are slower, work that otherwise
  lands in `ProfilerStep#1` and that the timed steps never do (docs/gpu.md, 'Errors per run');
- with `--probe`, `profiler_cost.json`: the profiler's cost per operator on this machine
  (tools/profcost.py, measured once before the runs), which `chakra calibrate` reads.

All collectives are called as `dist.<name>(...)` (attribute access at call time) so that the
recorder's process-group annotation (`chakra::pg=<pg_name>`) wraps them. DDP's gradient
all_reduces go through a communication hook that calls `dist.all_reduce` and logs the bucket.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from chakra_core.convert.pytorch.collect import TraceRecorder
from chakra_core.replay.launch import free_port
from tools import profcost
from tools.programlog import ACTIVE, RECORDED_STEPS, STEPS, WARMUP, ProgramLog, ddp_allreduce_hook

DATASETS = Path(__file__).resolve().parents[1] / "datasets"

SEED = 1234

SCENARIOS = ("mlp_ddp", "transformer_ddp", "dlrm", "collectives")
DESCRIPTIONS = {
    "mlp_ddp": ("MLP 32-256-128-64-10 (Linear+ReLU), DDP, SGD", "data parallel (DDP)"),
    "transformer_ddp": ("Transformer encoder LM (d_model 64, 2 layers, 4 heads, ff 128, seq 16, "
                        "batch 4, vocab 256), DDP, SGD", "data parallel (DDP)"),
    "dlrm": ("DLRM-like: embedding-bag tables sharded by rank (model parallel, all_to_all), "
             "bottom/top MLPs in DDP, SGD", "hybrid: model-parallel embeddings + data-parallel dense (DDP)"),
    "collectives": ("explicit collectives and point-to-point calls on the world and on subgroups "
                    "(no model; one small matmul per step)", "none (communication benchmark)"),
}


# --------------------------------------------------------------------------------------------
# Scenarios: build(rank, world, log, size) -> step_fn(step)
# --------------------------------------------------------------------------------------------

# "small" is what datasets/pytorch-gloo holds: operators of microseconds, which the profiler's
# own cost per operator dominates. "large" gives the DDP models operators of a millisecond or
# more, whose recorded durations the profiler hardly changes: what tests/benchmarks/
# bench_prediction.py compares against unprofiled time.
SIZES = ("small", "large")
MLP = {"small": {"widths": (32, 256, 128, 64, 10), "batch": 16, "bucket_cap_mb": 0.05},
       "large": {"widths": (512, 1024, 1024, 512, 10), "batch": 128, "bucket_cap_mb": 2.0}}
TRANSFORMER = {"small": {"vocab": 256, "d_model": 64, "ff": 128, "seq": 16, "batch": 4, "bucket_cap_mb": 0.1},
               "large": {"vocab": 1024, "d_model": 256, "ff": 1024, "seq": 64, "batch": 8, "bucket_cap_mb": 2.0}}

# Where the scalable models run: "cpu" (gloo), or "cuda" (NCCL, one GPU per rank), set by _worker.
DEVICE = torch.device("cpu")


def _ddp(module, log, world, bucket_cap_mb):
    from torch.nn.parallel import DistributedDataParallel as DDP
    module = module.to(DEVICE)
    model = DDP(module, bucket_cap_mb=bucket_cap_mb,
                device_ids=[DEVICE.index] if DEVICE.type == "cuda" else None)
    model.register_comm_hook((log, None, world), ddp_allreduce_hook)
    return model


def build_mlp_ddp(rank, world, log, size="small"):
    torch.manual_seed(SEED)  # same initial weights on every rank (DDP broadcasts them anyway)
    widths, batch = MLP[size]["widths"], MLP[size]["batch"]
    layers = []
    for width, following in zip(widths, widths[1:]):
        layers += [nn.Linear(width, following), nn.ReLU()]
    net = nn.Sequential(*layers[:-1])
    model = _ddp(net, log, world, bucket_cap_mb=MLP[size]["bucket_cap_mb"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(SEED + rank)
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        x = torch.randn(batch, widths[0], generator=gen).to(DEVICE)
        y = torch.randint(0, widths[-1], (batch,), generator=gen).to(DEVICE)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return step


class TinyLM(nn.Module):
    def __init__(self, vocab=256, d_model=64, nhead=4, layers=2, ff=128, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=ff, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos[: tokens.shape[1]]
        return self.head(self.encoder(h))


def build_transformer_ddp(rank, world, log, size="small"):
    torch.manual_seed(SEED)
    shape = TRANSFORMER[size]
    vocab, seq, batch = shape["vocab"], shape["seq"], shape["batch"]
    model = _ddp(TinyLM(vocab=vocab, d_model=shape["d_model"], ff=shape["ff"], seq=seq), log, world,
                 bucket_cap_mb=shape["bucket_cap_mb"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(SEED + rank)
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(DEVICE)
        opt.zero_grad()
        logits = model(tokens[:, :-1])
        loss = loss_fn(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
    return step


class _AllToAll(torch.autograd.Function):
    """Even all_to_all_single along dim 0 (one slice per rank); its gradient is the reverse one."""

    @staticmethod
    def forward(ctx, x, log, via):
        ctx.log, ctx.via = log, via
        x = x.contiguous()
        out = torch.empty_like(x)
        log.all_to_all_single(out, x, via=via + ":fwd")
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        ctx.log.all_to_all_single(out, grad, via=ctx.via + ":bwd")
        return out, None, None


class DenseArch(nn.Module):
    """DLRM dense part: bottom MLP, dot interaction, top MLP."""

    def __init__(self, num_dense, dim, num_tables):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(num_dense, 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        n = num_tables + 1
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))
        self.n = n  # no buffers: DDP would broadcast them from rank 0 in every forward

    def forward(self, dense, emb):  # dense [B, num_dense], emb [B, T, D]
        b = self.bottom(dense)
        z = torch.cat([b.unsqueeze(1), emb], dim=1)  # [B, T+1, D]
        iu = torch.triu_indices(self.n, self.n, offset=1)
        inter = torch.bmm(z, z.transpose(1, 2))[:, iu[0], iu[1]]
        return self.top(torch.cat([b, inter], dim=1)).squeeze(1)


def build_dlrm(rank, world, log, size="small"):
    tables_per_rank, dim, batch, bag, num_dense = 2, 16, 8, 4, 13
    num_tables = tables_per_rank * world
    rows = [200 + 150 * t for t in range(num_tables)]  # table t is owned by rank t // tables_per_rank
    torch.manual_seed(SEED)
    dense = DenseArch(num_dense, dim, num_tables)
    model = _ddp(dense, log, world, bucket_cap_mb=0.01)
    torch.manual_seed(SEED + 100 + rank)  # each rank initialises its own shard
    mine = range(rank * tables_per_rank, (rank + 1) * tables_per_rank)
    tables = nn.ModuleList(nn.EmbeddingBag(rows[t], dim, mode="sum") for t in mine)
    opt = torch.optim.SGD(list(model.parameters()) + list(tables.parameters()), lr=0.01)
    gen = torch.Generator().manual_seed(SEED + rank)
    loss_fn = nn.BCEWithLogitsLoss()

    def step(i):
        x = torch.randn(batch, num_dense, generator=gen)
        y = torch.randint(0, 2, (batch,), generator=gen).float()
        # local batch's sparse features for every table: [num_tables, batch, bag]
        idx = torch.stack([torch.randint(0, rows[t], (batch, bag), generator=gen)
                           for t in range(num_tables)])
        # input dist: send each owner the indices of its tables -> [W(src), T_local, B, L]
        idx_recv = torch.empty_like(idx)
        log.all_to_all_single(idx_recv, idx, via="dlrm_indices")
        idx_recv = idx_recv.view(world, tables_per_rank, batch, bag)
        opt.zero_grad()
        pooled = torch.stack([tables[t](idx_recv[:, t].reshape(world * batch, bag))
                              for t in range(tables_per_rank)])  # [T_local, W*B, D]
        pooled = pooled.view(tables_per_rank, world, batch, dim).transpose(0, 1)  # [W(dst), T_l, B, D]
        # output dist: every rank gets its batch's pooled vectors of all tables
        got = _AllToAll.apply(pooled, log, "dlrm_embeddings")  # [W(owner), T_l, B, D]
        emb = got.reshape(num_tables, batch, dim).transpose(0, 1)  # [B, T, D]
        loss = loss_fn(model(x, emb), y)
        loss.backward()
        opt.step()
    return step


def build_collectives(rank, world, log, size="small"):
    # subgroups: every rank creates every group, in the same order, before recording
    # pairs [0,1], [2,3], ... (at w2 the single pair [0,1] spans the whole world)
    pairs = [[k, k + 1] for k in range(0, world, 2)]
    groups = [dist.new_group(p) for p in pairs]
    mine, sub_ranks = groups[rank // 2], pairs[rank // 2]
    W, r = world, rank
    gen = torch.Generator().manual_seed(SEED + rank)
    a = torch.randn(24, 24, generator=gen)

    def f32(n):
        return torch.randn(n, generator=gen)

    def step(i):
        torch.mm(a, a)  # a little compute between communication
        log.all_reduce(f32(257))
        log.all_reduce(torch.arange(33, dtype=torch.int64))
        log.all_reduce(torch.ones(101, dtype=torch.bfloat16))
        log.all_reduce(torch.ones(77, dtype=torch.float16))
        log.all_gather([torch.empty(64) for _ in range(W)], f32(64))
        log.all_gather_into_tensor(torch.empty(40 * W, dtype=torch.int64), torch.arange(40, dtype=torch.int64))
        log.reduce_scatter(torch.empty(24), [f32(24) for _ in range(W)])
        log.reduce_scatter_tensor(torch.empty(48), f32(48 * W))
        log.all_to_all_single(torch.empty(20 * W), f32(20 * W))
        # uneven: rank r sends r+j+1 rows to rank j, so it receives j+r+1 rows from rank j
        in_splits = [r + j + 1 for j in range(W)]
        out_splits = [j + r + 1 for j in range(W)]
        log.all_to_all_single(torch.empty(sum(out_splits), 3, dtype=torch.float16),
                              torch.ones(sum(in_splits), 3, dtype=torch.float16),
                              out_splits=out_splits, in_splits=in_splits)
        log.all_to_all([torch.empty(12, dtype=torch.int64) for _ in range(W)],
                       [torch.full((12,), r, dtype=torch.int64) for _ in range(W)])
        log.broadcast(f32(96), src=0)
        log.broadcast(torch.arange(18, dtype=torch.int64), src=W - 1)
        log.reduce(f32(80), dst=W - 1)
        log.gather(f32(28), [torch.empty(28) for _ in range(W)] if r == 0 else None, dst=0)
        log.scatter(torch.empty(36), [f32(36) for _ in range(W)] if r == 0 else None, src=0)
        log.barrier()
        # blocking send/recv on the world: partner r + W/2 (w4: 0<->2, 1<->3; w2: 0<->1)
        partner = (r + W // 2) % W
        t = f32(50)
        if r < partner:
            log.send(t, partner, tag=1)
            log.recv(torch.empty(50), partner, tag=1)
        else:
            log.recv(torch.empty(50), partner, tag=1)
            log.send(t, partner, tag=1)
        # isend/irecv ring
        works = [log.isend(torch.arange(30, dtype=torch.int64), (r + 1) % W, tag=2),
                 log.irecv(torch.empty(30, dtype=torch.int64), (r - 1) % W, tag=2)]
        for w in works:
            w.wait()
        # batch_isend_irecv ring, the other direction
        for w in log.batch_isend_irecv([("isend", torch.ones(70, dtype=torch.float16), (r - 1) % W),
                                        ("irecv", torch.empty(70, dtype=torch.float16), (r + 1) % W)],
                                       tag=3):
            w.wait()
        # subgroup collectives, and send/recv inside the subgroup (GLOBAL ranks as dst/src)
        log.all_reduce(f32(120), group=mine)
        log.broadcast(torch.arange(14, dtype=torch.int64), src=sub_ranks[0], group=mine)
        other = sub_ranks[1] if r == sub_ranks[0] else sub_ranks[0]
        if r == sub_ranks[0]:
            log.send(torch.arange(22, dtype=torch.int64), other, group=mine, tag=4)
            log.recv(torch.empty(22, dtype=torch.int64), other, group=mine, tag=4)
        else:
            log.recv(torch.empty(22, dtype=torch.int64), other, group=mine, tag=4)
            log.send(torch.arange(22, dtype=torch.int64), other, group=mine, tag=4)
        log.all_reduce(f32(9), group=mine)
    return step


SCALABLE = ("mlp_ddp", "transformer_ddp")
BUILDERS = {
    "mlp_ddp": build_mlp_ddp,
    "transformer_ddp": build_transformer_ddp,
    "dlrm": build_dlrm,
    "collectives": build_collectives,
}


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------

def _worker(rank: int, world: int, port: int, scenario: str, run_dir: str, timed_steps: int = 0,
            size: str = "small", device: str = "cpu", settle_steps: int = 0) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo",
                      RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    # all_gather_into_tensor / reduce_scatter_tensor are deprecated in 2.13 (FutureWarning)
    # but are the names this dataset exercises; keep the progress output readable.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
    random.seed(SEED + rank)
    torch.manual_seed(SEED + rank)
    global DEVICE
    if device == "cuda":  # one GPU per rank, NCCL; each timed step ends with a device synchronisation
        DEVICE = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    try:
        log = ProgramLog(rank, world)
        step_fn = BUILDERS[scenario](rank, world, log, size)  # creates subgroups before recording
        out = Path(run_dir)
        for step in range(-settle_steps, 0):  # unlogged: the log records steps RECORDED_STEPS only
            log.begin_step(step)
            step_fn(step)
        with TraceRecorder(out, warmup=WARMUP, active=ACTIVE, compress=True) as rec:
            for step in range(STEPS):
                log.begin_step(step)
                step_fn(step)
                rec.step()
        if timed_steps:
            _time_steps(rank, step_fn, log, timed_steps, out)
        log.begin_step(-1)
        log.write(out / f"rank{rank}.program.json")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _time_steps(rank: int, step_fn, log, count: int, out: Path) -> None:
    """Wall time of `count` more steps with the profiler off, each between two barriers: the
    iteration time the traces are to be compared with (rank<R>.timing.json)."""
    times = []
    for step in range(STEPS, STEPS + count):
        log.begin_step(step)
        dist.barrier()
        start = time.perf_counter_ns()
        step_fn(step)
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()  # kernels run asynchronously: the step ends when they do
        dist.barrier()
        times.append(time.perf_counter_ns() - start)
    (out / f"rank{rank}.timing.json").write_text(json.dumps({"steps_ns": times}) + "\n")


def run(scenario: str, world: int, out_root: Path, timed_steps: int = 0, size: str = "small",
        device: str = "cpu", settle_steps: int = 0) -> Path:
    if size != "small" and scenario not in SCALABLE:
        raise ValueError(f"--size {size}: only {', '.join(SCALABLE)} come in more than one size")
    if device == "cuda" and scenario not in SCALABLE:
        raise ValueError(f"--device cuda: only {', '.join(SCALABLE)} run on GPUs")
    name = (scenario if size == "small" else f"{scenario}-{size}") + ("-cuda" if device == "cuda" else "")
    run_dir = out_root / f"{name}-w{world}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    mp.spawn(_worker, args=(world, free_port(), scenario, str(run_dir), timed_steps, size, device, settle_steps),
             nprocs=world, join=True)
    model, parallelism = DESCRIPTIONS[scenario]
    if size != "small":
        model = f"{model}; size {size}: {MLP[size] if scenario == 'mlp_ddp' else TRANSFORMER[size]}"
    job = {"job_id": f"{name}-w{world}", "model": model, "world_size": world,
           "backend": "nccl" if device == "cuda" else "gloo", "device": device,
           "parallelism": parallelism, "steps_recorded": ACTIVE,
           "torch_version": torch.__version__, "scenario": scenario,
           "recorded_step_indices": list(RECORDED_STEPS), "settle_steps_before_recording": settle_steps}
    (run_dir / "job.json").write_text(json.dumps(job, indent=1) + "\n")
    return run_dir


def _check_gpus(parser, args) -> None:
    if not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device (record on a machine with GPUs)")
    if set(args.scenario) - set(SCALABLE):
        parser.error(f"--device cuda: only {', '.join(SCALABLE)} run on GPUs (name them with --scenario)")
    too_many = [w for w in args.world_sizes if w > torch.cuda.device_count()]
    if too_many:
        parser.error(f"--device cuda: world size {too_many[0]} needs one GPU per rank; "
                     f"{torch.cuda.device_count()} here")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATASETS / "pytorch-gloo")
    parser.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--timed-steps", type=int, default=0, metavar="K",
                        help="after recording, time K more steps with the profiler off (rank<R>.timing.json)")
    parser.add_argument("--settle-steps", type=int, default=0, metavar="N",
                        help="run N steps before the recorder starts, unrecorded (DDP's bucket rebuild and first "
                        "collectives then fall outside the recorded steps, as in the timed ones)")
    parser.add_argument("--size", choices=SIZES, default="small",
                        help=f"model size; 'large' ({', '.join(SCALABLE)} only) gives operators of milliseconds")
    parser.add_argument("--probe", action="store_true",
                        help="also measure the profiler's cost per operator on this machine (tools/profcost.py) and "
                        "write profiler_cost.json beside each run's traces, for chakra calibrate")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: one GPU per rank over NCCL (mlp_ddp and transformer_ddp; world sizes up to "
                        "the GPUs here, 1 allowed); with --timed-steps each timed step ends with a synchronisation")
    args = parser.parse_args(argv)
    if args.size != "small" and set(args.scenario) - set(SCALABLE):
        parser.error(f"--size {args.size}: only {', '.join(SCALABLE)} come in more than one size")
    if args.settle_steps < 0 or args.timed_steps < 0:
        parser.error("--settle-steps and --timed-steps: 0 or more")
    if args.device == "cuda":
        _check_gpus(parser, args)
    for w in args.world_sizes:
        if args.device == "cpu" and (w < 2 or (w > 2 and w % 2)):
            parser.error(f"world size {w}: use 2 or an even number >= 4")

    started = time.monotonic()
    probe = None
    if args.probe:  # once per machine, before the runs: the same document goes beside every run
        print(f"[collect] profiler cost probe on {args.device} ...", flush=True)
        probe = profcost.measure(torch.device(args.device))
    rows = []
    for scenario in args.scenario:
        for world in args.world_sizes:
            t0 = time.monotonic()
            print(f"[collect] {scenario} world_size={world} ...", flush=True)
            run_dir = run(scenario, world, args.out, args.timed_steps, args.size, args.device, args.settle_steps)
            if probe is not None:
                profcost.write(run_dir, probe)
            files = sorted(p for p in run_dir.iterdir() if p.is_file())
            size = sum(p.stat().st_size for p in files)
            print(f"[collect]   -> {run_dir} ({len(files)} files, {size / 1024:.1f} KiB, "
                  f"{time.monotonic() - t0:.1f} s)", flush=True)
            rows.append((run_dir, files, size))

    print("\nsummary:")
    total = 0
    for run_dir, files, size in rows:
        total += size
        print(f"  {run_dir}  {size / 1024:8.1f} KiB")
        for p in files:
            print(f"    {p.name:28s} {p.stat().st_size:>9,d} B")
    print(f"  total {total / 1024:.1f} KiB in {len(rows)} runs, {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
