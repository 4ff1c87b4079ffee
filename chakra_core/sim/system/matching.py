"""The system layer of a job: ASTRA-sim's Sys (docs/simulator.md, 'Layers').

The workload layer (workload/issue.py) hands it every communication node an NPU issues:

    system.collective(npu, index, node, now)
    system.send(npu, index, node, now)
    system.recv(npu, index, node, now)

and it schedules each node's completion on the event queue (completions(tick, npu, index)).

- A collective is matched across its group: the k-th collective an NPU issues in a group
  is the k-th of every member; each member starts it when it issues it. How its members'
  finishes are found is the mode's collective runner's: congestion-unaware, `Unaware`
  below (nothing else touches its messages, so when the last member issues it every
  member's finish is known); congestion-aware, live.AwareCollectives.
- A send completes when its message arrives (the network layer says when); its receive
  then, or when it is posted if later.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable

from chakra_core.sim.decoded import DO_COLLECTIVE, EXTENSIONS, Node
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.network.interface import Network
from chakra_core.sim.results import NpuResult
from chakra_core.sim.sharing import Sharing, SymmetryBroken
from chakra_core.sim.system.collectives import CollectiveModel

Members = dict[int, tuple[int, int]]  # a collective's members so far: npu -> (issue tick, node index)


class System:
    """Collective matching and send/receive matching for one job."""

    def __init__(self, nodes: list[list[Node]], network: Network, runner, complete: Callable[[int, int, int], None],
                 results: list[NpuResult], sharing: Sharing | None = None):
        """nodes[npu][index]: the decoded nodes; network: the network back-end sends travel on;
        runner: the mode's collective runner; complete(tick, npu, index) schedules a completion.
        With sharing (symmetry.py), only the representatives run: their mirrors join their
        collectives, and each mirror must end a collective when its representative does."""
        self.nodes, self.network, self.runner, self.complete, self.results = nodes, network, runner, complete, results
        self.npus = len(nodes)
        self.sharing = sharing
        if sharing is not None:
            self._schedule, self.complete, self._finished = complete, self._shared_complete, {}
        self.extensions: set[str] = set()  # collectives ASTRA-sim refuses that this run timed (EXTENSIONS)
        self.pending: dict[tuple, Members] = {}  # (group, k) -> members that issued it, until all have
        self._issued_in_group: dict[tuple[int, tuple | None], int] = defaultdict(int)
        # point to point, keyed (src, dst, tag): unmatched sends (arrival tick) and receives (npu, index, post tick)
        self.sends: dict[tuple[int, int, int], deque] = defaultdict(deque)
        self.recvs: dict[tuple[int, int, int], deque] = defaultdict(deque)
        runner.attach(self)

    def members(self, group: tuple[int, ...] | None) -> Iterable[int]:
        return group or range(self.npus)

    # ------------------------------------------------------------------ collectives

    def collective(self, npu: int, index: int, node: Node, now: int) -> None:
        group = node.group
        k = self._issued_in_group[(npu, group)]
        self._issued_in_group[(npu, group)] = k + 1
        self._join(group, k, (npu,), index, node, now)
        if self.sharing is not None:  # its mirrors issue their k-th collective of their group with it
            for theirs, mirrors in self.sharing.mirrors.get((npu, group), ()):
                self._join(theirs, k, mirrors, index, node, now)

    def _join(self, group: tuple | None, k: int, npus, index: int, node: Node, now: int) -> None:
        """NPUs issue their k-th collective of `group` (node `index`) now."""
        key = (group, k)
        members = self.pending.setdefault(key, {})
        issued = self.runner.issued
        for npu in npus:
            members[npu] = (now, index)
            issued(key, node, members, npu, now)
        if len(members) == (len(group) if group else self.npus):
            del self.pending[key]
            first, size = self._checked(key, members)
            self.runner.all_issued(key, first, size, members, now)

    def _checked(self, key: tuple, members: Members) -> tuple[Node, int]:
        """The collective's node on its first member and the size to time it at; every member
        must issue the same collective."""
        nodes = self.nodes
        first_npu = next(iter(members))
        first = nodes[first_npu][members[first_npu][1]]
        size = first.size
        for npu, (_, index) in members.items():
            node = nodes[npu][index]
            if node.label == first.label == "all_to_all":  # uneven splits: the largest buffer bounds it
                size = max(size, node.size)
                if node.size != first.size:
                    self.extensions.add("uneven_all_to_all")
            elif (node.label, node.size) != (first.label, first.size):
                raise SimulationError(
                    f"collective #{key[1]} of group {key[0] or 'all'} differs across NPUs: "
                    f"{first.label} of {first.size} B on one, {node.label} of {node.size} B on NPU {npu}")
        if first.label in EXTENSIONS:
            self.extensions.add(first.label)
        return first, size

    def member_done(self, finish: int, npu: int, issued: int, index: int) -> None:
        """A member ends the collective it issued at `issued` (node `index`) at `finish`."""
        node = self.nodes[npu][index]
        self.complete(finish, npu, index)
        if self.sharing is None or self.sharing.rep_of[npu] == npu:  # a mirror's result is copied at the end
            self.results[npu].add_comm(node.label, node.size, finish - issued)

    def _shared_complete(self, tick: int, npu: int, index: int) -> None:
        """complete() of a shared run: a representative's node as always; a mirror's
        collective must end when its representative's does (else SymmetryBroken). (A mirror's
        result is its representative's: the engine copies it.)"""
        rep = self.sharing.rep_of[npu]
        if self.nodes[npu][index].action == DO_COLLECTIVE:
            known = self._finished.setdefault((rep, index), tick)
            if known != tick:
                raise SymmetryBroken(f"NPU {npu} ends collective node {index} at {tick} ns, NPU {rep} at {known} ns")
        if rep == npu:
            self._schedule(tick, npu, index)

    # ------------------------------------------------------------------ point to point

    def send(self, npu: int, index: int, node: Node, now: int) -> None:
        self.results[npu].add_comm("send", node.size)
        self.network.send(now, npu, node.peer, node.size, self._arrived, (npu, index))

    def _arrived(self, arrival: int, npu: int, index: int) -> None:
        """The message of send node `index` of `npu` arrives at `arrival`."""
        node = self.nodes[npu][index]
        self.complete(arrival, npu, index)
        match = (npu, node.peer, node.tag)
        if self.recvs[match]:
            r_npu, r_index, posted = self.recvs[match].popleft()
            self.complete(max(arrival, posted), r_npu, r_index)
        else:
            self.sends[match].append(arrival)

    def recv(self, npu: int, index: int, node: Node, now: int) -> None:
        match = (node.peer, npu, node.tag)
        if self.sends[match]:
            self.complete(max(self.sends[match].popleft(), now), npu, index)
        else:
            self.recvs[match].append((npu, index, now))

    # ------------------------------------------------------------------ deadlock reports

    def waits(self, node_id: Callable[[int, int], int], report: dict[int, list[str]],
              explained: dict[int, set]) -> None:
        """Adds what each NPU's unfinished communication waits for to `report`, and the issued
        nodes that explains to `explained` (node_id(npu, index): the node's id)."""
        self.runner.waits(report, explained)
        for (group, k), members in self.pending.items():
            missing = [m for m in self.members(group) if m not in members]
            for npu, (tick, index) in members.items():
                node = self.nodes[npu][index]
                report[npu].append(f"node {node_id(npu, index)} ({node.op} of {node.size} B, collective #{k} of "
                                   f"group {'all' if group is None else group}) issued at {tick} ns waits for "
                                   f"NPU(s) {missing} to issue it")
                explained[npu].add(("collective", group, k))
        for (src, dst, tag), waiting in self.recvs.items():
            for npu, index, tick in waiting:
                report[npu].append(f"receive node {node_id(npu, index)} (from NPU {src}, tag {tag}) posted at "
                                   f"{tick} ns waits for a send that never came")
                explained[npu].add(("receive", index))


