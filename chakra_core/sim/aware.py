"""ASTRA-sim's congestion-aware backend for one collective (ASTRA_SIM_MODEL_FACTS.md section 5).

Every directed link is a FIFO server and messages are store-and-forward: a message that
starts on a link at t occupies it until t + floor(m / bw) and reaches the next device at
t + floor(lat + m / bw), where it queues for its next link. Routes: Ring, the shorter way
(a tie goes clockwise); FullyConnected, one link per ordered pair; Switch, NPU -> switch ->
NPU. As in ASTRA-sim, only one-dimensional networks.

Because contention couples chunks and NPUs, a collective is replayed message by message:
on every NPU its chunks go through the dimension's queues (active chunks, priorities, as
in the unaware model) and each running chunk follows the ring algorithm's packet machine
(section 3.1): a packet becomes ready after the endpoint delay (plus the local reduction
for reducing packets); a ready packet with sends left sends one message to the next
neighbour and posts the receive from the previous one; each completed receive creates the
next packet; the chunk ends when the packet of its last receive is ready. A message that
arrives before its receive is posted waits for it. The result is each NPU's own finish
time. Other algorithms are not modelled in this mode yet.
"""

from __future__ import annotations

import math
from collections import defaultdict

from chakra_core.sim.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    CollectiveModel,
    SimulationError,
    chunk_priorities,
    queue_choices,
)
from chakra_core.sim.config import NetworkConfig, NetworkDim, SystemConfig, Topology
from chakra_core.sim.events import EventQueue, insert_by_priority


def routes(dim: NetworkDim):
    """route(src, dst) -> the directed links (as hashable tuples) a message crosses."""
    n = dim.npus

    def route(src: int, dst: int) -> list[tuple]:
        if dim.topology == Topology.FULLY_CONNECTED:
            return [(src, dst)]
        if dim.topology == Topology.SWITCH:
            return [(src, "switch"), ("switch", dst)]
        clockwise = (dst - src) % n
        step = 1 if clockwise <= n - clockwise else -1  # the shorter way; a tie goes clockwise
        links, at = [], src
        while at != dst:
            links.append((at, (at + step) % n))
            at = (at + step) % n
        return links

    return route


class AwareNetwork:
    """Send/recv timing in the aware mode: store-and-forward over the route, per hop."""

    def __init__(self, network: NetworkConfig):
        if len(network.dims) != 1:
            raise SimulationError("the congestion-aware model supports one-dimensional networks only, as ASTRA-sim's")
        self.dim = network.dims[0]
        self.route = routes(self.dim)

    def delay(self, src: int, dst: int, size: int) -> int:
        return len(self.route(src, dst)) * math.floor(self.dim.latency_ns + size / self.dim.bytes_per_ns)


class AwareCollectiveModel(CollectiveModel):
    """Per-NPU durations of collectives on a congestion-aware one-dimensional network."""

    def __init__(self, network: NetworkConfig, system: SystemConfig):
        if len(network.dims) != 1:
            raise SimulationError("the congestion-aware model supports one-dimensional networks only, as ASTRA-sim's")
        super().__init__(network, system)

    def _member_durations(self, op: str, size: int, involved=None, group=None) -> tuple[int, ...]:
        if group is not None:
            raise SimulationError("communicator sub-groups are not modelled in the congestion-aware mode yet")
        impls = self.implementations(op)
        if impls[0].kind != "ring":  # doubleBinaryTree included: its down-sends share uplinks
            raise SimulationError(f"{impls[0].name!r} is not modelled in the congestion-aware mode yet (ring is)")
        plan = self.plan(op, size, involved)
        return _Replay(self, plan).run()


