"""Collectives replayed message by message on every member NPU (docs/simulator.md, 'The model').

Where a collective is not a flow shop of identical closed-form phases (members that finish
at different times, congestion, members that issue it at different ticks), it is replayed
as ASTRA-sim runs it:

- each member creates the collective's chunks when it issues it and puts them through its
  own per-dimension queues (at most C running per queue, by priority; docs/simulator.md,
  'Queues and priorities'); a chunk whose phase ends joins the queue of its next phase at
  that tick;
- each running (member, chunk, phase) is a packet machine of the phase's algorithm, talking
  to the ranks of that phase (the NPUs that differ from the member in the phase's dimension
  only, every NPU for the one* implementations, or a sub-group's members);
- a message is handed to a network back-end (network/unaware.py): congestion-unaware (a fixed
  delay) or congestion-aware (FIFO links, network/aware.py); a message that arrives before its
  receive is posted is held and received when it is posted.

The packet machines (docs/simulator.md, 'Collective algorithms'): ring and direct are
ASTRA-sim's Ring / AllToAll machine (RingMachine); halvingDoubling and its extensions
(Bruck's all-to-all, folding in the extra ranks of a non-power-of-two N) are a serial list
of steps (StepsMachine); doubleBinaryTree is tree.TreeMachine.
"""

from __future__ import annotations

import math
from collections import deque
from functools import lru_cache

from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.system import tree
from chakra_core.sim.system.plan import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    CollectivePlan,
    Phase,
    message_bytes,
    queue_choices,
    ring_direction,
    slots_per_queue,
)

# One step of a serial algorithm, for one rank: (destination rank or None, source rank or None,
# bytes sent, bytes reduced by the packet its receive creates: 0 for none)
Step = tuple


