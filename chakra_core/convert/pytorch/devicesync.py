"""The host waiting for the device (docs/ingestion.md, 'Threads and streams').

Kernels run asynchronously on their streams; a synchronising runtime call (cudaStreamSynchronize,
cudaDeviceSynchronize, cudaEventSynchronize, a blocking cudaMemcpy; `aten::item` reaches one
through `_local_scalar_dense`) returns only once the device work launched before it has ended.
Kineto shows that wait inside the operator that made the call, as its own time: the simulator
would run it as host work, and a host made faster (the profiler's cost taken out) would still
wait as long as it did when recorded.

The part of the call during which launched device work was still running is cut from the
operator's exclusive time, and the first operator its thread starts after the call depends on
the last-ending device work launched before it, so the simulator makes the wait from the
dependency, as long as the device then needs. Device work counts only where it becomes a node
(`eligible`); every stream counts, since Kineto does not say which stream a call waited on. An
event synchronisation that did not wait is left alone: its event may have been recorded long
before the call, after none of the work launched since.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from chakra_core.convert.pytorch.kineto import CpuEvent, DeviceEvent, RuntimeEvent, innermost_open

SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",
})
# these wait for the work before an event recorded earlier, which Kineto does not name
EVENT_SYNCS = frozenset({"cudaEventSynchronize", "hipEventSynchronize"})


@dataclass(frozen=True)
class DeviceWait:
    """Thread `tid` returned from a synchronising call at `resumed_at`, having waited for
    `waited_for` (and the device work before it)."""

    tid: int
    resumed_at: float
    waited_for: DeviceEvent


class _LaunchedWork:
    """Device work in launch order, with the last-ending one launched by each moment."""

    def __init__(self, work: list[tuple[float, DeviceEvent]]):
        work.sort(key=lambda x: x[0])
        self.launches = [ts for ts, _ in work]
        self.latest: list[DeviceEvent] = []  # latest[k]: the last-ending of work[:k + 1]
        for _, d in work:
            last = self.latest[-1] if self.latest else None
            self.latest.append(d if last is None or d.ts + d.dur > last.ts + last.dur else last)

    def last_ending_before(self, t: float) -> DeviceEvent | None:
        k = bisect.bisect_left(self.launches, t) - 1
        return self.latest[k] if k >= 0 else None


def remove_waiting_for_device(runtime: list[RuntimeEvent], operators: list[CpuEvent], eligible: list[DeviceEvent],
                              totals: dict[str, float]) -> list[DeviceWait]:
    """Cut each synchronising call's wait for the device out of the exclusive time of the kept
    operator (`operators`) it was made in; returns the waits, for the dependencies."""
    syncs = [r for r in runtime if r.name in SYNC_CALLS]
    if not syncs or not eligible:
        return []
    launched = _launched(runtime, eligible)
    caller = dict(zip(map(id, syncs), _callers(operators, syncs)))
    waits = []
    for call in syncs:
        op, waited_for = caller.get(id(call)), launched.last_ending_before(call.ts)
        if op is None or waited_for is None:
            continue
        end = call.ts + call.dur
        waited = max(0.0, min(end, waited_for.ts + waited_for.dur) - call.ts)
        if call.name in EVENT_SYNCS and not waited:
            continue  # its event may have been recorded long before: it waits for nothing the trace shows
        waited = min(waited, op.exclusive)
        op.exclusive -= waited
        totals["waiting for the device"] += waited
        waits.append(DeviceWait(call.tid, end, waited_for))
    return waits


def communication_waits(anchors: dict[int, CpuEvent], runtime: list[RuntimeEvent],
                        eligible: list[DeviceEvent]) -> dict[int, DeviceEvent]:
    """anchor -> the last-ending device work launched before its communication op started, for
    the ops whose work runs on the device (`anchors`: NCCL's kernels, gloo's copies of device
    tensors). The communication stream waits for an event recorded on the caller's stream when
    the op is called, so the collective starts only once the work launched before it has ended
    (every stream counts here too: Kineto does not name the event's stream)."""
    if not anchors or not eligible:
        return {}
    launched = _launched(runtime, eligible)
    return {a: work for a, op in anchors.items() if (work := launched.last_ending_before(op.ts)) is not None}


def _launched(runtime: list[RuntimeEvent], eligible: list[DeviceEvent]) -> _LaunchedWork:
    launch_ts = {r.correlation: r.ts for r in runtime}
    return _LaunchedWork([(launch_ts[d.correlation], d) for d in eligible if d.correlation in launch_ts])


def _callers(operators: list[CpuEvent], calls: list[RuntimeEvent]) -> list[CpuEvent | None]:
    """Per call, the innermost kept operator open when it was made (kineto.innermost_open), over
    the operators of the calls' threads only: synchronisations are few, operators many."""
    threads = {call.tid for call in calls}
    return innermost_open([e for e in operators if e.tid in threads], calls)
