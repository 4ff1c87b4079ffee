#!/usr/bin/env python
"""Record a two-stage pipeline-parallel training job (gloo on 127.0.0.1) with the plain PyTorch
recipe: an ExecutionTraceObserver attached to torch.profiler, nothing of this project's in the
ranks' processes (no TraceRecorder, no process-group annotation).

Usage::

    python -m tools.record_pipeline --out datasets/pytorch-gloo [--p2p isend batch]

A small MLP split across two ranks, trained with a 1F1B schedule of four micro-batches. In the
steady state each stage sends and receives at once, to and from the same peer: stage 0 sends
an activation and receives a gradient, stage 1 sends a gradient and receives the next
activation. `--p2p isend` posts them as `dist.isend` then `dist.irecv`, `--p2p batch` as one
`dist.batch_isend_irecv`; either way gloo's ET records the `c10d::recv_` of the receive as a
child of the `c10d::send` (what the converter must keep as a receive of its own). Each run is
`<out>/pipeline_<p2p>-w2/`: `rank<R>.et.json.gz`, `rank<R>.kineto.json.gz`, `job.json`.
Steps 2 and 3 (0-based) of five are recorded (`ProfilerStep#2`, `ProfilerStep#3`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.distributed as dist

from tools.gloo_recording import gloo_rank, recorded_steps, spawn_ranks, write_job

WORLD, MICRO_BATCHES, STEPS, WARMUP, ACTIVE = 2, 4, 5, 2, 2
BATCH, WIDTH, SEED = 8, 256, 1234


def _exchange(mode: str, send: torch.Tensor, recv: torch.Tensor, peer: int) -> None:
    """Send and receive at once with the peer stage, as pipeline schedules do."""
    if mode == "batch":
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)])
    else:
        works = [dist.isend(send, peer), dist.irecv(recv, peer)]
    for work in works:
        work.wait()


def _stage0_step(model, optimizer, mode: str) -> None:
    """Stage 0 of 1F1B: one forward ahead, then each forward's send paired with a gradient's receive."""
    peer, outputs = 1, []
    for m in range(MICRO_BATCHES):
        out = model(torch.randn(BATCH, WIDTH))
        outputs.append(out)
        if m == 0:
            dist.send(out.detach(), peer)
            continue
        grad = torch.empty_like(out)
        _exchange(mode, out.detach(), grad, peer)
        outputs.pop(0).backward(grad)
    grad = torch.empty_like(outputs[0])
    dist.recv(grad, peer)
    outputs.pop(0).backward(grad)
    optimizer.step()
    optimizer.zero_grad()


def _stage1_step(model, optimizer, mode: str) -> None:
    """Stage 1 of 1F1B: each backward's gradient sent while the next activation is received."""
    peer = 0
    activation = torch.empty(BATCH, WIDTH)
    dist.recv(activation, peer)
    for m in range(MICRO_BATCHES):
        activation.requires_grad_(True)
        model(activation).square().mean().backward()
        grad = activation.grad.detach().clone()
        if m == MICRO_BATCHES - 1:
            dist.send(grad, peer)
            break
        activation = torch.empty(BATCH, WIDTH)
        _exchange(mode, grad, activation, peer)
    optimizer.step()
    optimizer.zero_grad()


def _worker(rank: int, port: int, mode: str, run_dir: str) -> None:
    with gloo_rank(rank, port, WORLD, SEED):
        model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        step = _stage0_step if rank == 0 else _stage1_step
        recorded_steps(rank, run_dir, STEPS, WARMUP, ACTIVE, lambda: step(model, optimizer, mode))


def record(mode: str, out_root: Path) -> Path:
    run_dir = out_root / f"pipeline_{mode}-w{WORLD}"
    spawn_ranks(_worker, WORLD, run_dir, mode)
    write_job(run_dir, model=f"MLP {WIDTH}-{WIDTH}-{WIDTH} per stage, batch {BATCH}, SGD", world_size=WORLD,
              parallelism=f"pipeline, 2 stages, 1F1B over {MICRO_BATCHES} micro-batches, p2p by "
                          + ("batch_isend_irecv" if mode == "batch" else "isend then irecv"),
              steps_recorded=ACTIVE)
    return run_dir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--p2p", nargs="+", choices=("isend", "batch"), default=["isend", "batch"])
    args = parser.parse_args(argv)
    for mode in args.p2p:
        print(f"[record_pipeline] {mode}: {record(mode, args.out)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
