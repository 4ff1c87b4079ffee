"""Device-side timing a GPU trace shows and the simulator adds (docs/gpu.md, 'Device timing').

Two delays separate a kernel (copy, memset) from what made it possible, measured per stream
from the Kineto trace:

- **launch latency**: a kernel launched onto an idle stream (the previous work on it had ended
  when the launch call returned) starts some microseconds after its launch call returned;
- **back-to-back gap**: a kernel queued behind the previous work on its stream (launched before
  that work ended) starts a little after it ended.

The medians are the conversion report's `device_timing` (per rank); `chakra calibrate` puts
the median over its jobs into the system description (sim/config.DeviceTiming), where the
simulator adds them to each device node's start.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from chakra_core.convert.pytorch.kineto import DeviceEvent, RuntimeEvent

MAX_LATENCY_US = 100.0  # a longer delay is the device busy on another stream, not launch latency


def device_timing(device: list[DeviceEvent], runtime: list[RuntimeEvent]) -> dict:
    """{launch_latency_ns, kernel_gap_ns, launches_measured, gaps_measured} from the device
    events and the launch calls that made them (matched by correlation); {} without samples."""
    launch_end = {r.correlation: r.ts + r.dur for r in runtime}
    by_stream: dict[int, list[DeviceEvent]] = defaultdict(list)
    for event in device:
        by_stream[event.stream].append(event)
    latencies, gaps = [], []
    for events in by_stream.values():
        events.sort(key=lambda e: e.ts)
        previous_end = None
        for event in events:
            launched = launch_end.get(event.correlation) if event.correlation is not None else None
            if launched is not None:
                if previous_end is None or launched >= previous_end:
                    if 0 <= event.ts - launched <= MAX_LATENCY_US:
                        latencies.append(event.ts - launched)
                elif event.ts >= previous_end:
                    gaps.append(event.ts - previous_end)
            previous_end = max(previous_end or 0.0, event.ts + event.dur)
    if not latencies and not gaps:
        return {}
    return {"launch_latency_ns": round(statistics.median(latencies) * 1000) if latencies else 0,
            "kernel_gap_ns": round(statistics.median(gaps) * 1000) if gaps else 0,
            "launches_measured": len(latencies), "gaps_measured": len(gaps)}