class _Replay:
    """One collective, every NPU, message by message."""

    def __init__(self, model: AwareCollectiveModel, plan):
        self.plan = plan
        self.dim = model.network.dims[0]
        self.n = self.dim.npus
        self.system = model.system
        self.timer = model.timer
        self.route = routes(self.dim)
        self.serialization = {}  # bytes -> (ns on a link, ns to the next device)

    def hop_times(self, size: int) -> tuple[int, int]:
        if size not in self.serialization:
            bw = self.dim.bytes_per_ns
            self.serialization[size] = (math.floor(size / bw), math.floor(self.dim.latency_ns + size / bw))
        return self.serialization[size]

    def run(self) -> tuple[int, ...]:
        plan, n, system = self.plan, self.n, self.system
        if not plan.phases:
            return (0,) * n
        (phase,) = plan.phases  # one dimension: one phase per chunk
        op, ranks, d_in = phase.op, phase.ranks, phase.bytes_in
        m = d_in if op == ALL_GATHER else d_in // ranks
        sends_total = {ALL_REDUCE: 2 * (ranks - 1), REDUCE_SCATTER: ranks - 1, ALL_GATHER: ranks - 1,
                       ALL_TO_ALL: ranks * (ranks - 1) // 2}[op]
        reducing_receives = {ALL_REDUCE: ranks - 1, REDUCE_SCATTER: ranks - 1}.get(op, 0)
        e, p = self.timer.e, self.timer.p(m)
        slots = -(-system.active_chunks_per_dim // system.num_queues_per_dim)
        priority = chunk_priorities(system, plan.chunks)
        queue_of = [q[0] for q in queue_choices(plan, system.num_queues_per_dim)]
        # with more than one queue, the upper half of the queues runs its rings anticlockwise
        lower = max(1, system.num_queues_per_dim // 2)
        direction = [1 if q < lower else -1 for q in queue_of]

        events = EventQueue()
        at = events.at

        running = defaultdict(int)  # (npu, queue) -> chunks running
        waiting = defaultdict(list)  # (npu, queue) -> chunks waiting, by priority
        sends_left = {}  # (npu, chunk) -> sends still to make
        receives_done = defaultdict(int)  # (npu, chunk) -> receives completed
        posted = defaultdict(int)  # (npu, chunk) -> receives posted and not yet matched
        arrived = defaultdict(int)  # (npu, chunk) -> messages arrived and not yet received
        link_free = defaultdict(int)
        chunks_left = [plan.chunks] * n
        finish = [0] * n

        def start_waiters(npu: int, queue: int, now: int) -> None:
            line = waiting[(npu, queue)]
            while line and running[(npu, queue)] < slots:
                chunk = line.pop(0)
                running[(npu, queue)] += 1
                sends_left[(npu, chunk)] = sends_total
                at(now + e, "ready", npu, chunk)  # the first, local packet

        def receive(npu: int, chunk: int, now: int) -> None:
            receives_done[(npu, chunk)] += 1
            reduces = receives_done[(npu, chunk)] <= reducing_receives
            at(now + e + (p if reduces else 0), "ready", npu, chunk)

        for npu in range(n):
            for chunk in range(plan.chunks):
                insert_by_priority(waiting[(npu, queue_of[chunk])], chunk, priority.__getitem__)
                start_waiters(npu, queue_of[chunk], 0)

        while events:
            now, kind, *rest = events.pop()
            if kind == "ready":
                npu, chunk = rest
                key = (npu, chunk)
                if sends_left[key]:
                    sends_left[key] -= 1
                    dst = (npu + direction[chunk]) % n
                    at(now, "hop", chunk, npu, dst, self.route(npu, dst), 0)
                    if arrived[key]:  # posting the receive matches a message that was waiting
                        arrived[key] -= 1
                        receive(npu, chunk, now)
                    else:
                        posted[key] += 1
                elif receives_done[key] == sends_total:  # the last receive's packet is ready: chunk done
                    queue = queue_of[chunk]
                    running[(npu, queue)] -= 1
                    chunks_left[npu] -= 1
                    if not chunks_left[npu]:
                        finish[npu] = now
                    start_waiters(npu, queue, now)
            else:  # a message reaches the tail of link `hop` of its route (or its destination)
                chunk, src, dst, links, hop = rest
                if hop == len(links):
                    key = (dst, chunk)
                    if posted[key]:
                        posted[key] -= 1
                        receive(dst, chunk, now)
                    else:
                        arrived[key] += 1
                    continue
                link = links[hop]
                occupy, reach = self.hop_times(m)
                begin = max(now, link_free[link])
                link_free[link] = begin + occupy
                at(begin + reach, "hop", chunk, src, dst, links, hop + 1)
        return tuple(finish)
