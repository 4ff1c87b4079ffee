"""ASTRA-sim's system layer for one collective, congestion-unaware (ASTRA_SIM_MODEL_FACTS.md 2-3).

A collective of S bytes is cut into K chunks ("streams"). Each chunk runs a list of phases,
one per logical dimension (reduce-scatter, all-reduce, all-gather or all-to-all on that
dimension, with that dimension's algorithm); a phase's duration depends only on the
algorithm, the phase type, the ranks N, the bytes D it starts with and the dimension's
parameters, so it has a closed form (section 3). Chunks move through per-dimension queues
that run at most C chunks at once, ordered by priority (section 2.4): the collective is a
flow shop, replayed here with a tiny event loop. Everything is in integer ns.

A communicator sub-group (fewer than all NPUs) runs each collective on one ring over its
members, with a fixed 10 ns endpoint delay, as ASTRA-sim does.

doubleBinaryTree all-reduce is replayed message by message (sim/tree.py) on one-dimensional
networks; its members finish at different times (member_durations).

Where ASTRA-sim stops, natural extensions (recorded in CollectiveModel.notes): all-to-all
with halvingDoubling as Bruck's algorithm, halvingDoubling on a non-power-of-two N with the
extra ranks folded in, doubleBinaryTree on any N with the same in-order trees.

What this module does not model yet (it raises SimulationError naming it): direct with a
window below N-1, doubleBinaryTree on several dimensions, oneDirect / oneHalvingDoubling,
and sub-groups whose ring neighbours are not all equally far apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from chakra_core.sim.config import CollectiveImpl, NetworkConfig, NetworkDim, SystemConfig
from chakra_core.sim import tree
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue, insert_by_priority
from chakra_core.sim.network import UnawareNetwork, hops, message_delay

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL = "all_reduce", "reduce_scatter", "all_gather", "all_to_all"


@dataclass(frozen=True)
class Phase:
    dim: int  # network dimension whose queues run it (0 for a ring over all NPUs)
    op: str  # ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER or ALL_TO_ALL on that dimension
    ranks: int  # N
    bytes_in: int  # D: what one chunk brings into the phase
    duration: int  # ns
    queue_half: str  # "all", "lower" (clockwise) or "upper" (anticlockwise) queues of the dimension


@dataclass(frozen=True)
class CollectivePlan:
    op: str
    size: int
    chunk_bytes: int
    chunks: int
    phases: tuple[Phase, ...]  # the phases every chunk runs, in order


def chunking(op: str, size: int, splits: int, total_npus: int) -> tuple[int, int]:
    """(bytes per chunk, chunk count): every chunk carries the same bytes, the last one too (2.2).

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
    """p(x): one write and two reads of x bytes through local memory, each truncated (2.5)."""
    return 3 * math.floor(size / (local_mem_bw_gbps * 1e9) * 1e9)


HD_ALL_TO_ALL_NOTE = ("all-to-all with halvingDoubling (ASTRA-sim refuses it) timed as Bruck's algorithm: "
                      "ceil(log2 N) steps of D/2 to the rank 2^k away")
HD_FOLD_NOTE = ("halvingDoubling on a non-power-of-two N (ASTRA-sim hangs) timed with the extra ranks folded in: "
                "one exchange of D before and after the power-of-two core")
DBT_ANY_N_NOTE = "doubleBinaryTree on a non-power-of-two N (ASTRA-sim crashes) uses the same in-order trees"


