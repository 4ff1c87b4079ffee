"""What a JAX profile says, whichever file it was read from (XPlane or Chrome-trace JSON): timed
events on named lines of named planes, with their arguments as text; and from them, each
device's executed HLO ops and the steps.

An event is a device op when it names its HLO instruction (`hlo_op`) and device
(`device_ordinal`), as XLA's CPU runtime records its thunks; when it names its instruction on a
`/device:<KIND>:<N>` plane (a GPU's kernels on their stream lines, `Stream #14(Compute)`, one
instruction may launch several); or when it lies on the `XLA Ops` line of such a plane (a plane
with that line gives its ops there, and their kernels on the stream lines are not counted again). Its execution is `run_id` where given. Steps
are the events that carry `step_num` (`jax.profiler.StepTraceAnnotation`); an op belongs to
the step its execution began in.
"""

from __future__ import annotations

import bisect
import gzip
import re
from collections import defaultdict
from dataclasses import dataclass, field

from chakra_core.errors import SourceFormatError
from chakra_core.inputs import read_bounded

_DEVICE_PLANE = re.compile(r"^/device:[A-Z]+:([0-9]{1,18})(?![0-9])")
OPS_LINE = "XLA Ops"
_INTEGER = re.compile(r"[0-9]{1,18}")
LATEST_NS = 2**63 - 1  # times become int64 downstream (the ET's columns, the simulator's clock)


@dataclass
class Event:
    name: str
    start_ns: float
    dur_ns: float
    args: dict[str, str]
    plane: str = ""
    line: str = ""

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.dur_ns


@dataclass
class Profile:
    path: str  # the file read
    events: list[Event]
    reader: str  # "xplane" or "trace-json"


@dataclass
class Step:
    number: int
    start_ns: float
    end_ns: float


@dataclass
class DeviceOps:
    """Per device, per step: its executions (of a module), each the ops that ran, in start order."""

    by_device: dict[int, dict[int, list[list[Event]]]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    modules: set[str] = field(default_factory=set)
    outside_steps: int = 0  # ops of executions that began in no step
    annotated: bool = True  # whether the profile had step annotations


def time_error(start_ns: float, dur_ns: float) -> str | None:
    """Why an event's times are not times, or None: a negative start or duration (never clamped:
    a profiler does not write them), or an end beyond int64 ns (292 years)."""
    if start_ns < 0:
        return f"starts at {start_ns:,.0f} ns, before 0"
    if dur_ns < 0:
        return f"lasts {dur_ns:,.0f} ns, a negative duration"
    if start_ns + dur_ns > LATEST_NS:
        return f"ends at {start_ns + dur_ns:.4g} ns, beyond 2**63 ns (292 years)"
    return None


def read_profile_file(path: str, what: str) -> bytes:
    """The file's bytes, gunzipped, within the source_bytes limit; a cut or corrupt gzip stream
    is a format error naming the file."""
    try:
        return read_bounded(path, "source_bytes", what)
    except (EOFError, gzip.BadGzipFile) as exc:  # cut short, or corrupt (inputs.BoundedGzipFile)
        raise SourceFormatError(path, f"truncated or corrupt gzip stream ({exc})") from None


def device_of(event: Event) -> int | None:
    ordinal = event.args.get("device_ordinal")
    if ordinal is not None and _INTEGER.fullmatch(ordinal):
        return int(ordinal)
    plane = _DEVICE_PLANE.match(event.plane)
    if plane and (event.line == OPS_LINE or "hlo_op" in event.args):
        return int(plane.group(1))
    return None


def _is_op(event: Event) -> bool:
    return ("hlo_op" in event.args or event.line == OPS_LINE) and device_of(event) is not None


def steps_of(events: list[Event]) -> list[Step]:
    """The annotated steps, by start; their numbers as annotated."""
    found = []
    for e in events:
        number = e.args.get("step_num")
        if number is not None and _INTEGER.fullmatch(number) and not _is_op(e):
            found.append(Step(int(number), e.start_ns, e.end_ns))
    found.sort(key=lambda s: s.start_ns)
    unique, seen = [], set()
    for s in found:  # a step annotated on several lines (host and device) counts once: the first seen
        if s.number not in seen:
            seen.add(s.number)
            unique.append(s)
    return unique


def device_ops(profile: Profile) -> DeviceOps:
    """The ops of every device, grouped by step (see the module docstring)."""
    result = DeviceOps(steps=steps_of(profile.events))
    executions: dict[tuple[int, str], list[Event]] = defaultdict(list)
    with_ops_line = {e.plane for e in profile.events if e.line == OPS_LINE}
    for e in profile.events:
        if _is_op(e) and (e.plane not in with_ops_line or e.line == OPS_LINE):  # ops, not their kernels too
            executions[(device_of(e), e.args.get("run_id", ""))].append(e)
            if "hlo_module" in e.args:
                result.modules.add(e.args["hlo_module"])
    starts = [s.start_ns for s in result.steps]
    for (device, run), ops in sorted(executions.items(), key=lambda kv: min(e.start_ns for e in kv[1])):
        ops.sort(key=lambda e: e.start_ns)
        if run:
            pieces = [(_step_at(result.steps, starts, ops[0].start_ns), ops)]
        else:  # no execution id: the ops of a step make one execution
            pieces = [(_step_at(result.steps, starts, e.start_ns), [e]) for e in ops]
        for step, chunk in pieces:
            if step is None:
                result.outside_steps += len(chunk)
                continue
            runs = result.by_device.setdefault(device, {}).setdefault(step, [])
            if run or not runs:
                runs.append(chunk)
            else:
                runs[-1].extend(chunk)
    if not result.steps and result.by_device:  # no annotations: the whole profile is one step
        result.annotated = False
        ops = [e for steps in result.by_device.values() for runs in steps.values() for run in runs for e in run]
        result.steps = [Step(0, min(e.start_ns for e in ops), max(e.end_ns for e in ops))]
    return result


def _step_at(steps: list[Step], starts: list[float], t: float) -> int | None:
    """The last step begun by t (dispatch is asynchronous: a device may run a step's ops after
    the host's annotation ended); None before the first. starts: the steps' (sorted), searched
    by halves, as a profile may hold many steps and many ops."""
    if not steps:
        return 0
    begun = bisect.bisect_right(starts, t)
    return steps[begun - 1].number if begun else None
