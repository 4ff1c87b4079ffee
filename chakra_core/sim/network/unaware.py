"""The congestion-unaware network back-end (its interface: interface.Network).

Congestion-unaware (docs/simulator.md, 'Message time'): a message of m bytes from one NPU
to another arrives after floor(h * latency + m / bandwidth) ns, timed in the lowest
dimension whose coordinates differ, with h the hop count of that dimension's topology.
Latency is paid per hop, serialization once per message, and messages never interact.
"""

from __future__ import annotations

import math
from functools import lru_cache

from chakra_core.sim.config import NetworkConfig, NetworkDim, Topology
from chakra_core.sim.network.interface import Network


def hops(dim: NetworkDim, src: int, dst: int) -> int:
    """Hops between local indices src and dst of one dimension."""
    if src == dst:
        return 0
    if dim.topology == Topology.RING:  # bidirectional: the shorter way round
        clockwise = (dst - src) % dim.npus
        return min(clockwise, dim.npus - clockwise)
    if dim.topology == Topology.FULLY_CONNECTED:
        return 1
    return 2  # Switch: NPU -> switch -> NPU


def message_delay(dim: NetworkDim, hop_count: int, size: int) -> int:
    """ns for `size` bytes over `hop_count` hops of one dimension (one truncation for the path)."""
    return math.floor(hop_count * dim.latency_ns + size / dim.bytes_per_ns)


class UnawareNetwork(Network):
    """Delays between NPUs of a (possibly multi-dimensional) network, congestion-unaware.
    With `scale` (a what-if knob) every delay is scaled, then truncated."""

    reports_at_send = True
    notes: tuple[str, ...] = ()

    def __init__(self, network: NetworkConfig, scale: float = 1.0):
        self.network = network
        self.scale = scale
        self.free: dict = {}  # no links: nothing is ever busy
        self.entered: dict = {}
        self._coords = lru_cache(maxsize=None)(network.coords)

    def route(self, src: int, dst: int) -> tuple[int, int]:
        """(dimension index, hop count) a message from src to dst is timed in."""
        a, b = self._coords(src), self._coords(dst)
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return i, hops(self.network.dims[i], x, y)
        return 0, 0

    def delay(self, src: int, dst: int, size: int) -> int:
        dim_index, hop_count = self.route(src, dst)
        ns = message_delay(self.network.dims[dim_index], hop_count, size)
        return ns if self.scale == 1.0 else math.floor(ns * self.scale)

    def send(self, now: int, src: int, dst: int, size: int, deliver, args: tuple) -> None:
        deliver(now + self.delay(src, dst, size), *args)
