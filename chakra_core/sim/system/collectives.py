"""The system layer's timing of one collective alone (docs/simulator.md, 'The model').

A collective of S bytes is cut into K chunks ("streams"). Each chunk runs a list of phases,
one per logical dimension (reduce-scatter, all-reduce, all-gather or all-to-all on that
dimension, with that dimension's algorithm). Where every rank of a phase takes the same
time, that time depends only on the algorithm, the phase type, the ranks N, the bytes D it
starts with and the dimension's parameters, and has a closed form (docs/simulator.md,
'Collective algorithms'); chunks move
through per-dimension queues that run at most C chunks at once, ordered by priority
('Queues and priorities'), so the collective is a flow shop. Everything is in integer ns.

Where ranks differ or there is no closed form (doubleBinaryTree, halvingDoubling on a
non-power-of-two N, directK below N-1, a sub-group ring whose neighbours are unevenly far
apart) or members issue the collective at different ticks, it is replayed message by
message (system/packets.py) on the congestion-unaware network; each member gets its own finish.
Where that replay is the same whatever the issue ticks, each finish is read from its
holding table (system/holding.py) instead. AwareCollectiveModel replays every collective on the
network its back-end gives it (sim/backends.py: the congestion-aware links of network/aware.py).

A communicator sub-group (fewer than all NPUs) runs each collective on one ring over its
members, with a fixed 10 ns endpoint delay, as ASTRA-sim does.

Where ASTRA-sim stops, natural extensions (recorded in CollectiveModel.notes): all-to-all
with halvingDoubling as Bruck's algorithm, halvingDoubling on a non-power-of-two N with the
extra ranks folded in, doubleBinaryTree on any N with the same in-order trees and as the
all-reduce algorithm of one dimension of several.

What this module does not model yet (it raises SimulationError naming it): direct
all-reduce with a window below N-1, oneDirect / oneHalvingDoubling and one* combined with
other dimensions, and algorithms other than ring on sub-groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from chakra_core.sim.config import CollectiveImpl, NetworkConfig, NetworkDim, SystemConfig
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.interface import Network
from chakra_core.sim.network.unaware import UnawareNetwork, hops, message_delay
from chakra_core.sim.system.holding import HoldingTable, measure
from chakra_core.sim.system.plan import (  # noqa: F401  (re-exported: the simulator's public names)
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    SPAN_ALL,
    SPAN_DIM,
    SPAN_GROUP,
    CollectivePlan,
    Phase,
    chunking,
    local_reduction,
    message_bytes,
    slots_per_queue,
)
from chakra_core.sim.system.packets import Replay, halving_doubling_steps, replay_alone

HD_ALL_TO_ALL_NOTE = ("all-to-all with halvingDoubling (ASTRA-sim refuses it) timed as Bruck's algorithm: "
                      "ceil(log2 N) steps of D/2 to the rank 2^k away")
HD_FOLD_NOTE = ("halvingDoubling on a non-power-of-two N (ASTRA-sim hangs) timed with the extra ranks folded in: "
                "each sends its D to a core rank before, and gets D back after, the power-of-two core")
DBT_ANY_N_NOTE = "doubleBinaryTree on a non-power-of-two N (ASTRA-sim crashes) uses the same in-order trees"
DBT_MULTI_DIM_NOTE = ("doubleBinaryTree on a network of several dimensions (checked in ASTRA-sim on one only): "
                      "each of its all-reduce phases runs the trees over that dimension's NPUs")


class PhaseTimer:
    """Closed-form phase durations for one system configuration (docs/simulator.md, 'Collective
    algorithms'), where every rank
    of the phase takes the same time; None where there is no closed form (the phase is replayed).

    `notes` collects the modelling choices beyond ASTRA-sim that were used."""

    def __init__(self, system: SystemConfig, endpoint_delay: int | None = None):
        self.notes: set[str] = set()
        self.e = system.endpoint_delay if endpoint_delay is None else endpoint_delay
        self.mem_bw = system.local_mem_bw_gbps

    def p(self, size: int) -> int:
        return local_reduction(size, self.mem_bw)

    def duration(self, impl: CollectiveImpl, op: str, n: int, d_in: int, dim: NetworkDim,
                 neighbour_hops: int | None) -> int | None:
        """neighbour_hops: hops between ring neighbours, the same for every pair; None where they differ."""
        kind = impl.algorithm
        if kind == "doubleBinaryTree":
            if op != ALL_REDUCE:
                raise SimulationError(f"doubleBinaryTree is an all-reduce algorithm; it cannot run {op}")
            if n & (n - 1):
                self.notes.add(DBT_ANY_N_NOTE)
            return None  # its ranks finish at different times
        if kind == "ring":
            return None if neighbour_hops is None else self.ring(op, n, d_in, dim, neighbour_hops)
        if kind == "direct":
            return self.direct(op, n, d_in, dim, impl.window)
        if kind == "halvingDoubling":
            return self.halving_doubling(op, n, d_in, dim)
        raise SimulationError(f"collective implementation {impl.name!r} is not modelled yet")

    def ring(self, op: str, n: int, d_in: int, dim: NetworkDim, h: int) -> int:
        e = self.e
        m = message_bytes(op, n, d_in)
        d = message_delay(dim, h, m)
        if op == ALL_REDUCE:
            return e + 2 * (n - 1) * (d + e) + (n - 1) * self.p(m)
        if op == REDUCE_SCATTER:
            return e + (n - 1) * (d + e + self.p(m))
        if op == ALL_GATHER:
            return e + (n - 1) * (d + e)
        return e + n * (n - 1) // 2 * (d + e)  # all-to-all: a relay of D/N messages to the neighbour

    def direct(self, op: str, n: int, d_in: int, dim: NetworkDim, window: int | None) -> int | None:
        if window is not None and window < n - 1:
            if op == ALL_REDUCE:  # ASTRA-sim's gate of the last round is known for a window of N-1 only
                raise SimulationError(f"direct all-reduce with window {window} < N-1 = {n - 1} is not modelled yet: "
                                      "when its last round of sends may start is known for a window of N-1 only")
            return None  # rounds of `window` packets, replayed packet by packet (docs/simulator.md)
        e = self.e
        m = message_bytes(op, n, d_in)
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

    def halving_doubling(self, op: str, n: int, d_in: int, dim: NetworkDim) -> int | None:
        if op == ALL_TO_ALL:  # beyond ASTRA-sim (it refuses): Bruck's log2 steps of D/2 each
            self.notes.add(HD_ALL_TO_ALL_NOTE)
        elif n & (n - 1):  # beyond ASTRA-sim (it hangs): the extra ranks fold in; ranks then differ
            self.notes.add(HD_FOLD_NOTE)
            return None
        # serial steps, the same on every rank: rank 0's, each d + e, plus the reductions
        e = self.e
        return e + sum(message_delay(dim, hops(dim, 0, dst), size) + e + (self.p(reduced) if reduced else 0)
                       for dst, _, size, reduced in halving_doubling_steps(op, n, 0, d_in))


class CollectiveModel:
    """Plans and times collectives for one network and system configuration, with a cache:
    a training trace repeats the same few collectives thousands of times.

    A plan whose phases all have closed forms is a flow shop (run_flow_shop); any other, or
    members that issue the collective at different ticks, is replayed message by message
    (system/packets.py) on the congestion-unaware network, or read from its holding table (system/holding.py)."""

    # ASTRA-sim runs a sub-group's collective on rings it builds for the group, whose
    # endpoint delay is fixed at 10 ns, whatever the system file says (docs/simulator.md,
    # 'Endpoint delay and local reduction')
    GROUP_ENDPOINT_DELAY = 10

    def __init__(self, network: NetworkConfig, system: SystemConfig, comm_scale: float = 1.0,
                 replay_network: Callable[..., Network] | None = None):
        """comm_scale multiplies communication times (a what-if knob): a closed form once, a
        replay every message, endpoint and reduction time, each truncated. replay_network(events,
        free=None, record=False): the network replays run on, from its back-end (sim/backends.py;
        default the congestion-unaware one, a fixed delay each), whose links are busy until `free`
        and which, with record, records the tick a message first entered each link (`entered`)."""
        self.network = network
        self.replay_network = replay_network or (lambda events, free=None, record=False:
                                                 UnawareNetwork(network, comm_scale))
        self.system = system
        self.comm_scale = comm_scale
        self.timer = PhaseTimer(system)
        self.group_timer = PhaseTimer(system, self.GROUP_ENDPOINT_DELAY)
        self.links = UnawareNetwork(network)
        self.plan = lru_cache(maxsize=4096)(self._plan)
        self.duration = lru_cache(maxsize=4096)(self._duration)
        self.member_finish = lru_cache(maxsize=4096)(self._member_finish)
        self.holding = lru_cache(maxsize=4096)(self._holding)
        self._ranks: dict[tuple, tuple[int, tuple[int, ...]]] = {}
        self._strides = [1]
        for d in network.dims:
            self._strides.append(self._strides[-1] * d.npus)

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

    def _logical_dims(self, op: str, involved: tuple[bool, ...] | None) -> list[tuple]:
        """(network dim, implementation, ranks, span, neighbour hops) of every active logical dimension."""
        impls = self.implementations(op)
        dims = self.network.dims
        if impls[0].spans_all_npus:
            if len(impls) > 1 or impls[0].kind != "oneRing":
                raise SimulationError(f"{impls[0].name!r}{' combined with other dimensions' if len(impls) > 1 else ''}"
                                      " is not modelled yet (oneRing alone is)")
            return [(0, impls[0], self.network.npus, SPAN_ALL, self._one_ring_hops())]
        active = []
        for i, impl in enumerate(impls):
            if impl.spans_all_npus:
                raise SimulationError(f"{impl.name!r} combined with other dimensions is not modelled yet")
            if i >= len(dims) or dims[i].npus == 1 or (involved is not None and not involved[i]):
                continue
            active.append((i, impl, dims[i].npus, SPAN_DIM, hops(dims[i], 0, 1)))
        return active

    def has_phases(self, op: str, involved: tuple[bool, ...] | None) -> bool:
        """Whether a collective over all NPUs has a dimension to run on (an unmodelled
        implementation answers True: its error comes when the collective is timed)."""
        try:
            return bool(self._logical_dims(op, involved))
        except SimulationError:
            return True

    def _one_ring_hops(self) -> int:
        """Hops of every neighbour message of one ring over all NPUs, timed in dimension 0."""
        dim0 = self.network.dims[0]
        if dim0.npus == 1:
            raise SimulationError("oneRing over a first dimension of size 1 is not modelled yet")
        return hops(dim0, 0, 1)

    def _group_ring(self, op: str, group: tuple[int, ...]) -> list[tuple]:
        """The one logical dimension of a sub-group: a ring over its members in the given order.

        When every neighbour pair of the ring is the same distance apart in the same network
        dimension, every member runs the same schedule (closed form); otherwise members
        wait for one another differently and the ring is replayed message by message.
        """
        impl = self.implementations(op)[0]
        if impl.algorithm != "ring":
            raise SimulationError(f"{impl.name!r} on a communicator sub-group is not modelled yet (ring is)")
        pairs = list(zip(group, group[1:] + group[:1]))
        routes = {self.links.route(a, b) for a, b in pairs} | {self.links.route(b, a) for a, b in pairs}
        (dim, hop_count), *others = sorted(routes)
        return [(dim, CollectiveImpl("ring"), len(group), SPAN_GROUP, None if others else hop_count)]

    def ranks(self, phase: Phase, npu: int, group: tuple[int, ...] | None) -> tuple[int, tuple[int, ...]]:
        """(the NPU's rank in the phase, the phase's NPUs by rank)."""
        key = (phase.span, phase.dim, npu, group if phase.span == SPAN_GROUP else None)
        found = self._ranks.get(key)
        if found is None:
            if phase.span == SPAN_GROUP:
                found = (group.index(npu), group)
            elif phase.span == SPAN_ALL:
                found = (npu, tuple(range(self.network.npus)))
            else:  # the NPUs that differ from this one in the phase's dimension only
                stride, n = self._strides[phase.dim], self.network.dims[phase.dim].npus
                coord = npu // stride % n
                base = npu - coord * stride
                found = (coord, tuple(base + j * stride for j in range(n)))
            self._ranks[key] = found
        return found

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
            net_dim, impl, n, span, h = entry
            duration = timer.duration(impl, phase_op, n, d, dims[net_dim], h)
            phases.append(Phase(net_dim, phase_op, n, d, duration, half, impl, span))
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
        if len(phases) > 1 and any(phase.impl.algorithm == "doubleBinaryTree" for phase in phases):
            timer.notes.add(DBT_MULTI_DIM_NOTE)
        return CollectivePlan(op, size, chunk, count, tuple(phases), timer.e, group)

    def member_durations(self, op: str, size: int, involved: tuple[bool, ...] | None = None,
                         group: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """ns each member (in group order, or NPU order) takes when all issue it together."""
        return self.member_finish(op, size, involved, group, None)

    def _member_finish(self, op: str, size: int, involved: tuple[bool, ...] | None,
                       group: tuple[int, ...] | None, offsets: tuple[int, ...] | None) -> tuple[int, ...]:
        """Each member's finish tick (group order, or NPU order) when member i issues the
        collective at tick offsets[i] (None: all at 0). The same for every member of a flow
        shop issued together; otherwise from its holding table where it has one, else
        replayed, with ASTRA-sim's message holding."""
        plan = self.plan(op, size, involved, group)
        if plan.symmetric and offsets is None:
            return (self.duration(op, size, involved, group),) * (len(group) if group else self.network.npus)
        table = None if offsets is None else self.holding(op, size, involved, group)
        if table is not None:
            return table.finishes(offsets)
        return self.replay_alone(plan, offsets)[0]

    def replayed(self, op: str, size: int, involved: tuple[bool, ...] | None = None,
                 group: tuple[int, ...] | None = None, offsets: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """member_finish from the message-level replay, whatever shortcut would apply (to check them)."""
        return self.replay_alone(self.plan(op, size, involved, group), offsets)[0]

    def _offsets_only_shift(self, plan: CollectivePlan) -> bool:
        """Whether every event of the replay waits for the same earlier events whatever the
        members' issue ticks: one phase, one chunk at a time per queue (chunks then run in the
        order they were queued in), one packet in flight (not direct with P > 1, whose
        sends go out in the order packets happen to become ready). Each event is then the
        maximum of earlier events plus constants, so each finish is max_j (offset_j + L_ij)."""
        if len(plan.phases) != 1 or slots_per_queue(self.system) != 1:
            return False
        phase = plan.phases[0]
        return phase.impl.algorithm != "direct" or phase.ranks == 2

    def _holding(self, op: str, size: int, involved: tuple[bool, ...] | None,
                 group: tuple[int, ...] | None) -> HoldingTable | None:
        """The collective's holding table (system/holding.py) where one applies (_offsets_only_shift).
        A sub-group is the group moved along the torus from one whose first member is NPU 0:
        that group's table, its links moved (one measurement per shape of group)."""
        if not self._offsets_only_shift(self.plan(op, size, involved, group)):
            return None
        if group is not None and group[0] != 0:
            by = self.network.coords(group[0])
            back = tuple(-c for c in by)
            table = self.holding(op, size, involved, tuple(self.moved_npu(npu, back) for npu in group))
            return None if table is None else table.moved(by)
        return measure(self, op, size, involved, group)

    def moved_npu(self, npu: int, by: tuple[int, ...]) -> int:
        """The NPU `by` coordinates away from `npu` along the torus of dimensions."""
        return sum((c + b) % d.npus * stride for c, b, d, stride in
                   zip(self.network.coords(npu), by, self.network.dims, self._strides))

    def _duration(self, op: str, size: int, involved: tuple[bool, ...] | None = None,
                  group: tuple[int, ...] | None = None) -> int:
        """ns until the last member finishes, all issuing it together."""
        plan = self.plan(op, size, involved, group)
        if plan.symmetric:
            ns = run_flow_shop(plan, self.system)
            return ns if self.comm_scale == 1.0 else math.floor(ns * self.comm_scale)
        return max(self.member_durations(op, size, involved, group))

    def replay_alone(self, plan: CollectivePlan, offsets: tuple[int, ...] | None = None,
                     link_free: dict[tuple, int] | None = None) -> tuple[tuple[int, ...], dict[tuple, int]]:
        """Each member's finish when member i issues the collective at offsets[i] (default 0)
        and nothing else uses the network, whose links are busy until link_free (aware); and
        the tick each link it used is free from afterwards."""
        events = EventQueue()
        network = self.replay_network(events, link_free)
        members = plan.group or tuple(range(self.network.npus))
        replay = Replay(self.system, self.ranks, events, network, self.timer.p, self.comm_scale)
        finish = replay_alone(replay, plan, members, offsets)
        self.timer.notes.update(network.notes)
        return finish, network.free


def run_flow_shop(plan: CollectivePlan, system: SystemConfig) -> int:
    """ns from issue to the end of the last chunk's last phase, when every phase takes its
    closed-form time on every rank: then one NPU's queues stand for all (docs/simulator.md,
    'Queues and priorities'), and the
    replay of its chunks with phases of fixed duration is the flow shop."""
    if not plan.phases:
        return 0
    events = EventQueue()
    replay = Replay(system, lambda phase, npu, group: (0, (npu,)), events, network=None, p=None)
    (finish,) = replay_alone(replay, plan, (0,), None, fixed=True)
    return finish


class AwareCollectiveModel(CollectiveModel):
    """Collectives on a network whose messages contend for links (its replay_network: required),
    each timed alone (no other traffic)."""

    def __init__(self, network: NetworkConfig, system: SystemConfig, comm_scale: float = 1.0,
                 replay_network: Callable[..., Network] | None = None):
        if replay_network is None:
            raise TypeError("AwareCollectiveModel replays on its back-end's network: build it with "
                            "sim.backends.backend(mode).collectives(...)")
        super().__init__(network, system, comm_scale, replay_network)

    def _member_finish(self, op: str, size: int, involved, group, offsets) -> tuple[int, ...]:
        # contention couples chunks and NPUs: always message by message (a job's runner,
        # system/live.py, knows where a holding table is exact)
        return self.replay_alone(self.plan(op, size, involved, group), offsets)[0]

    def _duration(self, op: str, size: int, involved=None, group=None) -> int:
        return max(self.member_durations(op, size, involved, group))
