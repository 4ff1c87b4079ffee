#!/usr/bin/env python
"""Record four-rank DDP training jobs (gloo on 127.0.0.1) with and without a straggler, with the
plain PyTorch recipe: an ExecutionTraceObserver attached to torch.profiler, nothing of this
project's in the ranks' processes.

Usage::

    python -m tools.record_stragglers --out datasets/pytorch-stragglers [--runs balanced compute host]
        [--tag NAME]

The same MLP trained with DDP on four ranks, three ways:

- `balanced`: every rank does the same work;
- `compute`: rank 2 does extra work in its forward (EXTRA_MATMULS matrix products of
  EXTRA_SIZE x EXTRA_SIZE, outside the model: `aten::mm`), so its gradient all-reduces start late;
- `host`: rank 1 sleeps HOST_STALL_S on the host (`time.sleep`, no operator) between its
  forward and its backward.

Each run is `<out>/<run>[-<tag>]-w4/`: `rank<R>.et.json.gz`, `rank<R>.kineto.json.gz`,
`job.json` (which rank is slow, how, and by how much). Steps 2-4 (0-based) of six are recorded
(`ProfilerStep#2` to `#4`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from tools.gloo_recording import gloo_rank, recorded_steps, spawn_ranks, write_job

WORLD, STEPS, WARMUP, ACTIVE = 4, 6, 2, 3
BATCH, WIDTH, SEED = 32, 512, 1234
COMPUTE_RANK, EXTRA_MATMULS, EXTRA_SIZE = 2, 6, 384
HOST_RANK, HOST_STALL_S = 1, 0.030
RUNS = ("balanced", "compute", "host")


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                               torch.nn.ReLU(), torch.nn.Linear(WIDTH, 10))


def _extra_forward_work(x: torch.Tensor) -> torch.Tensor:
    """What the compute straggler adds to its forward: matrix products whose result is kept."""
    a = torch.randn(EXTRA_SIZE, EXTRA_SIZE)
    for _ in range(EXTRA_MATMULS):
        a = torch.mm(a, a).tanh()
    return x + a.mean() * 0.0


def _step(rank: int, run: str, model, optimizer) -> None:
    x, target = torch.randn(BATCH, 64), torch.randint(0, 10, (BATCH,))
    if run == "compute" and rank == COMPUTE_RANK:
        x = _extra_forward_work(x)
    loss = torch.nn.functional.cross_entropy(model(x), target)
    if run == "host" and rank == HOST_RANK:
        time.sleep(HOST_STALL_S)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def _worker(rank: int, port: int, run: str, run_dir: str) -> None:
    with gloo_rank(rank, port, WORLD, SEED):
        torch.manual_seed(SEED)  # one model on every rank, then each rank's own data
        model = DistributedDataParallel(_model())
        torch.manual_seed(SEED + rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        recorded_steps(rank, run_dir, STEPS, WARMUP, ACTIVE, lambda: _step(rank, run, model, optimizer))


def _straggler(run: str) -> dict | None:
    if run == "compute":
        return {"rank": COMPUTE_RANK, "cause": "compute",
                "what": f"{EXTRA_MATMULS} torch.mm of {EXTRA_SIZE}x{EXTRA_SIZE} (+ tanh) in its forward"}
    if run == "host":
        return {"rank": HOST_RANK, "cause": "host", "stall_ns": int(HOST_STALL_S * 1e9),
                "what": f"time.sleep({HOST_STALL_S}) between forward and backward"}
    return None


def record(run: str, out_root: Path, tag: str = "") -> Path:
    run_dir = out_root / f"{run}{'-' + tag if tag else ''}-w{WORLD}"
    spawn_ranks(_worker, WORLD, run_dir, run)
    write_job(run_dir, model=f"MLP 64-{WIDTH}-{WIDTH}-10, batch {BATCH}/rank, SGD", world_size=WORLD,
              parallelism="data parallel (DDP)", straggler=_straggler(run), steps_recorded=ACTIVE)
    return run_dir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--tag", default="", help="suffix of the run folders (a second recording: heldout)")
    args = parser.parse_args(argv)
    for run in args.runs:
        print(f"[record_stragglers] {run}: {record(run, args.out, args.tag)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
