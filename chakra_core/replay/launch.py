"""Replay a Chakra job on a real torch.distributed runtime (`chakra replay`).

One process per rank walks its rank's trace in dependency order (ready nodes by ascending id,
the order ASTRA-sim issues them in) and issues every collective and send/recv with its
recorded size and process group without waiting for it: a node waits only for the
communication it depends on, so communication overlaps the compute beside it as it did in
the recorded run (DDP's bucket all-reduces during backward). Compute nodes take their
recorded duration (`sleep`: the process waits, `spin`: it busy-waits, `none`: compute is
skipped to time communication alone), paid as a debt just before the next communication is
issued, so a trace of many microsecond-long operators is not inflated by one sleep call per
node.

Each iteration is timed between two barriers; the job's iteration time is the slowest
rank's. Every communication node is timed on every rank. The result also gives the time the
trace itself measured (`recorded_ns`: from its earliest start to its latest end, on the
slowest rank), so replay and recording can be compared. gloo runs on CPUs; nccl on GPUs
(one per rank). A peer that never arrives ends the replay after `timeout_s` with the ranks
and nodes that were waiting.
"""

from __future__ import annotations

import socket
import statistics

from chakra_core.format.job import Job, rank_url
from chakra_core.replay.plan import ReplayError, Step, plan_rank, recorded_ns, with_all_to_all_sizes
from chakra_core.replay.worker import run_ranks


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay_job(prefix: str, comm_groups: dict[int, tuple[int, ...]] | None = None, *, iterations: int = 3,
               warmup: int = 1, backend: str = "gloo", compute: str = "sleep", timeout_s: float = 60.0,
               ranks: int | None = None, compute_scale: float = 1.0) -> dict:
    """Replays `<prefix>.<rank>.et` for ranks 0..N-1 (N found from the files unless given) with
    the given communicator groups (when None, `<prefix>.comm_groups.json` where it exists, as
    `chakra simulate` reads a job; `{}`: none).
    compute_scale multiplies every compute duration (the profiler's cost, `chakra calibrate
    --measured-ms`), as `chakra simulate --compute-scale` does."""
    if compute not in ("sleep", "spin", "none"):
        raise ReplayError(f"--compute {compute!r}: expected sleep, spin or none")
    if not compute_scale > 0:
        raise ReplayError(f"--compute-scale {compute_scale}: expected a number > 0")
    job = Job.read(prefix, ranks)
    tables = job.tables
    plans = [plan_rank(t, rank_url(prefix, r), compute_scale) for r, t in enumerate(tables)]
    chosen = job.comm_groups if comm_groups is None else comm_groups
    groups = {str(g): tuple(members) for g, members in sorted(chosen.items())}
    _check_groups(plans, groups, prefix)
    plans = with_all_to_all_sizes(plans, groups)
    outcomes = run_ranks(plans, groups, iterations=iterations, warmup=warmup, backend=backend, compute=compute,
                         timeout_s=timeout_s, port=free_port())
    return {**_summary(prefix, plans, tables, outcomes), "compute_scale": compute_scale}


def _check_groups(plans: list[list[Step]], groups: dict[str, tuple[int, ...]], prefix: str) -> None:
    for rank, plan in enumerate(plans):
        for step in plan:
            if step.kind in ("compute", "send", "recv") or step.group == "0":
                continue
            where = f"{rank_url(prefix, rank)}: node {step.node_id}"
            if step.group not in groups:
                raise ReplayError(f"{where}: process group {step.group} is not in the communicator groups "
                                  f"({sorted(groups) or 'none; pass --comm-group'})")
            if rank not in groups[step.group]:
                raise ReplayError(f"{where}: rank {rank} is not a member of group {step.group} "
                                  f"{list(groups[step.group])}")


def _summary(prefix: str, plans: list[list[Step]], tables: list, outcomes: list[dict]) -> dict:
    per_iteration = [max(o["iterations_ns"][i] for o in outcomes) for i in range(len(outcomes[0]["iterations_ns"]))]
    recorded = [recorded_ns(t) for t in tables]
    nodes = []
    for rank, (plan, outcome) in enumerate(zip(plans, outcomes)):
        comm = [s for s in plan if s.kind != "compute"]
        for step, times in zip(comm, outcome["comm_ns"]):
            nodes.append({"rank": rank, "node_id": step.node_id, "name": step.name, "kind": step.kind,
                          "bytes": step.size, "group": step.group, "median_ns": int(statistics.median(times))})
    return {"prefix": prefix, "ranks": len(plans), "iterations_ns": per_iteration,
            "median_ns": int(statistics.median(per_iteration)),
            "recorded_ns": max((r for r in recorded if r is not None), default=None), "nodes": nodes}
