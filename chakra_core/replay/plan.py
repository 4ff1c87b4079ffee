"""What each rank of a replay runs: its trace's nodes as steps in dependency order, and the
helpers the spawned rank processes share (chakra_core/replay/worker.py runs them,
chakra_core/replay/launch.py starts the processes and reads the results)."""

from __future__ import annotations

import heapq
import math
import os
import time
from dataclasses import dataclass, replace

import numpy as np

from chakra_core.convert.pytorch.analysis import PG_ANNOTATION_PREFIX
from chakra_core.errors import ChakraError
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.nodetypes import CALL_OWN_TIME_PREFIX, COLL, COMP, RECV, SEND

WORLD_NAMES = ("", "0")
# CPU nodes the converter keeps for a communication call (docs/ingestion.md, 'Time of
# communication calls'): its wrapper's host time and, for a blocking call, its gloo work
CALL_TIME_PREFIXES = (PG_ANNOTATION_PREFIX, CALL_OWN_TIME_PREFIX)
SLEEP_SLACK_NS = 200_000  # below this much compute debt, spin: sleep() overshoots by ~0.1 ms


class ReplayError(ChakraError):
    """A trace that cannot be replayed, or a replay that failed or timed out (names ranks and nodes)."""


@dataclass(frozen=True)
class Step:
    kind: str  # "compute", a collective name (COMM_TYPES, lower case), "send" or "recv"
    node_id: int
    name: str
    size: int = 0  # bytes, or ns for compute
    group: str = "0"
    peer: int = -1
    tag: int = 0
    # the communication steps (numbered in plan order, compute excluded) this one must see
    # complete before it starts: those it depends on directly or through skipped nodes
    waits: tuple[int, ...] = ()
    # all_to_all: the bytes each member of its group sends in it (group order), which may
    # differ (uneven splits): every member must agree on what it receives from whom
    sizes: tuple[int, ...] = ()


def plan_rank(table, path: str, compute_scale: float = 1.0) -> list[Step]:
    """The rank's nodes as steps, in dependency order with ascending ids among the ready ones;
    compute takes its recorded duration times compute_scale."""
    rows = table.select(["id", "name", "type", "ctrl_deps", "data_deps", "duration_micros", "comm_type",
                         "comm_size", "pg_name", "comm_src", "comm_dst", "comm_tag"]).to_pylist()
    index = {row["id"]: i for i, row in enumerate(rows)}
    children, waiting = [[] for _ in rows], [0] * len(rows)
    for i, row in enumerate(rows):
        for parent in {*(row["ctrl_deps"] or ()), *(row["data_deps"] or ())}:
            if parent in index and index[parent] != i:
                children[index[parent]].append(i)
                waiting[i] += 1
    ready = [(row["id"], i) for i, row in enumerate(rows) if not waiting[i]]
    heapq.heapify(ready)
    steps, needs, communications = [], [frozenset()] * len(rows), 0
    parents_need = [set() for _ in rows]  # communication a node's parents leave it to wait for
    while ready:
        _, i = heapq.heappop(ready)
        step = _step(rows[i], path, compute_scale)
        if step is None:  # skipped: its children inherit what it waited for
            needs[i] = frozenset(parents_need[i])
        else:
            steps.append(replace(step, waits=tuple(sorted(parents_need[i]))))
            if step.kind != "compute":
                needs[i] = frozenset((communications,))
                communications += 1
        parents_need[i] = None
        for child in children[i]:
            parents_need[child].update(needs[i])
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, (rows[child]["id"], child))
    if len(steps) < sum(1 for row in rows if _step(row, path) is not None):
        raise ReplayError(f"{path}: the dependency graph has a cycle; `chakra validate` names it")
    return steps


def _step(row: dict, path: str, compute_scale: float = 1.0) -> Step | None:
    node_type, node_id, name = row["type"], row["id"], row["name"] or ""
    if node_type == COMP:
        if name.startswith(CALL_TIME_PREFIXES):
            return None  # the communication call's own host and gloo time: the replayed call pays it again
        return Step("compute", node_id, name, round((row["duration_micros"] or 0) * 1000 * compute_scale))
    if node_type == COLL:
        kind = COMM_TYPES.get(row["comm_type"])
        if kind is None or row["comm_size"] is None or row["comm_size"] < 0:
            raise ReplayError(f"{path}: node {node_id}: a collective needs a known comm_type and comm_size >= 0")
        return Step(kind.lower(), node_id, name, row["comm_size"], _group(row["pg_name"]))
    if node_type in (SEND, RECV):
        peer = row["comm_dst"] if node_type == SEND else row["comm_src"]
        if peer is None or row["comm_size"] is None or row["comm_tag"] is None:
            raise ReplayError(f"{path}: node {node_id}: send/recv needs its peer, comm_size and comm_tag")
        return Step("send" if node_type == SEND else "recv", node_id, name, row["comm_size"], peer=peer,
                    tag=row["comm_tag"])
    return None  # metadata and memory nodes take no time in a replay


def _group(pg_name) -> str:
    return "0" if pg_name in WORLD_NAMES or pg_name is None else str(pg_name)


def recorded_ns(table) -> int | None:
    """The span the trace measured: earliest start to latest end (None without start times)."""
    start = np.asarray(table.column("start_time_micros").to_numpy(zero_copy_only=False), dtype=np.float64)
    duration = np.nan_to_num(np.asarray(table.column("duration_micros").to_numpy(zero_copy_only=False),
                                        dtype=np.float64))
    timed = start > 0
    if not timed.any():
        return None
    return int((np.max(start[timed] + duration[timed]) - np.min(start[timed])) * 1000)



def tensor_elements(nbytes: int, multiple: int = 1) -> int:
    """float32 elements holding nbytes, rounded up to a multiple (all-to-all splits evenly)."""
    return max(multiple, math.ceil(math.ceil(nbytes / 4) / multiple) * multiple)


def pay_compute(due_ns: int, spin: bool) -> None:
    """Wait until the monotonic clock reaches due_ns (sleep for the bulk unless spinning)."""
    remaining = due_ns - time.perf_counter_ns()
    if not spin and remaining > SLEEP_SLACK_NS:
        time.sleep((remaining - SLEEP_SLACK_NS) / 1e9)
    while time.perf_counter_ns() < due_ns:
        pass


def worker_env() -> dict[str, str]:
    """Threads per rank: one, so that ranks sharing a machine do not fight over its cores."""
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def with_all_to_all_sizes(plans: list[list[Step]], groups: dict[str, tuple[int, ...]]) -> list[list[Step]]:
    """Each all_to_all with the bytes every member of its group sends: the k-th collective of a
    group is the same call on each member (`chakra validate` checks the order)."""
    world = tuple(range(len(plans)))
    in_order: dict[tuple[int, str], list[int]] = {}  # (rank, group) -> plan positions of its collectives
    for rank, plan in enumerate(plans):
        for position, step in enumerate(plan):
            if step.kind not in ("compute", "send", "recv"):
                in_order.setdefault((rank, step.group), []).append(position)
    out = [list(plan) for plan in plans]
    for (rank, group), positions in in_order.items():
        for k, position in enumerate(positions):
            step = plans[rank][position]
            if step.kind != "all_to_all":
                continue
            sizes = []
            for member in groups.get(group, world):
                theirs = in_order.get((member, group), [])
                other = plans[member][theirs[k]] if k < len(theirs) else None
                sizes.append(other.size if other is not None and other.kind == "all_to_all" else step.size)
            out[rank][position] = replace(step, sizes=tuple(sizes))
    return out
