"""ASTRA-sim's congestion-aware backend (docs/simulator.md, 'Congestion-aware links'), and its natural
extension to several network dimensions.

Every directed link is a FIFO server and messages are store-and-forward: a message that
starts on a link at t occupies it until t + floor(m / bw) and reaches the next device at
t + floor(lat + m / bw), where it queues for its next link. Links of one dimension: Ring,
two directed links between neighbours, routed the shorter way (a tie goes clockwise);
FullyConnected, one link per ordered pair; Switch, one NPU -> switch and one switch -> NPU
link per NPU.

ASTRA-sim's aware backend stops at one dimension. Here every line of NPUs that differ in one
dimension only has that dimension's links, as in the one-dimensional model, and a message
between NPUs that differ in several dimensions is routed dimension by dimension, lowest
first (so a collective's phase on dimension i uses dimension i's links only).

Collectives are replayed message by message (replay.py) with every algorithm; in a job
(engine.py) all collectives and sends share one AwareFabric, so concurrent traffic contends
for the links it shares. AwareCollectiveModel times one collective alone.
"""

from __future__ import annotations

import math

from chakra_core.sim.collectives import CollectiveModel
from chakra_core.sim.config import NetworkConfig, NetworkDim, Topology
from chakra_core.sim.events import EventQueue

AWARE_MULTI_DIM_NOTE = ("congestion-aware on a network of several dimensions (ASTRA-sim's aware backend takes one): "
                        "each dimension's links as in the one-dimensional model, messages between NPUs that differ in "
                        "several dimensions routed dimension by dimension, lowest first")


def dimension_links(dim: NetworkDim, src: int, dst: int) -> list[tuple]:
    """The directed links (local indices of one line of the dimension) from src to dst."""
    if dim.topology == Topology.FULLY_CONNECTED:
        return [(src, dst)]
    if dim.topology == Topology.SWITCH:
        return [(src, "up"), (dst, "down")]
    n = dim.npus
    clockwise = (dst - src) % n
    step = 1 if clockwise <= n - clockwise else -1  # the shorter way; a tie goes clockwise
    links, at = [], src
    while at != dst:
        links.append((at, (at + step) % n))
        at = (at + step) % n
    return links


class AwareFabric:
    """The links of one network as FIFO store-and-forward servers, on one event queue.

    send(now, src, dst, bytes, deliver, args) calls deliver(arrival, *args). With `scale`
    (the engine's comm_scale) every link time is scaled, then truncated.
    """

    def __init__(self, network: NetworkConfig, events: EventQueue, scale: float = 1.0):
        self.network, self.events, self.scale = network, events, scale
        self.free: dict[tuple, int] = {}  # link -> the tick it is free from
        self._routes: dict[tuple[int, int], tuple] = {}
        self._hop_times: dict[tuple[int, int], tuple[int, int]] = {}
        self._strides = [1]
        for d in network.dims:
            self._strides.append(self._strides[-1] * d.npus)
        self.multi_dim = sum(d.npus > 1 for d in network.dims) > 1
        self.carried = False

    @property
    def notes(self) -> list[str]:
        return [AWARE_MULTI_DIM_NOTE] if self.multi_dim and self.carried else []

    def route(self, src: int, dst: int) -> tuple[tuple[tuple, int], ...]:
        """((link, dimension index), ...) from src to dst: dimension by dimension, lowest first."""
        key = (src, dst)
        found = self._routes.get(key)
        if found is None:
            at, to = list(self.network.coords(src)), self.network.coords(dst)
            links = []
            for i, dim in enumerate(self.network.dims):
                if at[i] != to[i]:
                    line = sum(c * s for j, (c, s) in enumerate(zip(at, self._strides)) if j != i)
                    links += [((i, line) + link, i) for link in dimension_links(dim, at[i], to[i])]
                    at[i] = to[i]
            found = self._routes[key] = tuple(links)
        return found

    def hop_times(self, dim_index: int, size: int) -> tuple[int, int]:
        """(ns the message occupies a link, ns until it reaches the next device)."""
        key = (dim_index, size)
        found = self._hop_times.get(key)
        if found is None:
            dim = self.network.dims[dim_index]
            occupy, reach = size / dim.bytes_per_ns, dim.latency_ns + size / dim.bytes_per_ns
            found = self._hop_times[key] = (math.floor(occupy * self.scale), math.floor(reach * self.scale))
        return found

    def send(self, now: int, src: int, dst: int, size: int, deliver, args: tuple) -> None:
        self.carried = True
        self.events.call(now, self._hop, self.route(src, dst), 0, size, deliver, args)

    def _hop(self, now: int, route: tuple, hop: int, size: int, deliver, args: tuple) -> None:
        """The message reaches the tail of link `hop` of its route (or, past the last, its destination)."""
        if hop == len(route):
            deliver(now, *args)
            return
        link, dim_index = route[hop]
        occupy, reach = self.hop_times(dim_index, size)
        begin = max(now, self.free.get(link, 0))
        self.free[link] = begin + occupy
        self.events.call(begin + reach, self._hop, route, hop + 1, size, deliver, args)


class AwareCollectiveModel(CollectiveModel):
    """Collectives on the congestion-aware network, each timed alone (no other traffic)."""

    def transport(self, events: EventQueue) -> AwareFabric:
        return AwareFabric(self.network, events, self.comm_scale)

    def _member_finish(self, op: str, size: int, involved, group, offsets) -> tuple[int, ...]:
        # contention couples chunks and NPUs: always message by message
        return self._replay_alone(self.plan(op, size, involved, group), offsets)

    def _duration(self, op: str, size: int, involved=None, group=None) -> int:
        return max(self.member_durations(op, size, involved, group))
