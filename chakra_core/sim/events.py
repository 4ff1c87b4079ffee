"""The simulator's discrete-event core: what every replay and the engine schedule on.

Events run in tick order; events of the same tick run in the order they were scheduled,
and an event scheduled during a tick for that same tick runs later in it, as in ASTRA-sim's
event queue (docs/simulator.md, 'Units and ticks').

An event is any tuple of values. The engine's own are (NPU, node index); the message-level
replays schedule calls, (CALL, (function, arguments)), so that the engine and the live
congestion-aware replay share one queue and one tie order.
"""

from __future__ import annotations

from heapq import heappop, heappush


CALL = -1  # first value of a scheduled call (never an NPU id)


class EventQueue:
    __slots__ = ("_heap", "_sequence")

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._sequence = 0

    def at(self, tick: int, *event) -> None:
        """Schedules `event` (any tuple of values) for `tick`."""
        heappush(self._heap, (tick, self._sequence, *event))
        self._sequence += 1

    def call(self, tick: int, function, *args) -> None:
        """Schedules function(tick, *args)."""
        heappush(self._heap, (tick, self._sequence, CALL, (function, args)))
        self._sequence += 1

    def run_calls(self) -> None:
        """Runs a queue that holds only calls until it is empty (a replay of its own)."""
        heap = self._heap
        while heap:
            tick, _, _, (function, args) = heappop(heap)
            function(tick, *args)

    def pop(self) -> tuple:
        """(tick, *event) of the next event."""
        tick, _, *event = heappop(self._heap)
        return (tick, *event)

    def __bool__(self) -> bool:
        return bool(self._heap)


def insert_by_priority(line: list, item, priority_of) -> None:
    """Queues `item` after every entry of equal or higher priority (higher runs first)."""
    mine = priority_of(item)
    at = next((i for i, entry in enumerate(line) if priority_of(entry) < mine), len(line))
    line.insert(at, item)
