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

import bisect
from collections import defaultdict

from chakra_core.sim.decoded import CPU, GPU_COMPUTE

CATEGORIES = ("device", "host", "communication", "waiting for the device", "idle")


def critical_paths(feeders, nodes, issued_at: list[list[int]], ran: list[tuple[int, int, int]]) -> list[dict]:
    """Per NPU, ns of its critical path by CATEGORIES."""
    end: list[dict[int, int]] = [dict() for _ in feeders]
    by_slot: dict = defaultdict(list)  # (npu, slot) -> [(end, index)] sorted
    for npu, index, finish in ran:
        end[npu][index] = finish
        by_slot[(npu, nodes[npu][index].slot)].append((finish, index))
    for items in by_slot.values():
        items.sort()
    return [_walk(npu, feeders[npu], nodes[npu], issued_at[npu], end[npu], by_slot) for npu in range(len(feeders))]


def _walk(npu: int, feeder, npu_nodes, issued_at: list[int], end: dict[int, int], by_slot) -> dict:
    totals = dict.fromkeys(CATEGORIES, 0)
    if not end:
        return totals
    current = max(end, key=lambda i: (end[i], -i))
    waiting, seen = False, set()
    while current is not None and current not in seen:  # nodes of no duration in one tick may hold each other
        seen.add(current)
        start, slot = issued_at[current], npu_nodes[current].slot
        kind = _kind(slot)
        if kind == "device" and waiting:
            kind = "waiting for the device"
        totals[kind] += end[current] - start
        held_by = _held_by(current, start, feeder, end, by_slot[(npu, slot)])
        if held_by is None:
            totals["idle"] += start
            break
        totals["idle"] += start - end[held_by]
        next_slot = npu_nodes[held_by].slot
        if slot == CPU and next_slot == GPU_COMPUTE:
            waiting = True
        elif next_slot == CPU:
            waiting = False
        current = held_by
    return totals


def _kind(slot: int) -> str:
    return "host" if slot == CPU else "device" if slot == GPU_COMPUTE else "communication"


def _held_by(index: int, start: int, feeder, end: dict[int, int], slot_order: list[tuple[int, int]]) -> int | None:
    """What ended last before `index` started: a parent, or the previous node on its slot."""
    best, best_end = None, -1
    for parent in feeder.parents(index):
        finish = end.get(parent)
        if finish is not None and finish <= start and finish > best_end:
            best, best_end = parent, finish
    k = bisect.bisect_right(slot_order, (start, 1 << 62)) - 1
    while k >= 0 and slot_order[k][1] == index:
        k -= 1
    if k >= 0 and slot_order[k][0] > best_end:
        best = slot_order[k][1]
    return best
