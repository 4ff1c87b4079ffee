"""What the recording tools of gloo jobs on this CPU (record_pipeline, record_stragglers) share:
the ranks spawned on 127.0.0.1, each in its gloo process group, their steps recorded with the
plain PyTorch recipe (an ExecutionTraceObserver attached to torch.profiler), the files gzipped
and the run described in job.json."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

from chakra_core.replay.launch import free_port


@contextmanager
def gloo_rank(rank: int, port: int, world: int, seed: int) -> Iterator[None]:
    """The rank's gloo process group for the block: one thread, seeded `seed + rank`."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    torch.manual_seed(seed + rank)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def recorded_steps(rank: int, run_dir: str, steps: int, warmup: int, active: int, step: Callable[[], None]) -> None:
    """`step()` run `steps` times, the `active` after `warmup` recorded as rank<R>.et.json and
    rank<R>.kineto.json in run_dir; then a barrier, so that no rank leaves while others record."""
    out = Path(run_dir)
    observer = ExecutionTraceObserver().register_callback(str(out / f"rank{rank}.et.json"))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=warmup, active=active),
                 execution_trace_observer=observer,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out / f"rank{rank}.kineto.json"))) as prof:
        for _ in range(steps):
            step()
            prof.step()
    dist.barrier()


def spawn_ranks(worker: Callable, world: int, run_dir: Path, *args) -> None:
    """run_dir made afresh, `worker(rank, port, *args, run_dir)` run on `world` ranks, and the
    traces they wrote gzipped."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    mp.spawn(worker, args=(free_port(), *args, str(run_dir)), nprocs=world, join=True)
    for path in sorted(run_dir.glob("rank*.json")):
        with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()


def write_job(run_dir: Path, **fields) -> None:
    """run_dir/job.json: the run's own fields, then what every recording here shares."""
    job = {"job_id": run_dir.name, **fields, "backend": "gloo", "device": "cpu",
           "torch_version": torch.__version__, "recipe": "ExecutionTraceObserver + profiler"}
    (run_dir / "job.json").write_text(json.dumps(job, indent=1) + "\n")
