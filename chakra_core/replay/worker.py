"""The torch.distributed side of `chakra replay`: one spawned process per rank (needs the
`torch` extra). chakra_core/replay/plan.py builds the per-rank plans, launch.py starts the ranks and reads the results."""

from __future__ import annotations

import datetime
import os
import queue
import time
import traceback

from chakra_core.replay.plan import (
    ReplayError,
    Step,
    pay_compute,
    tensor_elements,
    worker_env,
)

GRACE_S = 30  # beyond the collective timeout, for process start-up and the iteration barriers


def run_ranks(plans: list[list[Step]], groups: dict[str, tuple[int, ...]], *, iterations: int, warmup: int,
              backend: str, compute: str, timeout_s: float, port: int) -> list[dict]:
    """Runs every rank's plan; per rank {"iterations_ns": [...], "comm_ns": [[ns per iteration] per node]}."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    os.environ.update(worker_env())
    processes = [context.Process(target=_rank_main, daemon=True,
                                 args=(rank, len(plans), port, plan, groups, iterations, warmup, backend, compute,
                                       timeout_s, results)) for rank, plan in enumerate(plans)]
    for process in processes:
        process.start()
    try:
        return _collect(results, processes, timeout_s * max(1, iterations + warmup) + GRACE_S)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(5)


def _collect(results, processes, deadline_s: float) -> list[dict]:
    outcomes, failures, deadline = {}, [], time.monotonic() + deadline_s
    while len(outcomes) + len(failures) < len(processes):
        try:
            rank, kind, payload = results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() > deadline or not any(p.is_alive() for p in processes):
                missing = sorted(set(range(len(processes))) - set(outcomes) - {r for r, _ in failures})
                raise ReplayError(f"replay did not finish: ranks {missing} gave no result"
                                  + (f"; {'; '.join(m for _, m in failures)}" if failures else "")) from None
            continue
        if kind == "ok":
            outcomes[rank] = payload
        else:
            failures.append((rank, payload))
    if failures:
        raise ReplayError("; ".join(message for _, message in sorted(failures)))
    return [outcomes[rank] for rank in range(len(processes))]


def _rank_main(rank, world, port, plan, groups, iterations, warmup, backend, compute, timeout_s, results) -> None:
    import torch.distributed as dist

    current = [None]  # the node this rank is on, for the failure report
    try:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        runner = _Runner(rank, plan, groups, backend, compute, current)
        times, comm = [], [[] for step in plan if step.kind != "compute"]
        for iteration in range(warmup + iterations):
            elapsed, per_node = runner.iteration()
            if iteration >= warmup:
                times.append(elapsed)
                for store, ns in zip(comm, per_node):
                    store.append(ns)
        results.put((rank, "ok", {"iterations_ns": times, "comm_ns": comm}))
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises one ReplayError
        where = f"node {current[0].node_id} ({current[0].kind} {current[0].name!r})" if current[0] else "start-up"
        detail = traceback.format_exc() if os.environ.get("CHAKRA_DEBUG") else " ".join(str(exc).split())[:300]
        results.put((rank, "error", f"rank {rank} failed at {where}: {detail}"))


class _Runner:
    """Runs one rank's plan once per call; buffers are made once per size and reused."""

    def __init__(self, rank: int, plan: list[Step], groups: dict[str, tuple[int, ...]], backend: str, compute: str,
                 current: list):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.rank, self.plan, self.compute, self.current = torch, dist, rank, plan, compute, current
        self.device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) if backend == "nccl" else None
        self.synchronize = (lambda: torch.cuda.synchronize(self.device)) if self.device is not None else None
        # every rank creates every group, in the same order, as torch.distributed requires
        self.groups = {name: (dist.new_group(list(members)), tuple(members)) for name, members in groups.items()}
        self.buffers: dict[tuple, object] = {}

    def buffer(self, elements: int, slot: str = "in"):
        key = (elements, slot)
        if key not in self.buffers:
            self.buffers[key] = self.torch.ones(elements, dtype=self.torch.float32, device=self.device)
        return self.buffers[key]

    def iteration(self) -> tuple[int, list[int]]:
        self.dist.barrier()
        start = due = time.perf_counter_ns()
        inflight = _InFlight(self.current, self.synchronize)
        for step in self.plan:
            self.current[0] = step
            ready = inflight.wait(step.waits)
            if step.kind == "compute":
                if self.compute != "none":
                    due = max(due, ready) + step.size
                continue
            if self.compute != "none":
                pay_compute(due, self.compute == "spin")
            inflight.issue(step, self.communicate(step))
        if self.compute != "none":
            pay_compute(due, self.compute == "spin")
        inflight.wait(range(len(inflight.works)))
        elapsed = time.perf_counter_ns() - start
        self.current[0] = None
        return elapsed, inflight.durations()

    def communicate(self, step: Step):
        dist = self.dist
        group, members = self.groups.get(step.group, (None, None))
        size = len(members) if members else dist.get_world_size()
        root = members[0] if members else 0
        if step.kind == "send":
            return dist.isend(self.buffer(tensor_elements(step.size)), step.peer, tag=step.tag)
        if step.kind == "recv":
            return dist.irecv(self.buffer(tensor_elements(step.size), "out"), step.peer, tag=step.tag)
        if step.kind == "all_to_all":
            return self.all_to_all(step, group, members or tuple(range(size)))
        tensor = self.buffer(tensor_elements(step.size))
        return _COLLECTIVES[step.kind](self, tensor, group, size, root)

    def all_to_all(self, step: Step, group, members: tuple[int, ...]):
        """Each member sends its recorded bytes in equal shares (members' totals may differ)."""
        n = len(members)
        shares = [tensor_elements(sent, n) // n for sent in (step.sizes or (step.size,) * n)]
        mine = shares[members.index(self.rank)]
        return self.dist.all_to_all_single(self.buffer(sum(shares), "out"), self.buffer(mine * n),
                                           output_split_sizes=shares, input_split_sizes=[mine] * n, group=group,
                                           async_op=True)


class _InFlight:
    """The communication of one iteration, issued without waiting: when each was issued and
    when it completed. Completion is stamped by a callback on the work's future, so a node that
    is waited for late still gets its own time; point-to-point work has no future on gloo, and
    its completion is when it was waited for (an upper bound). With `synchronize` (GPUs) each
    is waited for and synchronised as soon as it is issued."""

    def __init__(self, current: list, synchronize=None):
        self.current, self.synchronize = current, synchronize
        self.steps, self.works, self.stamped, self.began, self.done = [], [], [], [], []

    def issue(self, step: Step, work) -> None:
        self.steps.append(step)
        self.began.append(time.perf_counter_ns())
        stamped = False
        if self.synchronize is not None:
            work.wait()
            self.synchronize()
            work = None
        else:
            try:  # the chained future's value is the completion time (and it raises what the work raised)
                work, stamped = work.get_future().then(lambda future: (future.wait(), time.perf_counter_ns())[1]), True
            except RuntimeError:
                pass
        self.works.append(work)
        self.stamped.append(stamped)
        self.done.append(None if work is not None else time.perf_counter_ns())

    def wait(self, indices) -> int:
        """Waits for the given communication; returns when the last of it completed (0 for none)."""
        latest = 0
        for i in indices:
            if self.done[i] is None:
                self.current[0] = self.steps[i]
                outcome = self.works[i].wait()
                self.done[i] = outcome if self.stamped[i] else time.perf_counter_ns()
                self.works[i] = None
            latest = max(latest, self.done[i])
        return latest

    def durations(self) -> list[int]:
        return [done - began for began, done in zip(self.began, self.done)]


def _all_gather(runner, tensor, group, size, root):
    outputs = [runner.buffer(tensor.numel(), f"out{i}") for i in range(size)]
    return runner.dist.all_gather(outputs, tensor, group=group, async_op=True)


def _reduce_scatter(runner, tensor, group, size, root):
    # gloo has no reduce_scatter: the reduction of the whole buffer costs about twice as much
    # traffic, so on gloo this is an upper bound (docs/replay.md)
    if runner.device is None:
        return runner.dist.all_reduce(tensor, group=group, async_op=True)
    chunk = max(1, tensor.numel() // size)
    return runner.dist.reduce_scatter_tensor(runner.buffer(chunk, "out"), tensor[:chunk * size], group=group,
                                             async_op=True)


def _gather(runner, tensor, group, size, root):
    outputs = [runner.buffer(tensor.numel(), f"out{i}") for i in range(size)] if runner.rank == root else None
    return runner.dist.gather(tensor, outputs, dst=root, group=group, async_op=True)


def _scatter(runner, tensor, group, size, root):
    share = max(1, tensor.numel() // size)
    inputs = [runner.buffer(share, f"in{i}") for i in range(size)] if runner.rank == root else None
    return runner.dist.scatter(runner.buffer(share, "out"), inputs, src=root, group=group, async_op=True)


_COLLECTIVES = {
    "all_reduce": lambda r, t, g, n, root: r.dist.all_reduce(t, group=g, async_op=True),
    "reduce": lambda r, t, g, n, root: r.dist.reduce(t, dst=root, group=g, async_op=True),
    "broadcast": lambda r, t, g, n, root: r.dist.broadcast(t, src=root, group=g, async_op=True),
    "barrier": lambda r, t, g, n, root: r.dist.barrier(group=g, async_op=True),
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "reduce_scatter_block": _reduce_scatter,
    "gather": _gather,
    "scatter": _scatter,
}
