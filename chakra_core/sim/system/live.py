"""Collectives of a job on the congestion-aware network: the system layer's aware runner.

Every collective is replayed message by message while the job runs, on the job's one
AwareFabric (network/aware.py) sharing the engine's event queue, so traffic that shares links
contends; each member gets its own finish time. A member starts a collective when it
issues it, except an all-to-all, which starts when its last member issues it (its plan
needs every member's size).

Two shortcuts, where they are exact:

- Holding tables. A collective with a holding table (system/holding.py: one phase, one chunk at a
  time, one packet in flight) on one queue per dimension, whose every link is entered from
  one place only by its own messages (the NPU it leaves, or one other link: neighbours of a
  Ring, any pair of a FullyConnected dimension, a ring through a Switch), runs as its table
  says when nothing else enters its links while it runs: each member's finish and each link's
  last busy tick are a maximum of issue ticks (and, where a link is still busy when its sender
  issues it, of the links' state: that one collective is then replayed alone from it) plus
  constants. It is timed from the table when its last member issues it. A link entered from
  one place across the whole job carries only that place's messages in their order (an NPU
  runs one communication at a time); on any other link the job's fabric (aware.WatchedFabric)
  watches that nothing enters from another place in the collective's window: from the issue
  of the member that sends on the link to the tick the link is free again. A run where
  something did, or where a message was still on its way to such a link when the table was
  read, is not the live run: the engine runs the job again with those collectives live
  (`conflicts`). Nor is one where two events of one tick that the tables may order otherwise
  than live met: two messages entering a shared link (`coincidences`: it is run again without
  shortcuts), or two communication completions on one NPU (Workload.coincidences: it is run
  again with the collectives among them that were timed from tables live, `tabled`).
- Where only all-NPU collectives exist, a collective all members start in one tick on idle
  links and all finish together reuses its replay alone (no other traffic can reach the
  links before it ends).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

from chakra_core.sim.decoded import DO_COLLECTIVE, DO_SEND, Node
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.interface import Links, WatchedLinks
from chakra_core.sim.system.collectives import CollectiveModel
from chakra_core.sim.system.holding import HoldingTable, group_rotation, translatable
from chakra_core.sim.system.matching import Members, System
from chakra_core.sim.system.packets import Instance, Replay, RingAlgorithm, StepsAlgorithm
from chakra_core.sim.system.plan import ALL_TO_ALL, SPAN_DIM, CollectivePlan, message_bytes, phase_directions

# per link a collective may use: (link, where its messages enter it from: None for the NPU it
# leaves, else the link before it, the member position of the NPU that sends on it, the ns one
# of its messages occupies it at least, its watch (fabric.watched) if the fabric watches it, else None)
TableLinks = list[tuple[tuple, object, int, int, object | None]]


class AwareCollectives:
    """The live replay of a job's collectives on shared links, with the shortcuts above where
    they are exact (shortcuts=False replays every one live, to check that they are)."""

    def __init__(self, model: CollectiveModel, fabric: Links | WatchedLinks, events: EventQueue,
                 shapes: Iterable[tuple[int, Node]], shortcuts: bool = True, forced: frozenset = frozenset()):
        """model: the back-end's collective model (sim/backends.py); shapes: every distinct (NPU,
        node) of the job; forced: collectives (group, k) replayed live whatever their shape. With
        shortcuts, fabric is an interface.WatchedLinks (the back-end's job network says so)."""
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
        self.forced = forced
        self.used_shortcuts = False  # whether this run timed a collective other than live
        self.tabled_cost = 0.0  # CPU seconds the collectives timed from tables took to replay alone, in all
        self._tabled_nodes: dict[tuple[int, int], tuple] = {}  # (npu, node index) -> its collective, timed from a table
        self._groups = {node.group for _, node in shapes if node.action == DO_COLLECTIVE}
        self._shapes = shapes
        self.watching = shortcuts  # holding tables need the fabric's checks
        self.places = self._entry_places(shapes) if shortcuts else None  # link -> where messages enter it from
        if self.places is not None:
            self.fabric.overtaking = self.fabric.may_overtake(self._message_sizes(shapes))
            for link, places in self.places.items():
                if len(places) > 1 or not all(fabric.same_order(p, p) for p in places):
                    fabric.watch(link)
        self._tables: dict[tuple, tuple[HoldingTable, TableLinks] | None] = {}  # by (op, size, involved, group)
        self._node_tables: dict[int, tuple[HoldingTable, TableLinks] | None] = {}  # the same by id(node)

    @property
    def notes(self) -> list[str]:
        return [*self.model.notes, *self.fabric.notes]

    def attach(self, system: System) -> None:
        self.system = system
        # how many collectives of each kind (op, size, involved, group layout) the job runs: a
        # kind run no more times than measuring its table takes replays runs live (_table)
        self._kinds: Counter = Counter()
        if self.places is not None:
            uses: Counter = Counter()  # by id(node): nodes are shared by the rows of one shape
            for npu_nodes in system.nodes:
                uses.update(map(id, npu_nodes))
            for _, node in self._shapes:
                if node.action == DO_COLLECTIVE:
                    self._kinds[_kind(node.op, node.size, node.involved, node.group)] += (
                        uses[id(node)] / len(node.group or system.nodes))

    @property
    def conflicts(self) -> set:
        """The collectives (group, k) timed from their tables that something else may have delayed
        or been delayed by: the run is not the live one, they must run live."""
        return self.fabric.conflicts if self.watching else set()

    @property
    def coincidences(self) -> int:
        return self.fabric.coincidences if self.watching else 0

    def tabled(self, met: Iterable[tuple[int, int, int]]) -> set:
        """The collectives (group, k) timed from their tables among the completions that met
        (npu, node index, node index) in a tick (Workload.watch_coincidences)."""
        found = self._tabled_nodes
        return {found[npu, index] for npu, *indices in met for index in indices if (npu, index) in found}

    def alike(self, keys: Iterable[tuple]) -> set:
        """keys (group, k), with the k-th collective of every group whose members lie as those
        of a key's group do (the same offsets from the first): the ranks of a job run the same
        steps, so where one group's k-th collective met other traffic, its like groups' often
        do too, and running those live at once saves runs of the job."""
        alike: dict = defaultdict(list)
        for group in self._groups:
            alike[_layout(group)].append(group)
        return {(other, k) for group, k in keys for other in alike.get(_layout(group), [group])} | set(keys)

    def issued(self, key: tuple, node: Node, members: Members, npu: int, now: int) -> None:
        if node.op == ALL_TO_ALL:
            if node.idle:  # no dimension to run on: done at once
                self.system.complete(now, npu, members[npu][1])
        elif node.idle:  # done at once, as live (its replay ends as it starts), in this NPU's own issue
            self.system.member_done(now, npu, now, members[npu][1])
        elif (self.forced and key in self.forced) or self._node_table(node) is None:
            self._join(key, node, node.size, members, (npu,), now)  # ASTRA-sim: it starts on this NPU at once
        # else timed once all have issued

    def all_issued(self, key: tuple, first: Node, size: int, members: Members, now: int) -> None:
        if first.idle and first.op != ALL_TO_ALL:  # every member was done when it issued it
            return
        if self.forced and key in self.forced:
            found = None
        else:
            found = self._node_table(first) if size == first.size else self._table(first.op, size, first.involved,
                                                                                     key[0])
        order = self.system.members(key[0])
        if found is not None:  # an all-to-all starts when its last member issues it
            issues = [now] * len(order) if first.op == ALL_TO_ALL else [members[npu][0] for npu in order]
            self._from_table(key, first.op, size, first.involved, *found, members, order, issues, now)
        elif first.op == ALL_TO_ALL:  # its plan needs every member's size: all start now
            self._join(key, first, size, members, order, now)

    # ------------------------------------------------------------------ holding tables

    def _entry_places(self, shapes: list[tuple[int, Node]]) -> dict[tuple, set] | None:
        """Where messages may enter each link the job may use from: None for the NPU the link
        leaves, else the link before it on the message's route (None: some collective cannot
        be planned; its error comes when it runs, and no table is used)."""
        pairs, collectives = set(), set()
        for npu, node in shapes:
            if node.action == DO_SEND:
                pairs.add((npu, node.peer))
            elif node.action == DO_COLLECTIVE and not node.idle:
                collectives.add((node.op, node.size, node.involved, node.group))
        try:
            for shape in collectives:
                pairs.update(self._pairs(self.model.plan(*shape)))
        except SimulationError:
            return None
        places: dict[tuple, set] = defaultdict(set)
        for src, dst in pairs:
            before = None
            for link, _ in self.fabric.route(src, dst):
                places[link].add(before)
                before = link
        return places

    def _message_sizes(self, shapes: list[tuple[int, Node]]) -> dict[int, set[int]]:
        """The sizes of the messages the job may send, by network dimension (a send's in every one)."""
        sizes: dict[int, set[int]] = defaultdict(set)
        every = range(len(self.model.network.dims))
        for _, node in shapes:
            if node.action == DO_SEND:
                for dim in every:
                    sizes[dim].add(node.size)
            elif node.action == DO_COLLECTIVE and not node.idle:
                plan = self.model.plan(node.op, node.size, node.involved, node.group)
                for phase in plan.phases:
                    algorithm = self.replay.algorithm(phase, plan.endpoint_delay)
                    dims = every if phase.span != SPAN_DIM else (phase.dim,)  # rings over several dimensions
                    for dim in dims:
                        sizes[dim].update(_phase_message_sizes(algorithm, phase))
        return sizes

    def _pairs(self, plan: CollectivePlan) -> Iterator[tuple[int, int]]:
        """(sender, receiver) of every message the collective may send."""
        queues = self.model.system.num_queues_per_dim
        for index, phase in enumerate(plan.phases):
            algorithm = self.replay.algorithm(phase, plan.endpoint_delay)
            directions = phase_directions(plan, index, queues)
            for npu in plan.group or range(self.model.network.npus):
                rank, ranks = self.model.ranks(phase, npu, plan.group)
                yield from ((npu, ranks[peer]) for peer in algorithm.peers(rank, directions))

    def _links(self, plan: CollectivePlan, table: HoldingTable) -> TableLinks | None:
        """The links of the collective's table (TableLinks, in its order), where each is entered from
        one place by its own messages and the table's are those its messages may use; else None."""
        position = {npu: k for k, npu in enumerate(plan.group or range(self.model.network.npus))}
        found: dict[tuple, tuple] = {}
        for src, dst in self._pairs(plan):
            before = None
            for link, dim in self.fabric.route(src, dst):
                if found.setdefault(link, (before, position[src], dim)) != (before, position[src], dim):
                    return None
                before = link
        if set(found) != set(table.links):
            return None
        phase = plan.phases[0]
        ring = phase.impl.algorithm in ("ring", "direct")  # messages of one size: each occupies a link that long
        size = message_bytes(phase.op, phase.ranks, phase.bytes_in) if ring else 0
        watched = self.fabric.watched
        return [(link, found[link][0], found[link][1], self.fabric.hop_times(found[link][2], size)[0],
                 watched.get(link)) for link in table.links]

    def _node_table(self, node: Node) -> tuple[HoldingTable, TableLinks] | None:
        """_table of a collective node's own shape (nodes are shared by the rows of one shape)."""
        found = self._node_tables.get(id(node), False)
        if found is False:
            found = self._node_tables[id(node)] = self._table(node.op, node.size, node.involved, node.group)
        return found

    def _table(self, op: str, size: int, involved, group) -> tuple[HoldingTable, TableLinks] | None:
        """The collective's holding table and its links, where they time it exactly when nothing
        else enters its links while it runs (a table, one chunk at a time per NPU, one place
        each link is entered from by its own messages) and the job runs it more times than
        measuring the table takes replays (one for a collective that treats its members alike,
        else one per member)."""
        key = (op, size, involved, group)
        if key not in self._tables:
            found = None
            if self.places is not None and self.model.system.num_queues_per_dim == 1:
                plan = self.model.plan(*key)
                symmetric = translatable(plan) or group_rotation(self.model.network, plan)
                if self._kinds[_kind(*key)] > (1 if symmetric else len(group or self.system.nodes)):
                    table = self.model.holding(*key)
                    links = None if table is None else self._links(plan, table)
                    found = None if links is None else (table, links)
            self._tables[key] = found
        return self._tables[key]

    def _from_table(self, key: tuple, op: str, size: int, involved, table: HoldingTable, links: TableLinks,
                    members: Members, order, issues: list[int], now: int) -> None:
        """Times a collective from its holding table: every member has issued it (now). Checks
        that nothing has entered its shared links from another place since its first message
        would enter them, nor is on its way to any of its links, and reserves the shared links
        until it leaves them (the watched fabric checks the messages that come later). A link
        still busy when its first message would enter it: the collective is replayed alone from
        the links' state instead."""
        fabric = self.fabric
        free, incoming, conflicts, overtaking = fabric.free, fabric.incoming, fabric.conflicts, fabric.overtaking
        finishes, frees, enters = table.evaluate(issues)
        idle = True
        for (link, place, _, _, watch), first in zip(links, enters):
            if free.get(link, 0) > first:
                idle = False
            if incoming.get(link, -1) >= now:  # a message of an earlier communication has yet to enter it
                conflicts.add(key)
            if watch is not None:  # messages from another place (fabric.same_order) that entered since
                strict = overtaking and place is not None
                for other, tick in watch.entries.items():
                    if tick >= first and (other != place or strict):
                        conflicts.add(key)
                for other, (tick, other_key) in watch.bounds.items():
                    if tick >= first and (other != place or strict):
                        conflicts.add(key)
                        conflicts.add(other_key)
        if idle:
            self.tabled_cost += table.replay_cost
        else:
            base = min(issues)
            ends, after = self.model.replay_alone(self.model.plan(op, size, involved, key[0]),
                                                  tuple(t - base for t in issues),
                                                  {link: free[link] - base for link, *_ in links if link in free})
            finishes, frees = [t + base for t in ends], [after[link] + base for link in table.links]
        free.update(zip(table.links, frees))
        for (link, place, sender, occupy, watch), end in zip(links, frees):
            if watch is not None:
                bound = watch.bounds.get(place)
                if bound is None or bound[0] < end - occupy:
                    watch.bounds[place] = (end - occupy, key)
                reservations = watch.reservations
                if len(reservations) > 8:  # those over by now can match no message any more
                    watch.reservations = reservations = [r for r in reservations if r[2] > now]
                reservations.append((place, issues[sender], end, key))
        self.used_shortcuts = True
        call, done, tabled = self.events.call, self.system.member_done, self._tabled_nodes
        for npu, finish in zip(order, finishes):  # its completion is scheduled in its own tick, as live
            call(finish, done, npu, *members[npu])
            tabled[npu, members[npu][1]] = key

    # ------------------------------------------------------------------ live replays

    def _join(self, key: tuple, node: Node, size: int, members: Members, joining: Iterable[int], now: int) -> None:
        """Members start the collective now."""
        instance = self.instances.get(key)
        if instance is None:
            if key in self.deciding:
                self.deciding[key] += joining
                return
            if self.reuse_alone and not self.instances and key not in self.forced:  # idle links: decide at tick's end
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
                self.used_shortcuts = True
                self.live_members[key] = members
                for npu in range(npus):
                    self.events.call(now + alone[npu], self._member_done, key, npu)
                    self._tabled_nodes[npu, members[npu][1]] = key
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
            replay = Replay(self.model.system, self.model.ranks, events, self.model.replay_network(events, self.fabric.free),
                            self.model.timer.p, self.model.comm_scale)
            instance = replay.instance(self.model.plan(node.op, node.size, node.involved, key[0]), lambda *done: None)
            for member, (tick, _) in joined.items():
                events.call(tick, _join, instance, member)
            events.run()
            yield key, instance


def _phase_message_sizes(algorithm, phase) -> set[int]:
    """The sizes of the messages a phase's packet machines send."""
    if isinstance(algorithm, RingAlgorithm):
        return {algorithm.m}
    if isinstance(algorithm, StepsAlgorithm):
        return {size for rank in range(phase.ranks) for _, _, size, _ in algorithm.steps(rank)}
    return {phase.bytes_in}  # doubleBinaryTree: every message is the whole chunk


def _layout(group: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """Where a group's members lie from its first."""
    return None if group is None else tuple(npu - group[0] for npu in group)


def _kind(op: str, size: int, involved, group) -> tuple:
    """Collectives alike but for where their group lies (one holding table serves them all)."""
    return op, size, involved, _layout(group)


def _join(now: int, instance: Instance, npu: int) -> None:
    instance.join(npu, now)
