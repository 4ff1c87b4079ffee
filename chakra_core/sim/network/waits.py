"""Who waited behind whom on the links of a network several jobs share (docs/simulator.md,
'Several jobs on one network'): the aware fabrics (network/aware.py) with a ledger.

A message that reaches a link while it is busy waits (FIFO) from its arrival to the tick the
link frees. Each ns of that wait lies in the occupancy of one message ahead of it on the link;
the ledger charges it to that message's job (with that message's bytes, once per waiting
message). A wait no recorded message covers (a link held by a collective timed from its
holding table, system/live.py: one job's own traffic on links it alone enters) is charged to
the waiting job itself. Only runs of several jobs use these classes: a single job's fabric
stays the plain one.
"""

from __future__ import annotations

from collections import defaultdict, deque

from chakra_core.sim.config import NetworkConfig
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.aware import AwareFabric, WatchedFabric


class WaitLedger:
    """Per job: ns waited on each link, and ns and bytes waited behind each job's traffic."""

    def __init__(self) -> None:
        self.rep_of: list[int] | None = None  # in a shared run (symmetry.py), the NPU each NPU copies
        self.on_link: dict[int, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
        self.behind: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))

    def charge(self, waiter: int, link: tuple, now: int, begin: int, ahead: deque) -> None:
        """The message of job `waiter` reached `link` at `now` and enters it at `begin`;
        `ahead`: (start, end, job, bytes) of the messages on the link before it."""
        self.on_link[waiter][link] += begin - now
        covered = 0
        for start, end, job, size in ahead:
            overlap = min(end, begin) - max(start, now)
            if overlap > 0:
                entry = self.behind[waiter][job]
                entry[0] += overlap
                entry[1] += size
                covered += overlap
        if covered < begin - now:
            self.behind[waiter][waiter][0] += begin - now - covered


class _LedgerMixin:
    """Overrides an aware fabric's hop so that each link crossing knows its message's job (the
    job of the NPU its route leaves: the first link's tail), and records occupancies."""

    def keep_ledger(self, job_of: list[int], ledger: WaitLedger) -> None:
        self.job_of, self.ledger = job_of, ledger
        self.occupied: dict[tuple, deque] = defaultdict(deque)  # link -> (start, end, job, bytes) not yet over
        self._sender_of: dict[tuple, int] = {}
        self._sending = -1

    def _hop(self, now: int, route: tuple, hop: int, size: int, deliver, args: tuple) -> None:
        first = route[0][0]
        job = self._sender_of.get(first)
        if job is None:
            dim, line, tail = first[0], first[1], first[2]
            job = self._sender_of[first] = self.job_of[line + tail * self._strides[dim]]
        self._sending = job
        super()._hop(now, route, hop, size, deliver, args)

    def _cross(self, now: int, link: tuple, dim_index: int, size: int) -> int:
        ahead = self.occupied[link]
        while ahead and ahead[0][1] <= now:
            ahead.popleft()
        begin = max(now, self.free.get(link, 0))
        if begin > now:
            self.ledger.charge(self._sending, link, now, begin, ahead)
        arrival = super()._cross(now, link, dim_index, size)
        ahead.append((begin, self.free[link], self._sending, size))
        return arrival


class LedgerFabric(_LedgerMixin, AwareFabric):
    """AwareFabric keeping a WaitLedger."""


class WatchedLedgerFabric(_LedgerMixin, WatchedFabric):
    """WatchedFabric keeping a WaitLedger."""


def ledger_fabric(network: NetworkConfig, events: EventQueue, scale: float, watched: bool, job_of: list[int],
                  ledger: WaitLedger) -> AwareFabric:
    """The job network of a run of several jobs, charging waits to `ledger` (job_of: NPU -> job)."""
    fabric = (WatchedLedgerFabric if watched else LedgerFabric)(network, events, scale)
    fabric.keep_ledger(job_of, ledger)
    return fabric


def link_name(network: NetworkConfig, link: tuple) -> str:
    """A link as AwareFabric.route names it (dimension, line, its two ends), in words."""
    dim, line, tail, head = link
    stride = 1
    for d in network.dims[:dim]:
        stride *= d.npus
    def end(local) -> str:
        return "switch" if isinstance(local, str) else f"NPU {line + local * stride}"
    if head == "up":
        return f"dim {dim}: {end(tail)} -> switch"
    if head == "down":
        return f"dim {dim}: switch -> {end(tail)}"
    return f"dim {dim}: {end(tail)} -> {end(head)}"
