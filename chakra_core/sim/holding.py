"""Members that issue a collective apart, without replaying it each time (docs/simulator.md,
'Members that issue apart').

Where a collective's replay waits for the same earlier events whatever its members' issue
ticks (CollectiveModel._offsets_only_shift; on the aware network also: every link carries
one NPU's messages, in the order it sends them), every event's tick is the maximum of
earlier ticks plus constants. Then member i ends at max_j (issue_j + L_ij) and, on the aware
network, link l is free again from max_j (issue_j + F_lj): a holding table. The entries are
measured by replaying the collective alone with member j issuing it B later than the
others, B longer than the whole collective: every output that waits for member j comes out
at B + its entry; one that does not ends before B (no entry).

A phase that treats every rank alike (ring, direct) on one network dimension runs the same
when every NPU moves by the same step along the network's torus of dimensions, so the
replay for member 0 gives every member's column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chakra_core.sim.aware import moved_link
from chakra_core.sim.config import NetworkConfig
from chakra_core.sim.plan import SPAN_DIM, CollectivePlan

UNRELATED = np.iinfo(np.int64).min // 4  # the entry of an output that does not wait for a member


class HoldingTable:
    """One collective's holding table: finish[i, j] = L_ij and link_free[l, j] = F_lj, by
    member order (group order, or NPU order), UNRELATED where there is no entry."""

    def __init__(self, finish: np.ndarray, links: list[tuple], link_free: np.ndarray):
        self.finish, self.links, self.link_free = finish, links, link_free

    def finishes(self, issues: Sequence[int]) -> tuple[int, ...]:
        """Each member's finish tick when member j issues the collective at issues[j]."""
        return tuple((self.finish + np.asarray(issues, np.int64)).max(axis=1).tolist())

    def frees(self, issues: Sequence[int]) -> dict[tuple, int]:
        """The tick each link the collective uses is free from afterwards (aware network)."""
        if not self.links:
            return {}
        return dict(zip(self.links, (self.link_free + np.asarray(issues, np.int64)).max(axis=1).tolist()))


def measure(model, op: str, size: int, involved: tuple[bool, ...] | None,
            group: tuple[int, ...] | None) -> HoldingTable:
    """The holding table of one collective, by replays alone on the model's network
    (model: a collectives.CollectiveModel; the collective must be one _offsets_only_shift accepts)."""
    plan = model.plan(op, size, involved, group)
    n = len(group) if group else model.network.npus
    late = max(model.member_durations(op, size, involved, group)) + 1
    finish = np.full((n, n), UNRELATED, np.int64)
    links: list[tuple] = []
    link_free = np.zeros((0, n), np.int64)
    for j in [0] if translatable(plan) else range(n):
        finishes, free = model.replay_alone(plan, tuple(late if k == j else 0 for k in range(n)))
        if not links and free:
            links = list(free)
            link_free = np.full((len(links), n), UNRELATED, np.int64)
        finish[:, j] = _entries([t - late for t in finishes])
        if links:
            link_free[:, j] = _entries([free[link] - late for link in links])
    if translatable(plan):
        _translate_columns(model.network, finish, links, link_free)
    return HoldingTable(finish, links, link_free)


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


def _translate_columns(network: NetworkConfig, finish: np.ndarray, links: list[tuple],
                       link_free: np.ndarray) -> None:
    """Fills every member's column from member 0's: the output o of member j's column is
    output (o moved back by j's coordinates) of member 0's."""
    sizes = np.array([d.npus for d in network.dims])
    strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    coords = np.arange(network.npus)[:, None] // strides % sizes  # every NPU's coordinates
    row = {link: k for k, link in enumerate(links)}
    for j in range(1, network.npus):
        back = tuple(int(-c) for c in coords[j])
        finish[:, j] = finish[((coords - coords[j]) % sizes * strides).sum(axis=1), 0]
        for k, link in enumerate(links):
            link_free[k, j] = link_free[row[moved_link(network, link, back)], 0]
