"""What a collective is made of, shared by the closed-form and the message-level models.

A collective of S bytes is cut into chunks ("streams"; docs/simulator.md, 'Chunks'); every
chunk runs the same list of phases ('Phases'), each on one logical dimension with that
dimension's algorithm; chunks go through per-dimension queues by priority ('Queues and
priorities'). The closed-form model (system/collectives.py) and the replay (system/packets.py) both read
these plans and queue rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chakra_core.sim.config import CollectiveImpl, SystemConfig

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL = "all_reduce", "reduce_scatter", "all_gather", "all_to_all"

# Which NPUs run a phase together with a given NPU
SPAN_DIM = "dim"  # those that differ from it in the phase's network dimension only
SPAN_ALL = "all"  # every NPU, as one ring (the one* implementations)
SPAN_GROUP = "group"  # the members of the collective's communicator sub-group


@dataclass(frozen=True)
class Phase:
    dim: int  # network dimension whose queues run it (0 for a ring over all NPUs)
    op: str  # ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER or ALL_TO_ALL on that dimension
    ranks: int  # N
    bytes_in: int  # D: what one chunk brings into the phase
    duration: int | None  # ns, the same on every rank; None where ranks differ (replayed message by message)
    queue_half: str  # "all", "lower" (clockwise) or "upper" (anticlockwise) queues of the dimension
    impl: CollectiveImpl = CollectiveImpl("ring")
    span: str = SPAN_DIM


@dataclass(frozen=True)
class CollectivePlan:
    op: str
    size: int
    chunk_bytes: int
    chunks: int
    phases: tuple[Phase, ...]  # the phases every chunk runs, in order
    endpoint_delay: int = 10  # e of this collective's packets (a sub-group's rings use a fixed 10 ns)
    group: tuple[int, ...] | None = None  # the members of a sub-group, in ring order; None: every NPU

    @property
    def symmetric(self) -> bool:
        """Every phase takes the same closed-form time on every rank: the collective is a flow shop."""
        return all(phase.duration is not None for phase in self.phases)


def chunking(op: str, size: int, splits: int, total_npus: int) -> tuple[int, int]:
    """(bytes per chunk, chunk count): every chunk carries the same bytes, the last one too
    (docs/simulator.md, 'Chunks').

    A collective smaller than `splits` bytes (all-gather only; the others are raised to
    one byte per NPU per chunk) gets `splits` chunks of 0 bytes; ASTRA-sim leaves it undefined.
    """
    chunk = size // splits
    if op != ALL_GATHER and chunk < total_npus:
        chunk = total_npus
        size = splits * chunk
    if chunk == 0:
        return 0, splits
    return chunk, -(-size // chunk)


def local_reduction(size: int, local_mem_bw_gbps: float) -> int:
    """p(x): one write and two reads of x bytes through local memory, each truncated
    (docs/simulator.md, 'Endpoint delay and local reduction')."""
    return 3 * math.floor(size / (local_mem_bw_gbps * 1e9) * 1e9)


def message_bytes(op: str, ranks: int, bytes_in: int) -> int:
    """m of the ring-family algorithms (docs/simulator.md, 'Ring', 'Direct'): D/N, except
    all-gather, whose input is per NPU."""
    return bytes_in if op == ALL_GATHER else bytes_in // ranks


def slots_per_queue(system: SystemConfig) -> int:
    """C: the streams one queue runs at once, ceil(active chunks per dimension / queues)."""
    return -(-system.active_chunks_per_dim // system.num_queues_per_dim)


def queue_choices(plan: CollectivePlan, queues_per_dim: int) -> list[list[int]]:
    """The queue of every phase of every chunk, fixed at creation: round robin over the
    dimension's queues, or over the lower (clockwise) / upper (anticlockwise) half."""
    counters: dict[tuple[int, str], int] = {}
    lower = max(1, queues_per_dim // 2)
    choices = []
    for _ in range(plan.chunks):
        chunk_queues = []
        for phase in plan.phases:
            if phase.queue_half == "lower":
                pool = range(lower)
            elif phase.queue_half == "upper":
                pool = range(queues_per_dim - lower if queues_per_dim > 1 else 0, queues_per_dim)
            else:
                pool = range(queues_per_dim)
            key = (phase.dim, phase.queue_half)
            turn = counters.get(key, 0)
            counters[key] = turn + 1
            chunk_queues.append(pool[turn % len(pool)])
        choices.append(chunk_queues)
    return choices


def ring_direction(queue: int, queues_per_dim: int) -> int:
    """+1 (clockwise) for the lower half of a dimension's queues, -1 for the upper half."""
    return 1 if queue < max(1, queues_per_dim // 2) else -1


def phase_directions(plan: CollectivePlan, phase: int, queues_per_dim: int) -> set[int]:
    """The ring directions the chunks of one phase of the plan run in."""
    return {ring_direction(chunk[phase], queues_per_dim) for chunk in queue_choices(plan, queues_per_dim)}
