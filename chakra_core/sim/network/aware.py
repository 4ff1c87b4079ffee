"""The congestion-aware network back-end: ASTRA-sim's (docs/simulator.md, 'Congestion-aware
links'), and its natural extension to several network dimensions. Its interface is the
network layer's (interface.Network).

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

In a job every collective and send shares one AwareFabric (sim/system/live.py), so concurrent
traffic contends for the links it shares.
"""

from __future__ import annotations

import math

from chakra_core.sim.config import NetworkConfig, NetworkDim, Topology
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.interface import Links, WatchedLinks

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


def moved_link(network: NetworkConfig, link: tuple, by: tuple[int, ...]) -> tuple:
    """The link (as AwareFabric.route names it: dimension, line, then its two ends) that every
    NPU moved by `by` coordinates along the torus of dimensions would use instead."""
    dim, line, *ends = link
    stride, at = 1, 0
    for i, (c, d) in enumerate(zip(network.coords(line), network.dims)):
        at += (0 if i == dim else (c + by[i]) % d.npus) * stride  # a line is named by its NPU at coordinate 0
        stride *= d.npus
    n = network.dims[dim].npus
    return (dim, at, *((end + by[dim]) % n if isinstance(end, int) else end for end in ends))


class AwareFabric(Links):
    """The links of one network as FIFO store-and-forward servers, on one event queue.

    send(now, src, dst, bytes, deliver, args) calls deliver(arrival, *args) at the arrival
    tick. With `scale` (the comm_scale knob) every link time is scaled, then truncated;
    `free` may start with links busy until given ticks.
    """

    reports_at_send = False

    def __init__(self, network: NetworkConfig, events: EventQueue, scale: float = 1.0,
                 free: dict[tuple, int] | None = None):
        self.network, self.events, self.scale = network, events, scale
        self.free: dict[tuple, int] = dict(free or {})  # link -> the tick it is free from
        self.entered: dict[tuple, int] = {}  # recorded by EntryRecordingFabric only
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

    def moved_link(self, link: tuple, by: tuple[int, ...]) -> tuple:
        return moved_link(self.network, link, by)

    def moved_within(self, link: tuple, dim: int, move) -> tuple:
        link_dim, line, *ends = link
        if link_dim != dim:
            raise AssertionError(f"link {link} off dimension {dim}")
        return (link_dim, line, *(move(e) if isinstance(e, int) else e for e in ends))

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
        route = self.route(src, dst)
        if route:
            self.events.call(now, self._hop, route, 0, size, deliver, args)
        else:  # to itself: no link to cross
            self.events.call(now, deliver, *args)

    def _hop(self, now: int, route: tuple, hop: int, size: int, deliver, args: tuple) -> None:
        """The message reaches the tail of link `hop` of its route; past the last, deliver() is
        called at its destination (scheduled now: the same tick and place in it)."""
        link, dim_index = route[hop]
        arrival = self._cross(now, link, dim_index, size)
        if hop + 1 == len(route):
            self.events.call(arrival, deliver, *args)
        else:
            self.events.call(arrival, self._hop, route, hop + 1, size, deliver, args)

    def _cross(self, now: int, link: tuple, dim_index: int, size: int) -> int:
        """The message enters `link` once the link is free (FIFO) and holds it for its occupancy;
        returns the tick it reaches the link's head."""
        occupy, reach = self._hop_times.get((dim_index, size)) or self.hop_times(dim_index, size)
        begin = max(now, self.free.get(link, 0))
        self.free[link] = begin + occupy
        return begin + reach


class EntryRecordingFabric(AwareFabric):
    """An AwareFabric that also records the tick the first message entered each link
    (`entered`), for holding tables (system/holding.py)."""

    def __init__(self, network: NetworkConfig, events: EventQueue, scale: float = 1.0,
                 free: dict[tuple, int] | None = None):
        super().__init__(network, events, scale, free)

    def _hop(self, now: int, route: tuple, hop: int, size: int, deliver, args: tuple) -> None:
        self.entered.setdefault(route[hop][0], now)
        super()._hop(now, route, hop, size, deliver, args)


