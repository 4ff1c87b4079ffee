"""What held each NPU's critical path in a simulated run (docs/gpu.md, 'What the simulator says').

Walking back from the node that ended last on an NPU, each node was held by what ended last
before it started: one of its parents, or the node that had its hardware slot (one CPU op, one
GPU compute node, one communication operation at a time). The walk adds each node's duration to
its kind: `host` (CPU nodes), `device` (GPU compute), `communication` (collectives, sends,
receives; waiting for peers included), and `waiting for the device` for device work that a CPU
node waited for (a synchronisation: the walk stepped from a CPU node to device work, until it
reaches the CPU node that launched it). Time in which no node ran is `idle`. The parts add up
to the NPU's finish time.
"""

from __future__ import annotations

import numpy as np

from chakra_core.sim.decoded import CPU, GPU_COMPUTE

CATEGORIES = ("device", "host", "communication", "waiting for the device", "idle")


def critical_paths(feeders, nodes, issued_at, ran) -> list[dict]:
    """Per NPU, ns of its critical path by CATEGORIES. issued_at[npu][index]: the node's issue
    tick; ran: workload.recorded.Completions (per completion its NPU, node index and end tick)."""
    npus, indices, ends = ran.arrays()
    paths = []
    for npu, feeder in enumerate(feeders):
        mine = npus == npu
        paths.append(_walk(feeder, nodes[npu], issued_at[npu], indices[mine], ends[mine]))
    return paths


def _walk(feeder, npu_nodes, issued_at, indices: np.ndarray, ends: np.ndarray) -> dict:
    totals = dict.fromkeys(CATEGORIES, 0)
    if not len(indices):
        return totals
    end = np.full(len(npu_nodes), -1, np.int64)  # -1: the node did not run
    end[indices] = ends
    slot_of = np.fromiter((node.slot for node in npu_nodes), np.int8, len(npu_nodes))
    by_slot = {}  # slot -> (ends, indices) of the nodes run on it, by end then index
    for slot in np.unique(slot_of[indices]).tolist():
        on = indices[slot_of[indices] == slot]
        order = np.lexsort((on, end[on]))
        by_slot[slot] = (end[on][order], on[order])
    current = int(np.flatnonzero(end == end.max())[0])  # the last to end (the lowest index of a tie)
    waiting, seen = False, bytearray(len(npu_nodes))  # (a flag a node: the path may be most of the trace)
    while current is not None and not seen[current]:  # nodes of no duration in one tick may hold each other
        seen[current] = 1
        start, slot = issued_at[current], int(slot_of[current])
        kind = _kind(slot)
        if kind == "device" and waiting:
            kind = "waiting for the device"
        totals[kind] += int(end[current]) - start
        held_by = _held_by(current, start, feeder, end, by_slot[slot])
        if held_by is None:
            totals["idle"] += start
            break
        totals["idle"] += start - int(end[held_by])
        next_slot = int(slot_of[held_by])
        if slot == CPU and next_slot == GPU_COMPUTE:
            waiting = True
        elif next_slot == CPU:
            waiting = False
        current = held_by
    return totals


def _kind(slot: int) -> str:
    return "host" if slot == CPU else "device" if slot == GPU_COMPUTE else "communication"


def _held_by(index: int, start: int, feeder, end: np.ndarray, slot_order: tuple[np.ndarray, np.ndarray]) -> int | None:
    """What ended last before `index` started: a parent, or the previous node on its slot."""
    best, best_end = None, -1
    for parent in feeder.parents(index):
        finish = int(end[parent])
        if 0 <= finish <= start and finish > best_end:
            best, best_end = parent, finish
    slot_ends, slot_nodes = slot_order
    k = int(np.searchsorted(slot_ends, start, side="right")) - 1
    while k >= 0 and slot_nodes[k] == index:
        k -= 1
    if k >= 0 and slot_ends[k] > best_end:
        best = int(slot_nodes[k])
    return best