class Unaware:
    """Collectives on the congestion-unaware network: nothing else touches their messages, so
    when the last member issues one, every member's finish is known: CollectiveModel's closed
    form when all issued together, else its replay from each member's issue tick."""

    def __init__(self, model: CollectiveModel):
        self.model = model
        self.system: System | None = None

    @property
    def notes(self) -> list[str]:
        return self.model.notes

    def attach(self, system: System) -> None:
        self.system = system

    def issued(self, key: tuple, node: Node, members: Members, npu: int, now: int) -> None:
        if node.idle:  # no dimension to run on: done at once
            self.system.complete(now, npu, members[npu][1])

    def all_issued(self, key: tuple, first: Node, size: int, members: Members, now: int) -> None:
        if first.idle:  # every member was done when it issued it
            return
        group, system = key[0], self.system
        order = system.members(group)
        start = next(iter(members.values()))[0]  # the first issue (ticks never decrease)
        offsets = None if start == now else tuple(members[npu][0] - start for npu in order)
        finishes = self.model.member_finish(first.op, size, first.involved, group, offsets)
        for npu, finish in zip(order, finishes):  # comm_scale applied by the model
            issued, index = members[npu]  # (a member needs every other's data: it ends after the last issue)
            system.member_done(start + finish, npu, issued, index)

    def waits(self, report: dict[int, list[str]], explained: dict[int, set]) -> None:
        """Nothing runs while it waits: the pending collectives say it all."""
