"""Collectives of a job on the congestion-aware network: the system layer's aware runner.

Every collective is replayed message by message while the job runs, on the job's one
AwareFabric (aware.py) sharing the engine's event queue, so traffic that shares links
contends; each member gets its own finish time. A member starts a collective when it
issues it, except an all-to-all, which starts when its last member issues it (its plan
needs every member's size).

Two shortcuts, where they are exact:

- Where every link the job may use is entered from one place only (the NPU it leaves, or
  one other link: neighbours of a Ring, any pair of a FullyConnected dimension, a ring
  algorithm through a Switch), each link carries one NPU's messages in the order that NPU
  sends them, whatever else runs (an NPU runs one communication at a time). A collective
  with a holding table (holding.py: one phase, one chunk at a time, one packet in flight)
  on one queue per dimension is then timed from its table when its last member issues it:
  each member's finish and each link's last busy tick are a maximum of issue ticks plus
  constants. Where a link is still busy when its sender issues the collective, that one
  collective is replayed alone from the links' state instead. Members finish on the same
  ticks as live; only the order of completions within one tick on different NPUs (and so of
  the timeline's rows) may differ.
- Where only all-NPU collectives exist, a collective all members start in one tick on idle
  links and all finish together reuses its replay alone (no other traffic can reach the
  links before it ends).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from chakra_core.sim.aware import AwareFabric
from chakra_core.sim.collectives import AwareCollectiveModel
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.holding import HoldingTable
from chakra_core.sim.nodes import DO_COLLECTIVE, DO_SEND, Node
from chakra_core.sim.plan import ALL_TO_ALL, CollectivePlan, phase_directions
from chakra_core.sim.replay import Instance, Replay
from chakra_core.sim.system import Members, System

Senders = list[tuple[tuple, int]]  # (link, the member position of the NPU that sends on it)


class AwareCollectives:
    """The live replay of a job's collectives on shared links, with the shortcuts above where
    they are exact (shortcuts=False replays every one live, to check that they are)."""

    def __init__(self, model: AwareCollectiveModel, fabric: AwareFabric, events: EventQueue,
                 shapes: Iterable[tuple[int, Node]], shortcuts: bool = True):
        """shapes: every distinct (NPU, node) of the job."""
        shapes = list(shapes)
        self.model, self.fabric, self.events = model, fabric, events
        self.replay = Replay(model.system, model.ranks, events, fabric, model.timer.p, model.comm_scale)
        self.system: System | None = None
        self.instances: dict[tuple, Instance] = {}  # live collectives by key, until every member is done
        self.live_members: dict[tuple, Members] = {}
        self.members_done: dict[tuple, int] = defaultdict(int)
        # When every communication is a collective of all NPUs, nothing but a collective's own
        # members can put traffic on the links, and they are busy with it until they finish: a
        # collective that all members start in one tick on idle links, and that they all finish
        # together, runs exactly as it does alone, so its cached replay is reused (a training
        # trace repeats a few collectives thousands of times). Others run live.
        self.reuse_alone = shortcuts and not any(node.action == DO_SEND or node.group for _, node in shapes)
        self.deciding: dict[tuple, list[int]] = {}  # collectives started this tick on idle links: who joined
        self.private_links = shortcuts and self._private_links(shapes)
        self._tables: dict[tuple, tuple[HoldingTable, Senders] | None] = {}  # by (op, size, involved, group)

    @property
    def notes(self) -> list[str]:
        return [*self.model.notes, *self.fabric.notes]

    def attach(self, system: System) -> None:
        self.system = system

    def issued(self, key: tuple, node: Node, members: Members, npu: int, now: int) -> None:
        if node.op == ALL_TO_ALL:
            if node.idle:  # no dimension to run on: done at once
                self.system.complete(now, npu, members[npu][1])
        elif self._table(node.op, node.size, node.involved, key[0]) is None:  # else timed once all have issued
            self._join(key, node, node.size, members, (npu,), now)  # ASTRA-sim: it starts on this NPU at once

    def all_issued(self, key: tuple, first: Node, size: int, members: Members, now: int) -> None:
        found = self._table(first.op, size, first.involved, key[0])
        order = list(self.system.members(key[0]))
        if found is not None:  # an all-to-all starts when its last member issues it
            issues = [now] * len(order) if first.op == ALL_TO_ALL else [members[npu][0] for npu in order]
            self._from_table(key, self.model.plan(first.op, size, first.involved, key[0]), *found, members,
                             order, issues)
        elif first.op == ALL_TO_ALL:  # its plan needs every member's size: all start now
            self._join(key, first, size, members, order, now)

    # ------------------------------------------------------------------ holding tables

    def _private_links(self, shapes: list[tuple[int, Node]]) -> bool:
        """Whether every link the job may use is entered from one place only (the NPU it leaves,
        or one other link): its messages then keep the order their one sender sends them in."""
        pairs, collectives = set(), set()
        for npu, node in shapes:
            if node.action == DO_SEND:
                pairs.add((npu, node.peer))
            elif node.action == DO_COLLECTIVE and not node.idle:
                collectives.add((node.op, node.size, node.involved, node.group))
        try:
            for shape in collectives:
                pairs.update(self._pairs(self.model.plan(*shape)))
        except SimulationError:  # not modelled: its error comes when it runs
            return False
        entered: dict[tuple, object] = {}
        for src, dst in pairs:
            before = src
            for link, _ in self.fabric.route(src, dst):
                if entered.setdefault(link, before) != before:
                    return False
                before = link
        return True

    def _pairs(self, plan: CollectivePlan) -> Iterator[tuple[int, int]]:
        """(sender, receiver) of every message the collective may send."""
        queues = self.model.system.num_queues_per_dim
        for index, phase in enumerate(plan.phases):
            algorithm = self.replay.algorithm(phase, plan.endpoint_delay)
            directions = phase_directions(plan, index, queues)
            for npu in plan.group or range(self.model.network.npus):
                rank, ranks = self.model.ranks(phase, npu, plan.group)
                yield from ((npu, ranks[peer]) for peer in algorithm.peers(rank, directions))

    def _senders(self, plan: CollectivePlan) -> Senders:
        """Every link the collective may use, with the member position of the NPU that sends on it."""
        position = {npu: k for k, npu in enumerate(plan.group or range(self.model.network.npus))}
        return list({link: position[src] for src, dst in self._pairs(plan)
                     for link, _ in self.fabric.route(src, dst)}.items())

    def _table(self, op: str, size: int, involved, group) -> tuple[HoldingTable, Senders] | None:
        """The collective's holding table and its links' senders, where they time it exactly:
        private links, one chunk at a time per NPU (so each link keeps its order), a table."""
        key = (op, size, involved, group)
        if key not in self._tables:
            table = None
            if self.private_links and self.model.system.num_queues_per_dim == 1:
                table = self.model.holding(op, size, involved, group)
            self._tables[key] = None if table is None else (table, self._senders(self.model.plan(*key)))
        return self._tables[key]

    def _from_table(self, key: tuple, plan: CollectivePlan, table: HoldingTable, senders: Senders,
                    members: Members, order: list[int], issues: list[int]) -> None:
        """Times a collective from its holding table: every member has issued it."""
        free = self.fabric.free
        if all(free.get(link, 0) <= issues[position] for link, position in senders):
            finishes, link_free = table.finishes(issues), table.frees(issues)
        else:  # a link is still busy with its sender's last message: replay this one from the links' state
            base = min(issues)
            ends, after = self.model.replay_alone(plan, tuple(t - base for t in issues),
                                                  {link: free[link] - base for link, _ in senders if link in free})
            finishes, link_free = [t + base for t in ends], {link: t + base for link, t in after.items()}
        free.update(link_free)
        self.live_members[key] = members
        for npu, finish in zip(order, finishes):
            self.events.call(finish, self._member_done, key, npu)

    # ------------------------------------------------------------------ live replays

    def _join(self, key: tuple, node: Node, size: int, members: Members, joining: Iterable[int], now: int) -> None:
        """Members start the collective now."""
        instance = self.instances.get(key)
        if instance is None:
            if key in self.deciding:
                self.deciding[key] += joining
                return
            if self.reuse_alone and not self.instances:  # idle links: decide at the end of this tick
                self.deciding[key] = list(joining)
                self.events.call(now, self._decide, key, node, size, members)
                return
            instance = self._start(key, node, size, members)
        for npu in joining:
            instance.join(npu, now)

    def _decide(self, now: int, key: tuple, node: Node, size: int, members: Members) -> None:
        joined = self.deciding.pop(key)
        npus = self.system.npus
        if len(joined) == npus:
            alone = self.model.member_durations(node.op, size, node.involved, None)
            if len(set(alone)) == 1:  # all finish together: exactly as alone
                self.live_members[key] = members
                for npu in range(npus):
                    self.events.call(now + alone[npu], self._member_done, key, npu)
                return
        instance = self._start(key, node, size, members)
        for npu in joined:
            instance.join(npu, now)

    def _start(self, key: tuple, node: Node, size: int, members: Members) -> Instance:
        plan = self.model.plan(node.op, size, node.involved, key[0])
        instance = self.instances[key] = self.replay.instance(plan, lambda npu, tick: self._member_done(tick, key, npu))
        self.live_members[key] = members
        return instance

    def _member_done(self, now: int, key: tuple, npu: int) -> None:
        issued, index = self.live_members[key][npu]
        self.system.member_done(now, npu, issued, index)
        self.members_done[key] += 1
        if self.members_done[key] == (len(key[0]) if key[0] else self.system.npus):
            self.instances.pop(key, None)
            del self.live_members[key], self.members_done[key]

    def waits(self, report: dict[int, list[str]], explained: dict[int, set]) -> None:
        """Members that wait for one another in their queues (those of a collective left to its
        holding table are replayed alone to say so, as they would have run live)."""
        waiting = [*self.instances.items(), *self._waiting_for_table()]
        for (group, k), instance in waiting:
            for npu, text in instance.stuck():
                report[npu].append(f"{instance.plan.op} (collective #{k} of group {'all' if group is None else group}) "
                                   f"{text}")
                explained[npu].add(("collective", group, k))

    def _waiting_for_table(self) -> Iterator[tuple[tuple, Instance]]:
        """The collectives some member never issued that were left to their holding table,
        each replayed alone with the members that issued it (as they would have joined it
        live: all but all-to-all), from the links' state."""
        for key, members in self.system.pending.items():
            joined = {npu: issue for npu, issue in members.items()
                      if self.system.nodes[npu][issue[1]].op != ALL_TO_ALL}
            if not joined or key in self.instances:
                continue
            npu, (_, index) = next(iter(joined.items()))
            node = self.system.nodes[npu][index]
            if self._table(node.op, node.size, node.involved, key[0]) is None:
                continue
            events = EventQueue()
            replay = Replay(self.model.system, self.model.ranks, events, self.model.backend(events, self.fabric.free),
                            self.model.timer.p, self.model.comm_scale)
            instance = replay.instance(self.model.plan(node.op, node.size, node.involved, key[0]), lambda *done: None)
            for member, (tick, _) in joined.items():
                events.call(tick, _join, instance, member)
            events.run()
            yield key, instance


def _join(now: int, instance: Instance, npu: int) -> None:
    instance.join(npu, now)
