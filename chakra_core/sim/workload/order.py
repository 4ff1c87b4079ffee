"""The order of an NPU's completions that fall in one tick (docs/simulator.md, 'Shared simulation').

Events of one tick run in the order they were scheduled (events.py). Where the system layer
schedules two completions of one NPU, that order can follow the order in which other NPUs'
events ran, which differs between a shared run (sim/symmetry.py: copies of an NPU do not run)
and the whole job, and between the aware mode's holding tables and the live replay. So the
completions of one NPU scheduled in one tick for one tick form a group that runs in the order
of node indices (the same in every copy of an NPU): each completion's event runs whichever of
its group's nodes has the smallest index and has not run yet.

That order is the same in every run where the group is whole before its first event runs. It
is, where every completion of the group was scheduled by an event that was itself scheduled
before the tick began (those events all run before any the tick schedules), or by the NPU's
own issue loop (whose order follows the NPU's own completions). A group of two or more that
a completion joins otherwise (scheduled in its tick by an event of that tick that is not the
NPU's own issue) counts as a tie: a shared run with one does not stand for the job.
"""

from __future__ import annotations

from heapq import heappop, heappush

from chakra_core.sim.events import EventQueue


class CompletionOrder:
    """Schedules completions on the event queue (at) and says which node each one's event runs
    (next_of); counts `ties` (above). `issuing` is the NPU whose issue loop runs (-1: none)."""

    def __init__(self, events: EventQueue, npus: int):
        self.events = events
        self.issuing = -1
        self.ties = 0
        self._groups: dict[tuple[int, int, int], int | list[int]] = {}  # -> its node indices not yet run
        self._in_tick: list[tuple] = [(None, 0, False)] * npus  # per NPU: (group of its tick, size, uncertain)

    def at(self, tick: int, npu: int, index: int) -> None:
        """Schedules the completion of node `index` of `npu` for `tick`."""
        events = self.events
        now = events.now
        key = (npu, tick, now)
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = index
        elif type(group) is int:
            self._groups[key] = [min(group, index), max(group, index)]
        else:
            heappush(group, index)
        if tick == now:
            uncertain = not events.scheduled_before_tick and self.issuing != npu
            last, size, was = self._in_tick[npu]
            size, uncertain = (size + 1, was or uncertain) if last == key else (1, uncertain)
            if size > 1 and uncertain:
                self.ties += 1
            self._in_tick[npu] = (key, size, uncertain)
        events.at(tick, npu, (index, now))  # the event carries the tick it was scheduled in: its group's key

    def next_of(self, now: int, npu: int, scheduled: tuple[int, int]) -> int:
        """The node whose completion the event scheduled as (node index, tick scheduled in) runs."""
        key = (npu, now, scheduled[1])
        group = self._groups[key]
        if type(group) is int:
            del self._groups[key]
            return group
        first = heappop(group)
        if not group:
            del self._groups[key]
        return first