class LinkWatch:
    """What a job's fabric knows of one link shared by messages from several places (a link or
    the NPU it leaves), for the holding tables' checks (system/live.py): the tick the last message
    from each place entered it, and the collectives timed from their tables that may use it."""

    __slots__ = ("entries", "bounds", "reservations")

    def __init__(self) -> None:
        self.entries: dict = {}  # place -> tick the last message from it entered the link
        self.bounds: dict = {}  # place -> (tick, key): no message of the tabled collective `key` entered after it
        self.reservations: list[tuple] = []  # (place, start, end, key): a tabled collective's messages may
        # enter from place from start on, and the link is busy with them until end


class WatchedFabric(AwareFabric, WatchedLinks):
    """A job's fabric (AwareFabric) that also records what the holding tables must check
    (system/live.py): `incoming[link]`, the latest tick a message was scheduled to enter the link; on
    every watched link (a LinkWatch), each message's entry, counting as `conflicts` the tabled
    collectives whose reservation it enters from another place and as `coincidences` the
    messages that enter from two places in one tick (their order is decided by the order of
    events of one tick, which holding tables do not reproduce). `overtaking` (set by the job's
    runner, which knows the sizes of its messages): a message may reach a link before one that
    left the previous link ahead of it (each hop's times are truncated apart), so even one
    place's messages may change order there."""

    def __init__(self, network: NetworkConfig, events: EventQueue, scale: float = 1.0):
        super().__init__(network, events, scale)
        self.incoming: dict[tuple, int] = {}
        self.watched: dict[tuple, LinkWatch] = {}
        self.conflicts: set = set()
        self.coincidences = 0
        self.overtaking = True

    def may_overtake(self, sizes: dict[int, set[int]]) -> bool:
        """Whether a message may reach the next link before one that left a link ahead of it,
        among messages of these sizes (by dimension): a message of size a then one of size b
        (leaving at least occupy(a) later) arrive in that order unless
        occupy(a) + reach(b) < reach(a)."""
        for dim, dim_sizes in sizes.items():
            times = [self.hop_times(dim, size) for size in dim_sizes]
            if times and min(reach for _, reach in times) < max(reach - occupy for occupy, reach in times):
                return True
        return False

    def send(self, now: int, src: int, dst: int, size: int, deliver, args: tuple) -> None:
        self.carried = True
        route = self.route(src, dst)
        if route:
            first = route[0][0]
            if self.incoming.get(first, -1) < now:
                self.incoming[first] = now
            self.events.call(now, self._hop, route, 0, size, deliver, args)
        else:
            self.events.call(now, deliver, *args)

    def _hop(self, now: int, route: tuple, hop: int, size: int, deliver, args: tuple) -> None:
        link, dim_index = route[hop]
        watch = self.watched.get(link)
        if watch is not None:
            self._enter(watch, now, route[hop - 1][0] if hop else None)
        arrival = self._cross(now, link, dim_index, size)
        if hop + 1 == len(route):
            self.events.call(arrival, deliver, *args)
        else:
            after = route[hop + 1][0]
            if self.incoming.get(after, -1) < arrival:
                self.incoming[after] = arrival
            self.events.call(arrival, self._hop, route, hop + 1, size, deliver, args)

    def watch(self, link: tuple) -> None:
        self.watched[link] = LinkWatch()

    def same_order(self, place, other) -> bool:
        """Whether messages entering a link from `other` keep their order behind those from
        `place`: from the same NPU (it runs one communication at a time), or from the same
        link where none overtakes another."""
        return other == place and (place is None or not self.overtaking)

    def _enter(self, watch: LinkWatch, now: int, place) -> None:
        entries = watch.entries
        for other, tick in entries.items():
            if tick == now and other != place:
                self.coincidences += 1
        entries[place] = now
        if watch.reservations:
            kept = []
            for reservation in watch.reservations:
                other, start, end, key = reservation
                if end > now:
                    kept.append(reservation)
                    if start <= now and not self.same_order(other, place):
                        self.conflicts.add(key)
            watch.reservations = kept