def halving_doubling_steps(op: str, n: int, rank: int, d_in: int) -> tuple[Step, ...]:
    """The steps of rank `rank` of a halvingDoubling phase and its extensions
    (docs/simulator.md, 'halvingDoubling').

    Power-of-two N: (size, partner distance) halve then double (all-reduce), halve
    (reduce-scatter) or double with partners from far to near (all-gather); the partner at
    distance r is rank + r if floor(rank / r) is even, else rank - r; packets 2..L reduce
    (all-reduce, reduce-scatter) with the size of the message they send.
    All-to-all (ASTRA-sim refuses it): Bruck's algorithm, ceil(log2 N) steps of D/2 to the
    rank 2^k ahead, from the rank 2^k behind.
    Other N (ASTRA-sim hangs): the extra ranks N - 2^L .. fold in, each sending its D to
    rank - 2^L (which reduces it) and getting D back after the power-of-two core has run.
    """
    if op == ALL_TO_ALL:
        return tuple(((rank + (1 << k)) % n, (rank - (1 << k)) % n, d_in // 2, 0) for k in range((n - 1).bit_length()))
    core = 1 << (n.bit_length() - 1)
    if core == n:
        return _power_of_two_steps(op, n, rank, d_in)
    reduced = d_in if op != ALL_GATHER else 0
    if rank >= core:  # an extra rank: hand the data in, get the result back
        return ((rank - core, None, d_in, 0), (None, rank - core, d_in, 0))
    steps = _power_of_two_steps(op, core, rank, d_in)
    if rank + core < n:  # a core rank with an extra partner: take its data in first, hand the result back last
        return ((None, rank + core, d_in, reduced),) + steps + ((rank + core, None, d_in, 0),)
    return steps


def _power_of_two_steps(op: str, n: int, rank: int, d_in: int) -> tuple[Step, ...]:
    levels = n.bit_length() - 1
    halving = [(d_in >> (k + 1), 1 << k) for k in range(levels)]  # (message bytes, partner distance)
    if op == ALL_REDUCE:
        schedule = halving + halving[::-1]
    elif op == REDUCE_SCATTER:
        schedule = halving
    else:  # all-gather: doubling sizes, partners from far to near
        schedule = [(d_in << k, n >> (k + 1)) for k in range(levels)]
    steps = []
    for k, (size, distance) in enumerate(schedule):
        partner = rank + distance if (rank // distance) % 2 == 0 else rank - distance
        # the packet created by this step's receive is packet k + 2; packets 2..L reduce
        reduced = schedule[k + 1][0] if op != ALL_GATHER and k + 2 <= levels else 0
        steps.append((partner, partner, size, reduced))
    return tuple(steps)


class _Machine:
    """One rank's phase of one chunk: posts receives, holds messages that arrive before their receive."""

    __slots__ = ("inst", "algo", "npu", "chunk", "phase", "rank", "peers", "posted", "held")

    def __init__(self, inst: Instance, algo, npu: int, chunk: int, phase: int, rank: int, peers: tuple[int, ...]):
        self.inst, self.algo, self.npu, self.chunk, self.phase = inst, algo, npu, chunk, phase
        self.rank, self.peers = rank, peers
        self.posted: dict[int, int] = {}  # source rank -> receives posted and not matched yet
        self.held: dict[int, int] = {}  # source rank -> messages arrived before their receive

    def send(self, now: int, dst: int, size: int) -> None:
        self.inst.send(now, self, dst, size)

    def post(self, now: int, src: int) -> None:
        """Posts a receive from rank src; a message already held completes it at once."""
        held = self.held.get(src, 0)
        if held:
            self.held[src] = held - 1
            self.received(now)
        else:
            self.posted[src] = self.posted.get(src, 0) + 1

    def arrive(self, now: int, src: int) -> None:
        posted = self.posted.get(src, 0)
        if posted:
            self.posted[src] = posted - 1
            self.received(now)
        else:
            self.held[src] = self.held.get(src, 0) + 1

    def received(self, now: int) -> None:
        raise NotImplementedError


class RingAlgorithm:
    """ASTRA-sim's Ring and AllToAll ("direct") packet machine, per phase (docs/simulator.md,
    'Ring', 'Direct').

    P packets are in flight (ring: 1; direct: min(window, N-1)). Packets come in blocks: P
    local ones, then N-1 (ring) or P (direct) network ones, each created by a receive.
    A packet is ready after e, or e + p(m) if it reduces: network packets of reduce-scatter,
    and of all-reduce in every other block (the first, third, ...). Each ready packet adds a
    free slot; the oldest unsent packet then sends to its destination (ring: the neighbour;
    direct: rank+1, rank+2, ... rotating, one per packet) and posts the receive from the
    mirror source. Direct all-reduce holds its last round of sends until the first N-1
    receives are in, then releases every packet ready by then. The phase ends when every
    send is made and P packets are free.
    """

    __slots__ = ("op", "n", "m", "e", "p", "parallel", "block", "sends", "gated", "rotate")

    def __init__(self, phase: Phase, e: int, p):
        n, op = phase.ranks, phase.op
        self.op, self.n, self.e = op, n, e
        self.m = message_bytes(op, n, phase.bytes_in)
        self.p = p(self.m)
        self.rotate = phase.impl.algorithm == "direct"
        if self.rotate:
            self.parallel = min(phase.impl.window or n - 1, n - 1)  # all-reduce below N-1 is refused when planned
            self.block = 2 * self.parallel
            self.sends = 2 * (n - 1) if op == ALL_REDUCE else n - 1
        else:
            self.parallel, self.block = 1, n
            self.sends = {ALL_REDUCE: 2 * (n - 1), ALL_TO_ALL: n * (n - 1) // 2}.get(op, n - 1)
        self.gated = self.rotate and op == ALL_REDUCE

    def machine(self, inst: Instance, npu: int, chunk: int, phase: int, rank: int, peers) -> RingMachine:
        return RingMachine(inst, self, npu, chunk, phase, rank, peers)

    def peers(self, rank: int, directions: set[int]) -> set[int]:
        """The ranks `rank` sends to: its neighbour in each direction its chunks run (ring), or
        every other rank (direct)."""
        offsets = range(1, self.n) if self.rotate else directions
        return {(rank + offset) % self.n for offset in offsets}


class RingMachine(_Machine):
    """RingAlgorithm's machine for one rank's phase of one chunk."""

    __slots__ = ("direction", "sends_left", "free", "receives", "inserted", "unsent")

    def __init__(self, inst, algo: RingAlgorithm, npu, chunk, phase, rank, peers):
        super().__init__(inst, algo, npu, chunk, phase, rank, peers)
        self.direction = inst.direction(chunk, phase)
        self.sends_left = algo.sends
        self.free = self.receives = self.inserted = 0
        self.unsent: deque[int] = deque()  # destination offsets of the packets not sent yet, oldest first

    def start(self, now: int) -> None:
        for _ in range(self.algo.parallel):
            self._insert(now)

    def _insert(self, now: int) -> None:
        algo = self.algo
        q = self.inserted
        self.inserted = q + 1
        # direct: ASTRA-sim moves its receiver on by one peer per packet, skipping itself
        self.unsent.append(q % (algo.n - 1) + 1 if algo.rotate else 1)
        network = q % algo.block >= algo.parallel
        reduces = network and (algo.op == REDUCE_SCATTER or (algo.op == ALL_REDUCE and not (q // algo.block) % 2))
        self.inst.call(now + algo.e + (algo.p if reduces else 0), self._packet_ready)

    def _packet_ready(self, now: int) -> None:
        algo = self.algo
        self.free += 1
        if algo.gated and self.sends_left <= algo.parallel:
            if self.receives < algo.n - 1:
                return
            for _ in range(algo.parallel):
                self._send_oldest(now)
        else:
            self._send_oldest(now)
        if not self.sends_left and self.free == algo.parallel:
            self.inst.phase_done(now, self)

    def _send_oldest(self, now: int) -> None:
        if self.unsent and self.sends_left and self.free:
            offset = self.unsent.popleft() * self.direction
            self.sends_left -= 1
            self.free -= 1
            n = self.algo.n
            self.send(now, (self.rank + offset) % n, self.algo.m)
            self.post(now, (self.rank - offset) % n)

    def received(self, now: int) -> None:
        self.receives += 1
        self._insert(now)


class StepsAlgorithm:
    """A serial algorithm (halvingDoubling and its extensions): one packet in flight.

    The first packet is local (ready after e). A ready packet runs the next step: it sends
    (if the step sends) and posts the step's receive; the receive creates the next packet,
    ready after e plus the reduction of the bytes it reduces. A step without a receive
    creates the next packet at once. The phase ends when the packet after the last step is ready.
    """

    __slots__ = ("op", "n", "d_in", "e", "p", "steps")

    def __init__(self, phase: Phase, e: int, p):
        self.op, self.n, self.d_in, self.e, self.p = phase.op, phase.ranks, phase.bytes_in, e, p
        self.steps = lru_cache(maxsize=None)(lambda rank: halving_doubling_steps(self.op, self.n, rank, self.d_in))

    def machine(self, inst: Instance, npu: int, chunk: int, phase: int, rank: int, peers) -> StepsMachine:
        return StepsMachine(inst, self, npu, chunk, phase, rank, peers)

    def peers(self, rank: int, directions: set[int]) -> set[int]:
        """The ranks `rank` sends to (its steps fix them, whatever the ring directions)."""
        return {dst for dst, _, _, _ in self.steps(rank) if dst is not None}


class StepsMachine(_Machine):
    """StepsAlgorithm's machine for one rank's phase of one chunk."""

    __slots__ = ("steps", "step")

    def __init__(self, inst, algo: StepsAlgorithm, npu, chunk, phase, rank, peers):
        super().__init__(inst, algo, npu, chunk, phase, rank, peers)
        self.steps = algo.steps(rank)
        self.step = 0

    def start(self, now: int) -> None:
        self.inst.call(now + self.algo.e, self._packet_ready)

    def _packet_ready(self, now: int) -> None:
        if self.step == len(self.steps):
            self.inst.phase_done(now, self)
            return
        dst, src, size, _ = self.steps[self.step]
        if dst is not None:
            self.send(now, dst, size)
        if src is not None:
            self.post(now, src)
        else:
            self.received(now)

    def received(self, now: int) -> None:
        reduced = self.steps[self.step][3]
        self.step += 1
        self.inst.call(now + self.algo.e + (self.algo.p(reduced) if reduced else 0), self._packet_ready)


class FixedAlgorithm:
    """A phase of known duration on every rank (a closed form): no messages, just its time."""

    __slots__ = ("duration",)

    def __init__(self, duration: int):
        self.duration = duration

    def machine(self, inst: Instance, npu: int, chunk: int, phase: int, rank: int, peers) -> FixedMachine:
        return FixedMachine(inst, npu, chunk, phase, self.duration)


class FixedMachine:
    __slots__ = ("inst", "npu", "chunk", "phase", "duration")

    def __init__(self, inst: Instance, npu: int, chunk: int, phase: int, duration: int):
        self.inst, self.npu, self.chunk, self.phase, self.duration = inst, npu, chunk, phase, duration

    def start(self, now: int) -> None:
        self.inst.call(now + self.duration, self.inst.phase_done, self)

    def arrive(self, now: int, src: int) -> None:
        raise SimulationError("a phase of fixed duration receives no messages")


def algorithm(phase: Phase, e: int, p):
    """The packet machine maker of a phase; p(bytes) -> local reduction ns."""
    kind = phase.impl.algorithm
    if kind == "ring" or kind == "direct":
        return RingAlgorithm(phase, e, p)
    if kind == "halvingDoubling":
        return StepsAlgorithm(phase, e, p)
    if kind == "doubleBinaryTree":
        return tree.TreeAlgorithm(phase, e, p)
    raise SimulationError(f"collective implementation {phase.impl.name!r} is not modelled yet")


class Replay:
    """Collective instances on one event queue and one network back-end (network/unaware.py).

    `ranks(phase, npu, group)` -> (the NPU's rank in the phase, the phase's NPUs by rank);
    `p(bytes)` is the local reduction time. With `scale` (comm_scale), endpoint delays and
    reductions are scaled here, each truncated; messages by the network.
    """

    def __init__(self, system, ranks, events: EventQueue, network, p, scale: float = 1.0):
        self.system, self.ranks, self.events, self.network = system, ranks, events, network
        self.scale = scale
        self.p = p if scale == 1.0 else lru_cache(maxsize=None)(lambda size: math.floor(p(size) * scale))
        self._algorithms: dict[tuple[Phase, int], object] = {}

    def scaled(self, ns: int) -> int:
        return ns if self.scale == 1.0 else math.floor(ns * self.scale)

    def algorithm(self, phase: Phase, e: int):
        key = (phase, e)
        if key not in self._algorithms:
            self._algorithms[key] = algorithm(phase, self.scaled(e), self.p)
        return self._algorithms[key]

    def instance(self, plan: CollectivePlan, on_done, fixed: bool = False) -> Instance:
        """A new collective; on_done(npu, tick) is called as each member finishes. fixed: its
        phases take their closed-form durations instead of running their packet machines."""
        return Instance(self, plan, on_done, fixed)


class Instance:
    """One collective: its members' queues and the packet machines of their running phases."""

    def __init__(self, replay: Replay, plan: CollectivePlan, on_done, fixed: bool = False):
        self.replay, self.plan, self.on_done = replay, plan, on_done
        system = replay.system
        self.call = replay.events.call
        self.queues_per_dim = system.num_queues_per_dim
        self.slots = slots_per_queue(system)
        self.choices = queue_choices(plan, self.queues_per_dim)
        self.algorithms = [FixedAlgorithm(phase.duration) if fixed else replay.algorithm(phase, plan.endpoint_delay)
                           for phase in plan.phases]
        self.running: dict[tuple[int, int, int], list[tuple[int, int]]] = {}  # (npu, dim, queue) -> (chunk, phase)
        # -> (chunk, phase) in the order they came: ASTRA-sim gives all of a collective's chunks one
        # priority (Sys::generate_collective), and a chunk queues after every one of equal priority
        self.waiting: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        self.left: dict[int, int] = {}  # npu -> chunks not finished
        self.machines: dict[tuple[int, int, int], _Machine] = {}  # (npu, chunk, phase) -> its machine
        network = replay.network
        # a machine takes a message at its arrival tick: if the network reports it at the send, then
        self._arrives = self._deliver_then if network is not None and network.reports_at_send else self._deliver

    def join(self, npu: int, now: int) -> None:
        """The member issues the collective: all its chunks are created and queued at once."""
        plan = self.plan
        if not plan.phases:  # nothing to do on any dimension
            self.on_done(npu, now)
            return
        self.left[npu] = plan.chunks
        for chunk in range(plan.chunks):
            queue = self._enqueue(npu, chunk, 0)
            self._start_waiters(queue, now)

    def direction(self, chunk: int, phase: int) -> int:
        return ring_direction(self.choices[chunk][phase], self.queues_per_dim)

    def _enqueue(self, npu: int, chunk: int, phase: int) -> tuple[int, int, int]:
        queue = (npu, self.plan.phases[phase].dim, self.choices[chunk][phase])
        self.waiting.setdefault(queue, []).append((chunk, phase))
        return queue

    def _start_waiters(self, queue: tuple[int, int, int], now: int) -> None:
        line = self.waiting.get(queue)
        running = self.running.setdefault(queue, [])
        while line and len(running) < self.slots:
            chunk, phase = line.pop(0)
            running.append((chunk, phase))
            self.machine(queue[0], chunk, phase).start(now)

    def machine(self, npu: int, chunk: int, phase: int) -> _Machine:
        key = (npu, chunk, phase)
        machine = self.machines.get(key)
        if machine is None:
            rank, peers = self.replay.ranks(self.plan.phases[phase], npu, self.plan.group)
            machine = self.machines[key] = self.algorithms[phase].machine(self, npu, chunk, phase, rank, peers)
        return machine

    def send(self, now: int, machine: _Machine, dst: int, size: int) -> None:
        to = machine.peers[dst]
        self.replay.network.send(now, machine.npu, to, size, self._arrives, (to, machine.chunk, machine.phase,
                                                                              machine.rank))

    def _deliver_then(self, arrival: int, *message) -> None:
        self.call(arrival, self._deliver, *message)

    def _deliver(self, now: int, npu: int, chunk: int, phase: int, src: int) -> None:
        self.machine(npu, chunk, phase).arrive(now, src)

    def phase_done(self, now: int, machine: _Machine) -> None:
        """At this tick: the chunk joins its next queue, the old queue starts waiters, then the new one."""
        npu, chunk, phase = machine.npu, machine.chunk, machine.phase
        del self.machines[(npu, chunk, phase)]
        old = (npu, self.plan.phases[phase].dim, self.choices[chunk][phase])
        self.running[old].remove((chunk, phase))
        if phase + 1 < len(self.plan.phases):
            new = self._enqueue(npu, chunk, phase + 1)
            self._start_waiters(old, now)
            self._start_waiters(new, now)
            return
        self.left[npu] -= 1
        if not self.left[npu]:
            self.on_done(npu, now)
        self._start_waiters(old, now)

    def stuck(self) -> list[tuple[int, str]]:
        """(NPU, what it runs and what waits behind it) for a replay that stopped unfinished:
        each NPU orders its own queues, so members that run a dimension's queue in different
        orders can wait for one another for ever, as ASTRA-sim's would."""
        phases = self.plan.phases

        def name(entry: tuple[int, int]) -> str:
            return f"chunk {entry[0]}'s {phases[entry[1]].op} on dimension {phases[entry[1]].dim}"

        lines = []
        for queue, running in sorted(self.running.items()):
            if running:
                waiting = self.waiting.get(queue) or []
                lines.append((queue[0], f"runs {', '.join(map(name, running))}"
                              + (f" while {name(waiting[0])} waits behind it" if waiting else "")))
        return lines

    def stuck_error(self) -> SimulationError:
        lines = [f"NPU {npu} {text}" for npu, text in self.stuck()]
        return SimulationError(
            f"{self.plan.op} of {self.plan.size} B cannot finish: its members wait for one another ("
            f"{'; '.join(lines[:4])}{'; ...' if len(lines) > 4 else ''}): each NPU runs its queues in its own order"
            + (", one chunk at a time per queue here" if self.slots == 1 else ""))


def replay_alone(replay: Replay, plan: CollectivePlan, members: tuple[int, ...],
                 offsets: tuple[int, ...] | None, fixed: bool = False) -> tuple[int, ...]:
    """Each member's finish tick when it issues the collective at its offset (default 0) and
    nothing else uses the network."""
    finish: dict[int, int] = {}
    instance = replay.instance(plan, finish.__setitem__, fixed)
    for i, npu in enumerate(members):
        replay.events.call(offsets[i] if offsets else 0, lambda now, npu=npu: instance.join(npu, now))
    replay.events.run()
    if len(finish) != len(members):
        raise instance.stuck_error()
    return tuple(finish[npu] for npu in members)
