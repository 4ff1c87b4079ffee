"""The profiler's Chrome-trace JSON (`<host>.trace.json.gz`, `perfetto_trace.json.gz`): complete
(`X`) events in microseconds, planes and lines named by `process_name` and `thread_name`
metadata events, arguments as given (made text, as XPlane stats are)."""

from __future__ import annotations

import math

import orjson

from chakra_core.convert.jax.profile import Event, Profile, read_profile_file, time_error
from chakra_core.errors import SourceFormatError


def _number(path: str, index: int, event: dict, key: str) -> float:
    value = event.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SourceFormatError(path, f"traceEvents[{index}].{key} is {value!r:.40}, not a time")
    return float(value)


def _event(path: str, index: int, e: dict, processes: dict, threads: dict) -> Event:
    """A complete event, its times (us) in ns; times that are not times name the event."""
    start_ns, dur_ns = _number(path, index, e, "ts") * 1000, _number(path, index, e, "dur") * 1000
    problem = time_error(start_ns, dur_ns)
    if problem:
        name = str(e.get("name", ""))[:60]
        raise SourceFormatError(path, f"traceEvents[{index}] {name!r} (ts {e.get('ts', 0)!r:.30} us,"
                                f" dur {e.get('dur', 0)!r:.30} us) {problem}")
    args = e.get("args") if isinstance(e.get("args"), dict) else {}
    pid, tid = _ids(path, index, e)
    return Event(str(e.get("name", "")), start_ns, dur_ns, {str(k): str(v) for k, v in args.items()},
                 processes.get(pid, ""), threads.get((pid, tid), ""))


def _ids(path: str, index: int, e: dict) -> tuple:
    """The event's process and thread ids: numbers or strings (they key the names)."""
    for key in ("pid", "tid"):
        if not isinstance(e.get(key), (int, float, str, type(None))):
            raise SourceFormatError(path, f"traceEvents[{index}].{key} is {e[key]!r:.40}, not an id")
    return e.get("pid"), e.get("tid")


def _names(path: str, events: list) -> tuple[dict, dict]:
    processes, threads = {}, {}
    for index, e in enumerate(events):
        if isinstance(e, dict) and e.get("ph") == "M" and isinstance(e.get("args"), dict):
            name = str(e["args"].get("name", ""))
            if e.get("name") == "process_name":
                processes[_ids(path, index, e)[0]] = name
            elif e.get("name") == "thread_name":
                threads[_ids(path, index, e)] = name
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
    processes, threads = _names(path, events)
    found = [_event(path, index, e, processes, threads) for index, e in enumerate(events)
             if isinstance(e, dict) and e.get("ph") == "X"]
    return Profile(path, found, "trace-json")
