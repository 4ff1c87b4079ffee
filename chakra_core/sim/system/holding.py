"""Members that issue a collective apart, without replaying it each time (docs/simulator.md,
'Members that issue apart').

Where a collective's replay waits for the same earlier events whatever its members' issue
ticks (CollectiveModel._offsets_only_shift; on the aware network also: every link carries
one NPU's messages, in the order it sends them), every event's tick is the maximum of
earlier ticks plus constants. Then member i ends at max_j (issue_j + L_ij) and, on the aware
network, link l is free again from max_j (issue_j + F_lj): a holding table. The entries are
measured by replaying the collective alone with member j issuing it B later than the
others, once they have done all they can without it: every output that waits for member j
comes out at B + its entry; one that does not ends before B (no entry). The tick the first
message enters each link is such an output too: a link still busy from earlier traffic
until then changes nothing.

A phase that treats every rank alike (ring, direct) on one network dimension runs the same
when every NPU moves by the same step along the network's torus of dimensions, so the
replay for member 0 gives every member's column. So does a sub-group's ring whose members lie
on one line of a dimension, where moving each member to the next one's place maps the network
onto itself (any ring on a Switch or FullyConnected dimension, an evenly spaced one that goes
round a Ring); and a sub-group moved along the torus has the table of the group it was moved
from, its links moved (CollectiveModel measures one group per shape).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from chakra_core.sim.config import NetworkConfig, Topology
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.interface import Links, Network
from chakra_core.sim.system.packets import Replay
from chakra_core.sim.system.plan import SPAN_DIM, CollectivePlan

UNRELATED = np.iinfo(np.int64).min // 4  # the entry of an output that does not wait for a member


class HoldingTable:
    """One collective's holding table: finish[i, j] = L_ij, link_free[l, j] = F_lj and
    link_enter[l, j], the tick its first message enters link l, by member order (group order,
    or NPU order), UNRELATED where there is no entry. replay_cost: CPU seconds one replay of
    the collective took (about what running it live costs). fabric: the network it was measured
    on, which names the links (an interface.Links where there are any)."""

    def __init__(self, finish: np.ndarray, links: list[tuple], link_free: np.ndarray,
                 link_enter: np.ndarray | None = None, replay_cost: float = 0.0, fabric: Network | None = None):
        self.finish, self.links, self.link_free, self.fabric = finish, links, link_free, fabric
        self.link_enter = link_free if link_enter is None else link_enter
        self.replay_cost = replay_cost
        self._all: np.ndarray | None = None

    def evaluate(self, issues: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """At once: each member's finish, and by `links`, the tick each link is free from
        afterwards and the tick the collective's first message enters it."""
        if self._all is None:
            self._all = np.vstack([self.finish, self.link_free, self.link_enter]) if self.links else self.finish
        ticks = (self._all + np.asarray(issues, np.int64)).max(axis=1).tolist()
        n, k = len(self.finish), len(self.links)
        return ticks[:n], ticks[n:n + k], ticks[n + k:]

    def finishes(self, issues: Sequence[int]) -> tuple[int, ...]:
        """Each member's finish tick when member j issues the collective at issues[j]."""
        return tuple((self.finish + np.asarray(issues, np.int64)).max(axis=1).tolist())

    def frees(self, issues: Sequence[int]) -> dict[tuple, int]:
        """The tick each link the collective uses is free from afterwards (aware network)."""
        if not self.links:
            return {}
        return dict(zip(self.links, (self.link_free + np.asarray(issues, np.int64)).max(axis=1).tolist()))

    def moved(self, by: tuple[int, ...]) -> HoldingTable:
        """The table of the same collective with every NPU moved by `by` coordinates along the
        torus (a sub-group moved there): the same entries, on the moved links."""
        return HoldingTable(self.finish, [self.fabric.moved_link(link, by) for link in self.links], self.link_free,
                            self.link_enter, self.replay_cost, self.fabric)


def measure(model, op: str, size: int, involved: tuple[bool, ...] | None,
            group: tuple[int, ...] | None) -> HoldingTable:
    """The holding table of one collective, by replays alone on the model's network
    (model: a collectives.CollectiveModel; the collective must be one _offsets_only_shift accepts).

    Column j: the other members issue it at 0 and run until nothing is left to do without
    member j, which issues it one tick later (at B): as at any later tick, since nothing
    happens in between. Outputs before B do not wait for member j; the others are B + L."""
    plan = model.plan(op, size, involved, group)
    members = plan.group or tuple(range(model.network.npus))
    n = len(members)
    finish = np.full((n, n), UNRELATED, np.int64)
    links: list[tuple] = []
    link_free = link_enter = np.zeros((0, n), np.int64)
    rotation = group_rotation(model.network, plan)
    cost = time.process_time()
    fabric = None
    for j in [0] if translatable(plan) or rotation else range(n):
        finishes, fabric, late = _replay_late(model, plan, members, j)
        free, entered = fabric.free, fabric.entered
        if not j:
            cost = time.process_time() - cost
        if not links and free:
            links = list(free)
            link_free = np.full((len(links), n), UNRELATED, np.int64)
            link_enter = np.full((len(links), n), UNRELATED, np.int64)
        finish[:, j] = _entries([t - late for t in finishes])
        if links:
            link_free[:, j] = _entries([free[link] - late for link in links])
            link_enter[:, j] = _entries([entered[link] - late for link in links])
    if translatable(plan):
        _translate_columns(model.network, fabric, finish, links, link_free, link_enter)
    elif rotation:
        _rotate_columns(rotation, fabric, finish, links, link_free, link_enter)
    return HoldingTable(finish, links, link_free, link_enter, cost, fabric)


