"""Where each NPU's time goes: every nanosecond up to its finish belongs to exactly one of
compute (device kernels), host (CPU operators), memory, communication or idle, so the parts
add up to the finish time.

An instant belongs to the first of those categories that has a node running on the NPU then:
communication counts only where nothing else runs, which is what "exposed communication"
means to a reader (the time communication alone holds the NPU). ASTRA-sim's own figure,
finish minus device compute, also counts host time and idle time as communication; results
keep it under a name of its own (NpuResult.astra_exposed_comm_ns).
"""

from __future__ import annotations

COMPUTE, HOST, MEMORY, COMMUNICATION = range(4)
CATEGORIES = ("compute", "host", "memory", "communication", "idle")
IDLE = len(CATEGORIES) - 1


class TimeBreakdown:
    """Running-node counts and time spent per category, per NPU. The engine calls
    move(npu, now, category, +1) as a node starts and -1 as it ends, in time order per NPU
    (once or twice per node: kept to one call with few lookups)."""

    __slots__ = ("running", "spent", "since")

    def __init__(self, npus: int):
        self.running = [[0, 0, 0, 0] for _ in range(npus)]
        self.spent = [[0] * len(CATEGORIES) for _ in range(npus)]
        self.since = [0] * npus

    def move(self, npu: int, now: int, category: int, step: int) -> None:
        running = self.running[npu]
        elapsed = now - self.since[npu]
        if elapsed:
            owner = (COMPUTE if running[COMPUTE] else HOST if running[HOST] else MEMORY if running[MEMORY]
                     else COMMUNICATION if running[COMMUNICATION] else IDLE)
            self.spent[npu][owner] += elapsed
            self.since[npu] = now
        running[category] += step

    def totals(self, npu: int, finish_ns: int) -> dict[str, int]:
        """The NPU's time by category up to its finish (the values add up to finish_ns)."""
        self.move(npu, finish_ns, COMPUTE, 0)
        return dict(zip(CATEGORIES, self.spent[npu]))
