"""The simulator's discrete-event core: what every layer and replay schedules on.

Events run in tick order; events of the same tick run in the order they were scheduled,
and an event scheduled during a tick for that same tick runs later in it, as in ASTRA-sim's
event queue (docs/simulator.md, 'Units and ticks').

An event is a node completion, (NPU, node index), or a call, (CALL, (function, arguments)),
so that the workload layer, the network and the live replays share one queue and one tie
order.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

CALL = -1  # first value of a scheduled call (never an NPU id)


class EventQueue:
    __slots__ = ("_heap", "_sequence", "now", "_tick_start", "_running")

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._sequence = 0
        self.now = 0  # the tick of the event running (what the workload's completion order needs)
        self._tick_start = 0  # the sequence number of the first event scheduled after this tick began
        self._running = -1  # the sequence number of the event running

    @property
    def scheduled_before_tick(self) -> bool:
        """Whether the event running was scheduled before its tick began (then it runs before
        every event scheduled in its tick, in the same place among them whatever else runs)."""
        return self._running < self._tick_start

    def at(self, tick: int, npu: int, index) -> None:
        """Schedules the completion of node `index` of `npu` for `tick` (what the index is, is
        the workload layer's: workload/order.py)."""
        heappush(self._heap, (tick, self._sequence, npu, index))
        self._sequence += 1

    def call(self, tick: int, function, *args) -> None:
        """Schedules function(tick, *args)."""
        heappush(self._heap, (tick, self._sequence, CALL, (function, args)))
        self._sequence += 1

    def run(self, complete: Callable[[int, int, int], None] | None = None) -> int | None:
        """Runs events until none is left: calls, and complete(tick, npu, index) for each node
        completion (a queue of calls only, a replay of its own, needs none). Returns the tick
        of the last event (None if there was none)."""
        heap = self._heap
        tick = None
        self._tick_start = self._sequence  # what is queued now was scheduled before the first tick ran
        while heap:
            tick, self._running, npu, index = heappop(heap)
            if tick != self.now:
                self._tick_start = self._sequence
            self.now = tick
            if npu == CALL:
                function, args = index
                function(tick, *args)
            else:
                complete(tick, npu, index)
        return tick
