"""The profiler's Chrome-trace JSON (`<host>.trace.json.gz`, `perfetto_trace.json.gz`): complete
(`X`) events in microseconds, planes and lines named by `process_name` and `thread_name`
metadata events, arguments as given (made text, as XPlane stats are)."""

from __future__ import annotations

import math

import orjson

from chakra_core.convert.jax.profile import Event, Profile, read_profile_file
from chakra_core.errors import SourceFormatError


def _number(path: str, index: int, event: dict, key: str) -> float:
    value = event.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SourceFormatError(path, f"traceEvents[{index}].{key} is {value!r:.40}, not a time")
    return float(value)


def _names(events: list) -> tuple[dict, dict]:
    processes, threads = {}, {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and isinstance(e.get("args"), dict):
            name = str(e["args"].get("name", ""))
            if e.get("name") == "process_name":
                processes[e.get("pid")] = name
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = name
    return processes, threads


def read_trace_json(path: str) -> Profile:
    """The trace's complete events (times in ns)."""
    data = read_profile_file(path, "a trace file")
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SourceFormatError(path, f"not JSON ({exc})") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise SourceFormatError(path, "no traceEvents list (not a Chrome trace)")
    processes, threads = _names(events)
    found = []
    for index, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        found.append(Event(str(e.get("name", "")), _number(path, index, e, "ts") * 1000,
                           _number(path, index, e, "dur") * 1000, {str(k): str(v) for k, v in args.items()},
                           processes.get(e.get("pid"), ""), threads.get((e.get("pid"), e.get("tid")), "")))
    return Profile(path, found, "trace-json")