def _replay_late(model, plan: CollectivePlan, members: tuple[int, ...], j: int):
    """(each member's finish, the network it ran on (its links' free ticks and first entries),
    B) with member j issuing the collective at B, after everything the others can do without it."""
    events = EventQueue()
    network = model.replay_network(events, record=True)
    finish: dict[int, int] = {}
    instance = Replay(model.system, model.ranks, events, network, model.timer.p,
                      model.comm_scale).instance(plan, finish.__setitem__)
    for k, npu in enumerate(members):
        if k != j:
            events.call(0, _join, instance, npu)
    late = (events.run() or 0) + 1
    events.call(late, _join, instance, members[j])
    events.run()
    if len(finish) != len(members):
        raise instance.stuck_error()
    model.timer.notes.update(network.notes)
    return [finish[npu] for npu in members], network, late


def _join(now: int, instance, npu: int) -> None:
    instance.join(npu, now)


def _entries(waits: list[int]) -> np.ndarray:
    column = np.asarray(waits, np.int64)
    column[column < 0] = UNRELATED  # ended before the late member issued: it does not wait for it
    return column


def translatable(plan: CollectivePlan) -> bool:
    """Whether the collective runs the same moved along the torus: one phase over a network
    dimension whose algorithm treats every rank alike."""
    if len(plan.phases) != 1 or plan.group is not None:
        return False
    phase = plan.phases[0]
    return phase.span == SPAN_DIM and phase.impl.algorithm in ("ring", "direct")


def _translate_columns(network: NetworkConfig, fabric: Links, finish: np.ndarray, links: list[tuple],
                       *per_link: np.ndarray) -> None:
    """Fills every member's column from member 0's: the output o of member j's column is
    output (o moved back by j's coordinates) of member 0's (per_link: link_free, link_enter)."""
    sizes = np.array([d.npus for d in network.dims])
    strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    coords = np.arange(network.npus)[:, None] // strides % sizes  # every NPU's coordinates
    row = {link: k for k, link in enumerate(links)}
    for j in range(1, network.npus):
        back = tuple(int(-c) for c in coords[j])
        finish[:, j] = finish[((coords - coords[j]) % sizes * strides).sum(axis=1), 0]
        rows = [row[fabric.moved_link(link, back)] for link in links]
        for table in per_link:
            table[:, j] = table[rows, 0]


def group_rotation(network: NetworkConfig, plan: CollectivePlan):
    """For a sub-group's ring whose members differ in one network dimension only, where moving
    member i to member i+1's place (and every NPU of that dimension with it) maps the network
    onto itself: (that dimension, back(j)), back(j) mapping a coordinate of the dimension j
    members back. Any coordinates on a Switch or FullyConnected dimension (all links alike);
    on a Ring, evenly spaced members that go round it (a rotation). Else None."""
    if plan.group is None or len(plan.phases) != 1 or plan.phases[0].impl.algorithm != "ring":
        return None
    coords = [network.coords(npu) for npu in plan.group]
    differ = {i for c in coords for i, x in enumerate(c) if x != coords[0][i]}
    if len(differ) != 1:
        return None
    (dim,) = differ
    local = [c[dim] for c in coords]
    n, size = len(local), network.dims[dim].npus
    if network.dims[dim].topology == Topology.RING:
        step = (local[1] - local[0]) % size
        if any((local[(i + 1) % n] - local[i]) % size != step for i in range(n)):
            return None
        return dim, lambda j: (lambda c: (c - j * step) % size)
    position = {c: i for i, c in enumerate(local)}
    return dim, lambda j: (lambda c: local[(position[c] - j) % n])


def _rotate_columns(rotation, fabric: Links, finish: np.ndarray, links: list[tuple], *per_link: np.ndarray) -> None:
    """Fills every member's column from member 0's (group_rotation): member j late is member 0
    late with every member moved j places on, so output o of column j is output (o moved j
    places back) of column 0 (per_link: link_free, link_enter)."""
    dim, back = rotation
    n = finish.shape[0]
    row = {link: k for k, link in enumerate(links)}
    order = np.arange(n)
    for j in range(1, n):
        finish[:, j] = finish[(order - j) % n, 0]
        move = back(j)
        rows = [row[fabric.moved_within(link, dim, move)] for link in links]
        for table in per_link:
            table[:, j] = table[rows, 0]
