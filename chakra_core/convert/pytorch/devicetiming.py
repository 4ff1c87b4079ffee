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

import numpy as np

from chakra_core.convert.pytorch.kineto import DeviceEvent, RuntimeEvent, column, streams

MAX_LATENCY_US = 100.0  # a longer delay is the device busy on another stream, not launch latency


def device_timing(device: list[DeviceEvent], runtime: list[RuntimeEvent]) -> dict:
    """{launch_latency_ns, kernel_gap_ns, launches_measured, gaps_measured} from the device
    events and the launch calls that made them (matched by correlation); {} without samples."""
    latencies, gaps = _delays(device, runtime)
    if not len(latencies) and not len(gaps):
        return {}
    return {"launch_latency_ns": round(statistics.median(latencies.tolist()) * 1000) if len(latencies) else 0,
            "kernel_gap_ns": round(statistics.median(gaps.tolist()) * 1000) if len(gaps) else 0,
            "launches_measured": len(latencies), "gaps_measured": len(gaps)}


def _delays(device: list[DeviceEvent], runtime: list[RuntimeEvent]) -> tuple[np.ndarray, np.ndarray]:
    """(launch latencies, back-to-back gaps) in us, per stream in start order: a kernel launched
    (its call returned) once all earlier work on its stream had ended waited the latency; one
    launched before that, and starting after it ended, waited the gap. In columns: a long trace
    has hundreds of thousands of kernels."""
    if not device:
        return np.zeros(0), np.zeros(0)
    stream, ts = streams(device), column(device, "ts")
    order = np.lexsort((ts, stream))  # by stream, then start (stable)
    stream, ts = stream[order], ts[order]
    launched, has_launch = _launch_returns(device, runtime)
    launched, has_launch = launched[order], has_launch[order]
    ends = np.maximum(ts + column(device, "dur")[order], 0.0)
    earlier_end = np.zeros(len(ts))  # the latest end of the work before each on its stream
    first = np.r_[True, stream[1:] != stream[:-1]]
    bounds = np.r_[np.flatnonzero(first), len(ts)].tolist()
    for lo, hi in zip(bounds, bounds[1:]):
        earlier_end[lo + 1:hi] = np.maximum.accumulate(ends[lo:hi - 1])
    after_launch = ts - launched
    idle = first | (launched >= earlier_end)  # the stream had nothing left when the call returned
    latency = has_launch & idle & (after_launch >= 0) & (after_launch <= MAX_LATENCY_US)
    gap = has_launch & ~idle & (ts >= earlier_end)
    return after_launch[latency], (ts - earlier_end)[gap]


def _launch_returns(device: list[DeviceEvent], runtime: list[RuntimeEvent]) -> tuple[np.ndarray, np.ndarray]:
    """Per device event, when the launch call of its correlation returned (the last call of that
    correlation in the trace), and whether there is one."""
    correlation, has_correlation = column(device, "correlation")
    calls, known = column(runtime, "correlation")
    returns = (column(runtime, "ts") + column(runtime, "dur"))[known]
    calls, returns = calls[known][::-1], returns[::-1]  # reversed: np.unique keeps the last call
    keys, last = np.unique(calls, return_index=True)
    if not len(keys):
        return np.zeros(len(device)), np.zeros(len(device), bool)
    at = np.minimum(np.searchsorted(keys, correlation), len(keys) - 1)
    found = has_correlation & (keys[at] == correlation)
    return np.where(found, returns[last[at]], 0.0), found
