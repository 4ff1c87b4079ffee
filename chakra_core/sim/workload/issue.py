"""The workload layer's issue loop: ASTRA-sim's Workload (docs/simulator.md, 'Workload layer').

One GraphFeeder per NPU says which nodes are free of dependencies. At tick 0 and after
every node completion, an NPU visits its free nodes in ascending id order and issues each
one whose hardware slot is free: one CPU op (is_cpu_op), one GPU compute node, and one GPU
communication operation (collective, send, memory, metadata) at a time; receives take no
slot. A compute, memory or replayed node takes its decoded duration; metadata ends at once;
communication goes to the system layer (system/matching.py), which schedules its completion.

It also keeps the per-NPU accounting: results, where the time goes (breakdown.py), the
timeline when asked for, and progress reports.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from chakra_core.sim import breakdown
from chakra_core.sim.decoded import (
    CPU,
    DO_COLLECTIVE,
    DO_COMPUTE,
    DO_RECV,
    DO_REPLAY,
    DO_SEND,
    GPU_COMPUTE,
    NO_SLOT,
    TRACK_OF_SLOT,
    Node,
)
from chakra_core.sim.events import EventQueue
from chakra_core.sim.results import NpuResult
from chakra_core.sim.workload.feeder import GraphFeeder
from chakra_core.sim.workload.order import CompletionOrder
from chakra_core.sim.workload.recorded import Completions, RecordedTimeline

PROGRESS_EVERY = 1 << 16  # completed nodes between progress reports: rare enough to cost nothing
MAX_COINCIDENCES = 4096  # coincidences kept (a run with more is run again with every collective live anyway)


class Workload:
    """Every NPU's feeder, decoded nodes and hardware slots, on one event queue. Node
    completions are events (tick, npu, node index); the engine passes them to complete()."""

    def __init__(self, feeders: list[GraphFeeder | None], nodes: list[list[Node]], events: EventQueue,
                 results: list[NpuResult], record_timeline: bool = False,
                 progress: Callable[[str, int, int], None] | None = None):
        """feeders[npu] None: an NPU a shared run does not simulate (symmetry.py)."""
        npus = len(feeders)
        self.feeders, self.nodes, self.events, self.results = feeders, nodes, events, results
        self.active = [npu for npu, feeder in enumerate(feeders) if feeder is not None]
        self.busy = [[False, False, False, False] for _ in range(npus)]  # per slot
        self.spent = breakdown.TimeBreakdown(npus)
        self.extensions: set[str] = set()  # "memory" once a memory node ran (its timing is an assumption)
        self.system = None  # the system layer, attached before the run
        # timeline recording, only when asked for: the issue tick per node, and per completion its NPU,
        # node index and tick (flat arrays of machine ints: a million-node run keeps 32 bytes a node)
        self.issued_at = [array("q", bytes(8 * len(n))) for n in nodes] if record_timeline else None
        self.ran: Completions | None = Completions() if record_timeline else None
        self.progress = progress
        self.total_nodes = sum(len(nodes[npu]) for npu in self.active)
        self.done_nodes, self.report_every = 0, PROGRESS_EVERY
        self.stands_for = npus // max(1, len(self.active))  # NPUs each simulated one stands for (shared: the same for all)
        # with watch_coincidences(): per NPU (the last tick a node scheduled in its own tick completed, the node)
        self._scheduled_in_tick: list[tuple[int, int]] | None = None
        self.coincidences: list[tuple[int, int, int]] = []  # (npu, node index, node index) that met
        self.order = CompletionOrder(events, npus)  # ties between completions of one tick (workload/order.py)
        self.at = self.order.at  # schedules a completion (tick, npu, index)
        # with add_device_timing(): per NPU the tick its device compute slot last became free, and the delays
        self._device_free_at: list[int] | None = None
        self._launch_latency = self._kernel_gap = 0

    def add_device_timing(self, launch_latency_ns: int, kernel_gap_ns: int) -> None:
        """Device compute nodes start late (SystemConfig.device_timing): one issued while the device
        sat idle launch_latency_ns after it became free to run, one issued as the previous device
        work ended kernel_gap_ns after it. The node holds its slot for the delay too."""
        self._device_free_at = [-1] * len(self.feeders)
        self._launch_latency, self._kernel_gap = launch_latency_ns, kernel_gap_ns

    def watch_coincidences(self) -> None:
        """Records, as `coincidences`, the completions on one NPU in one tick of two nodes whose
        completions were scheduled during that tick (all but compute and replayed durations):
        whether they formed one group (workload/order.py) may follow the order of events of that
        tick, which the aware mode's holding tables do not reproduce (system/live.py)."""
        self._scheduled_in_tick = [(-1, -1)] * len(self.feeders)

    @property
    def ties(self) -> int:
        return self.order.ties

    def start(self, start_at: list[int] | None = None) -> None:
        """Every NPU issues at tick 0, or at start_at[npu] (jobs placed together may start apart)."""
        for npu in self.active:
            if start_at is None or not start_at[npu]:
                self.issue(npu, 0)
            else:
                self.events.call(start_at[npu], self._issue_later, npu)

    def _issue_later(self, now: int, npu: int) -> None:
        self.issue(npu, now)

    def complete(self, now: int, npu: int, scheduled: tuple[int, int]) -> None:
        """A node of `npu` ends now (the next of the group of the event's node, workload/order.py):
        its slot and children are free, and the NPU issues again."""
        index = self.order.next_of(now, npu, scheduled)
        node = self.nodes[npu][index]
        self.busy[npu][node.slot] = False
        if node.slot == GPU_COMPUTE and self._device_free_at is not None:
            self._device_free_at[npu] = now
        if self._scheduled_in_tick is not None and (node.action not in (DO_COMPUTE, DO_REPLAY) or not node.duration):
            last, other = self._scheduled_in_tick[npu]
            if last == now and len(self.coincidences) < MAX_COINCIDENCES:
                self.coincidences.append((npu, other, index))
            self._scheduled_in_tick[npu] = (now, index)
        if node.category is not None:
            self.spent.move(npu, now, node.category, -1)
        self.feeders[npu].free_children(index)
        r = self.results[npu]
        r.nodes += 1
        r.finish_ns = now
        self.done_nodes += 1
        if self.done_nodes == self.report_every and self.progress is not None:
            self.progress("simulating nodes", self.done_nodes * self.stands_for, self.total_nodes * self.stands_for)
            self.report_every += PROGRESS_EVERY
        if self.ran is not None:
            self.ran.add(npu, index, now)
        self.issue(npu, now)

    def issue(self, npu: int, now: int) -> None:
        """Visits the free nodes in ascending id order; those whose slot is busy go back."""
        feeder, npu_nodes, slots, finish_at = self.feeders[npu], self.nodes[npu], self.busy[npu], self.at
        self.order.issuing = npu
        deferred = []
        while True:
            index = feeder.next_issuable()
            if index is None:
                break
            node = npu_nodes[index]
            if slots[node.slot] and node.slot != NO_SLOT:
                deferred.append(index)
                continue
            slots[node.slot] = True
            if node.category is not None:
                self.spent.move(npu, now, node.category, 1)
            if self.issued_at is not None:
                self.issued_at[npu][index] = now
            action = node.action
            if action == DO_COMPUTE or action == DO_REPLAY:
                delay = 0
                if node.slot == GPU_COMPUTE and self._device_free_at is not None:
                    delay = self._launch_latency if now > self._device_free_at[npu] else self._kernel_gap
                finish_at(now + delay + node.duration, npu, index)
                if action == DO_COMPUTE:
                    if node.slot == CPU:
                        self.results[npu].cpu_ns += node.duration
                    else:
                        self.results[npu].compute_ns += node.duration
                elif node.op == "memory":
                    self.extensions.add("memory")
            elif action == DO_COLLECTIVE:
                self.system.collective(npu, index, node, now)
            elif action == DO_SEND:
                self.system.send(npu, index, node, now)
            elif action == DO_RECV:
                self.system.recv(npu, index, node, now)
            else:  # metadata / invalid: done at once (later in this same tick)
                finish_at(now, npu, index)
        for index in deferred:
            feeder.push_back(index)
        self.order.issuing = -1

    def time_by_category(self, npu: int) -> dict[str, int]:
        return self.spent.totals(npu, self.results[npu].finish_ns)

    def timeline(self) -> RecordedTimeline | None:
        """One event per node run, in completion order (None unless recorded)."""
        if self.ran is None:
            return None
        return RecordedTimeline(self.ran, self.issued_at, self.nodes, [f.ids if f is not None else None for f in self.feeders],
                                [f.table if f is not None else None for f in self.feeders])

    def node_id(self, npu: int, index: int) -> int:
        return int(self.feeders[npu].ids[index])

    def unfinished(self) -> dict[int, int]:
        """npu -> nodes not finished, for NPUs that have any."""
        return {npu: f.remaining for npu, f in enumerate(self.feeders) if f is not None and f.remaining}

    def blocked(self, report: dict[int, list[str]], explained: dict[int, set]) -> None:
        """Adds, per NPU, the nodes that wait on parents (those not explained by the system layer)."""
        for npu in self.active:
            feeder = self.feeders[npu]
            blocked = feeder.remaining - len(explained[npu])
            if blocked > 0:
                report[npu].append(f"{blocked} node(s) wait on unfinished parents")