class PhaseTimer:
    """Closed-form phase durations for one system configuration (section 3).

    `notes` collects the modelling choices beyond ASTRA-sim that were used."""

    def __init__(self, system: SystemConfig, endpoint_delay: int | None = None):
        self.notes: set[str] = set()
        self.e = system.endpoint_delay if endpoint_delay is None else endpoint_delay
        self.mem_bw = system.local_mem_bw_gbps

    def p(self, size: int) -> int:
        return local_reduction(size, self.mem_bw)

    def duration(self, impl: CollectiveImpl, op: str, n: int, d_in: int, dim: NetworkDim, neighbour_hops: int) -> int:
        kind = impl.kind
        if kind in ("ring", "oneRing"):
            return self.ring(op, n, d_in, dim, neighbour_hops)
        if kind == "direct":
            return self.direct(op, n, d_in, dim, impl.window)
        if kind == "halvingDoubling":
            return self.halving_doubling(op, n, d_in, dim)
        raise SimulationError(f"collective implementation {impl.name!r} is not modelled yet")

    def ring(self, op: str, n: int, d_in: int, dim: NetworkDim, h: int) -> int:
        e = self.e
        m = d_in if op == ALL_GATHER else d_in // n
        d = message_delay(dim, h, m)
        if op == ALL_REDUCE:
            return e + 2 * (n - 1) * (d + e) + (n - 1) * self.p(m)
        if op == REDUCE_SCATTER:
            return e + (n - 1) * (d + e + self.p(m))
        if op == ALL_GATHER:
            return e + (n - 1) * (d + e)
        return e + n * (n - 1) // 2 * (d + e)  # all-to-all: a relay of D/N messages to the neighbour

    def direct(self, op: str, n: int, d_in: int, dim: NetworkDim, window: int | None) -> int:
        if window is not None and window < n - 1:
            raise SimulationError(f"direct with window {window} < N-1 = {n - 1} is not modelled yet")
        e = self.e
        m = d_in if op == ALL_GATHER else d_in // n
        to_peer = [message_delay(dim, hops(dim, 0, k), m) for k in range(1, n)]  # peer k positions away
        farthest = max(to_peer)
        if op in (ALL_GATHER, ALL_TO_ALL):
            return 2 * e + farthest
        p = self.p(m)
        if op == REDUCE_SCATTER:
            return 2 * e + p + farthest
        # all-reduce: round 2 waits for every round-1 arrival (t*); each ready event from then
        # on releases the packets accumulated so far, the j-th going to the peer j away
        ready = sorted(2 * e + p + d for d in to_peer)
        all_arrived = e + farthest
        release = next(g for g in ready if g >= all_arrived)
        return max(max(g, release) + to_peer[j] for j, g in enumerate(ready)) + e

    def halving_doubling(self, op: str, n: int, d_in: int, dim: NetworkDim) -> int:
        e = self.e
        if op == ALL_TO_ALL:  # beyond ASTRA-sim (it refuses): Bruck's log2 steps of D/2 each
            self.notes.add(HD_ALL_TO_ALL_NOTE)
            steps = [(d_in // 2, 1 << k) for k in range((n - 1).bit_length())]
            return e + sum(message_delay(dim, hops(dim, 0, r), m) + e for m, r in steps)
        levels = n.bit_length() - 1
        core = 1 << levels
        if core != n:  # beyond ASTRA-sim (it hangs): fold the extra ranks in, run the core, hand back
            self.notes.add(HD_FOLD_NOTE)
            fold = message_delay(dim, hops(dim, 0, core), d_in) + e
            return 2 * fold + (self.p(d_in) if op != ALL_GATHER else 0) + self.halving_doubling(op, core, d_in, dim)
        halving = [(d_in >> (k + 1), 1 << k) for k in range(levels)]  # (message bytes, partner distance)
        if op == ALL_REDUCE:
            steps = halving + halving[::-1]
        elif op == REDUCE_SCATTER:
            steps = halving
        else:  # all-gather: doubling sizes, partners from far to near
            steps = [(d_in << k, n >> (k + 1)) for k in range(levels)]
        e = self.e
        total = e + sum(message_delay(dim, hops(dim, 0, r), m) + e for m, r in steps)
        if op != ALL_GATHER:  # packets 2..L reduce, each at its own message size
            total += sum(self.p(m) for m, _ in steps[1:levels])
        return total


class CollectiveModel:
    """Plans and times collectives for one network and system configuration, with a cache:
    a training trace repeats the same few collectives thousands of times."""

    # ASTRA-sim runs a sub-group's collective on rings it builds for the group, whose
    # endpoint delay is fixed, whatever the system file says (facts 2.5)
    GROUP_ENDPOINT_DELAY = 10

    def __init__(self, network: NetworkConfig, system: SystemConfig):
        self.network = network
        self.system = system
        self.timer = PhaseTimer(system)
        self.group_timer = PhaseTimer(system, self.GROUP_ENDPOINT_DELAY)
        self.links = UnawareNetwork(network)
        self.plan = lru_cache(maxsize=4096)(self._plan)
        self.duration = lru_cache(maxsize=4096)(self._duration)
        self.member_durations = lru_cache(maxsize=4096)(self._member_durations)

    @property
    def notes(self) -> list[str]:
        """Choices beyond ASTRA-sim that the collectives timed so far needed."""
        return sorted(self.timer.notes | self.group_timer.notes)

    def implementations(self, op: str) -> tuple[CollectiveImpl, ...]:
        return {
            ALL_REDUCE: self.system.all_reduce,
            REDUCE_SCATTER: self.system.reduce_scatter,
            ALL_GATHER: self.system.all_gather,
            ALL_TO_ALL: self.system.all_to_all,
        }[op]

    def _logical_dims(self, op: str, involved: tuple[bool, ...] | None) -> list[tuple[int, CollectiveImpl, int, int]]:
        """(network dim, implementation, ranks, neighbour hops) of every active logical dimension."""
        impls = self.implementations(op)
        dims = self.network.dims
        if len(impls) == 1 and impls[0].kind == "oneRing":
            return [(0, impls[0], self.network.npus, self._one_ring_hops())]
        active = []
        for i, impl in enumerate(impls):
            if impl.kind.startswith("one"):
                raise SimulationError(f"{impl.name!r} combined with other dimensions is not modelled yet")
            if i >= len(dims) or dims[i].npus == 1 or (involved is not None and not involved[i]):
                continue
            active.append((i, impl, dims[i].npus, hops(dims[i], 0, 1)))
        return active

    def _one_ring_hops(self) -> int:
        """Hops of every neighbour message of one ring over all NPUs, timed in dimension 0."""
        dim0 = self.network.dims[0]
        if dim0.npus == 1:
            raise SimulationError("oneRing over a first dimension of size 1 is not modelled yet")
        return hops(dim0, 0, 1)

    def _group_ring(self, op: str, group: tuple[int, ...]) -> list[tuple[int, CollectiveImpl, int, int]]:
        """The one logical dimension of a sub-group: a ring over its members in the given order.

        Exact when every neighbour pair of the ring is the same distance apart in the same
        network dimension (then every member runs the same schedule); other groups are refused.
        """
        impl = self.implementations(op)[0]
        if impl.kind not in ("ring", "oneRing"):
            raise SimulationError(f"{impl.name!r} on a communicator sub-group is not modelled yet (ring is)")
        routes = {self.links.route(a, b) for a, b in zip(group, group[1:] + group[:1])}
        routes |= {self.links.route(b, a) for a, b in zip(group, group[1:] + group[:1])}
        if len(routes) != 1:
            raise SimulationError(f"communicator group {list(group)}: its ring's neighbours are not all equally far "
                                  "apart in the network; such groups are not modelled yet")
        (dim, hop_count), = routes
        return [(dim, CollectiveImpl.parse("ring"), len(group), hop_count)]

    def _plan(self, op: str, size: int, involved: tuple[bool, ...] | None = None,
              group: tuple[int, ...] | None = None) -> CollectivePlan:
        """The phases of one collective; `group` (members, fewer than all NPUs) runs on its own ring."""
        chunk, count = chunking(op, size, self.system.dataset_splits, self.network.npus)
        logical = self._group_ring(op, group) if group else self._logical_dims(op, involved)
        timer = self.group_timer if group else self.timer
        dims = self.network.dims
        phases: list[Phase] = []
        d = chunk

        def add(entry, phase_op: str, half: str) -> None:
            nonlocal d
            net_dim, impl, n, h = entry
            phases.append(Phase(net_dim, phase_op, n, d, timer.duration(impl, phase_op, n, d, dims[net_dim], h), half))
            if phase_op == REDUCE_SCATTER:
                d //= n
            elif phase_op == ALL_GATHER:
                d *= n

        if op == ALL_REDUCE and self.system.collective_optimization == "localBWAware" and logical:
            *lower, last = logical
            for entry in lower:
                add(entry, REDUCE_SCATTER, "lower")
            add(last, ALL_REDUCE, "lower")
            for entry in reversed(lower):
                add(entry, ALL_GATHER, "upper")
        elif op == ALL_GATHER:
            for entry in reversed(logical):
                add(entry, ALL_GATHER, "all")
        else:  # baseline all-reduce, reduce-scatter, all-to-all: ascending, each on the running size
            for entry in logical:
                add(entry, op, "all")
        return CollectivePlan(op, size, chunk, count, tuple(phases))

    def _member_durations(self, op: str, size: int, involved: tuple[bool, ...] | None = None,
                          group: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """ns each member (in group order, or NPU order) takes: the same for every member of a
        symmetric algorithm; doubleBinaryTree members finish at different times."""
        if self._uses_tree(op):
            return self._tree_durations(op, size, involved, group)
        members = len(group) if group else self.network.npus
        return (self.duration(op, size, involved, group),) * members

    def _uses_tree(self, op: str) -> bool:
        return any(impl.kind == "doubleBinaryTree" for impl in self.implementations(op))

    def _tree_durations(self, op: str, size: int, involved, group) -> tuple[int, ...]:
        """doubleBinaryTree (sim/tree.py): an all-reduce over a one-dimensional network, as checked in ASTRA-sim."""
        if op != ALL_REDUCE:
            raise SimulationError(f"doubleBinaryTree is an all-reduce algorithm; it cannot run {op}")
        active = [i for i, d in enumerate(self.network.dims) if d.npus > 1 and (involved is None or involved[i])]
        if group or len(active) != 1 or len(self.implementations(op)) != 1:
            raise SimulationError("doubleBinaryTree is modelled on a one-dimensional network without sub-groups only")
        chunk, count = chunking(op, size, self.system.dataset_splits, self.network.npus)
        slots = -(-self.system.active_chunks_per_dim // self.system.num_queues_per_dim)
        if self.network.npus & (self.network.npus - 1):
            self.timer.notes.add(DBT_ANY_N_NOTE)
        return tree.replay(self.network.npus, count, chunk, self.timer.e, self.timer.p(chunk), self.links.delay,
                           slots, chunk_priorities(self.system, count))

    def _duration(self, op: str, size: int, involved: tuple[bool, ...] | None = None,
                  group: tuple[int, ...] | None = None) -> int:
        """ns until the last member finishes."""
        if self._uses_tree(op):
            return max(self._tree_durations(op, size, involved, group))
        plan = self.plan(op, size, involved, group)
        return run_flow_shop(plan, self.system)


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


def chunk_priorities(system: SystemConfig, chunks: int) -> list[int]:
    """Each new chunk's priority: LIFO counts up, FIFO down (higher runs first); EXPLICIT would
    take the node's comm_priority, the same for all of a collective's chunks."""
    if system.scheduling_policy == "EXPLICIT":
        return [0] * chunks
    step = -1 if system.scheduling_policy == "FIFO" else 1
    return [step * i for i in range(chunks)]


def run_flow_shop(plan: CollectivePlan, system: SystemConfig, priorities: list[int] | None = None) -> int:
    """ns from issue to the end of the last chunk's last phase, replaying the queues (2.4).

    Every chunk is created at tick 0 and placed in its first queue at once (the first starts
    immediately); a queue runs at most C chunks, the others wait by priority (higher first,
    FIFO among equals). When a phase ends, at that tick: the chunk joins its next queue, the
    old queue starts waiters, then the new queue starts waiters.
    """
    if not plan.phases:
        return 0
    q_per_dim = system.num_queues_per_dim
    slots = -(-system.active_chunks_per_dim // q_per_dim)
    if priorities is None:
        priorities = chunk_priorities(system, plan.chunks)
    choices = queue_choices(plan, q_per_dim)
    running: dict[tuple[int, int], int] = {}
    waiting: dict[tuple[int, int], list[int]] = {}
    events = EventQueue()  # phase ends: (tick, chunk, phase index)
    finish = 0

    def queue_of(chunk: int, phase: int) -> tuple[int, int]:
        return plan.phases[phase].dim, choices[chunk][phase]

    def enqueue(chunk: int, phase: int) -> None:
        insert_by_priority(waiting.setdefault(queue_of(chunk, phase), []), (chunk, phase),
                           lambda entry: priorities[entry[0]])

    def start_waiters(queue: tuple[int, int], now: int) -> None:
        line = waiting.get(queue, [])
        while line and running.get(queue, 0) < slots:
            chunk, phase = line.pop(0)
            running[queue] = running.get(queue, 0) + 1
            events.at(now + plan.phases[phase].duration, chunk, phase)

    for chunk in range(plan.chunks):
        enqueue(chunk, 0)
        start_waiters(queue_of(chunk, 0), 0)
    while events:
        now, chunk, phase = events.pop()
        old = queue_of(chunk, phase)
        running[old] -= 1
        if phase + 1 < len(plan.phases):
            enqueue(chunk, phase + 1)
            start_waiters(old, now)
            start_waiters(queue_of(chunk, phase + 1), now)
        else:
            finish = max(finish, now)
            start_waiters(old, now)
    return finish
