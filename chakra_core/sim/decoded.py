"""A decoded node: what the workload layer (workload/nodes.py decodes it, workload/issue.py
issues it) hands the system layer for a communication node, and the time category it counts
in; beside the layers, so that the system layer takes nothing from the one above it."""

from __future__ import annotations

from dataclasses import dataclass, field

from chakra_core.sim import breakdown

# collectives ASTRA-sim refuses, timed as the ring-family collective that moves the same data
EXTENSIONS = {
    "reduce": "REDUCE timed as an all-reduce (a pipelined ring reduce to the root takes the same steps)",
    "gather": "GATHER timed as an all-gather of the same per-NPU size",
    "scatter": "SCATTER timed as a reduce-scatter (an upper bound: it adds the local reduction cost)",
    "reduce_scatter_block": "REDUCE_SCATTER_BLOCK timed as a reduce-scatter",
    "barrier": "BARRIER timed as an all-reduce of the smallest size (one byte per NPU per chunk)",
    "uneven_all_to_all": "an all-to-all whose NPUs send different amounts (uneven splits) is timed at the largest"
                         " NPU's size",
}

# hardware slots
CPU, GPU_COMPUTE, GPU_COMM, NO_SLOT = 0, 1, 2, 3
TRACK_OF_SLOT = {CPU: "cpu", GPU_COMPUTE: "compute", GPU_COMM: "comm", NO_SLOT: "comm"}

# what a node does when issued
DO_COMPUTE, DO_COLLECTIVE, DO_REPLAY, DO_SEND, DO_RECV, DO_INSTANT = range(6)


@dataclass(frozen=True)
class Node:
    """What the simulator needs of one node, decoded once from the table (and shared by equal nodes)."""

    action: int
    slot: int
    duration: int = 0  # compute / replay ns
    op: str = ""  # the collective it is timed as, or "send"/"recv"
    label: str = ""  # its name in results (differs from op for the EXTENSIONS)
    size: int = 0
    group: tuple[int, ...] | None = None  # collective members (None: all NPUs)
    involved: tuple[bool, ...] | None = None
    idle: bool = False  # a collective with no dimension to run on: each member is done when it issues it
    peer: int = -1
    tag: int = 0
    category: int | None = field(init=False, default=None)  # its share of the NPU's time (sim/breakdown.py)

    def __post_init__(self) -> None:  # once per distinct node shape: nodes are interned
        object.__setattr__(self, "category", _category_of(self))


def _category_of(node: Node) -> int | None:
    """None for nodes that take no time."""
    if node.action == DO_INSTANT:
        return None
    if node.op == "memory":
        return breakdown.MEMORY
    if node.action in (DO_COLLECTIVE, DO_SEND, DO_RECV) or node.op == "broadcast":
        return breakdown.COMMUNICATION
    return breakdown.HOST if node.slot == CPU else breakdown.COMPUTE
