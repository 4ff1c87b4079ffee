"""Make a long recording from a short one: a rank's execution trace and Kineto trace with their
profiled steps repeated K times, as if the profiler had been left on for K times as many steps.

Repeat r (0 .. K-1) of every node and event is shifted so that the whole stays consistent:
- ET: node ids and parents by r x (largest id + 1), record-function ids (and fw_parent) by
  r x (largest record-function id + 1), sequence ids, tensor and storage ids likewise;
- Kineto: times by r x the recorded window (first start to last end of its events, whole µs),
  External id, Record function id, correlation, Sequence number and flow ids likewise;
- `ProfilerStep#N` becomes `ProfilerStep#(N + r x steps)` in both files.
What a recording has once stays once: the process and thread roots and the process-group node
of the ET (at the front and back of the node list as recorded), Kineto's metadata, instant and
profiler-span events. Written compact (one event or node per line) and gzip'd like the shipped
files. Used by benchmarks/bench_big_convert.py and test_big_convert.py.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

ONCE = re.compile(r"^(\[pytorch\|profiler\|execution_(trace|graph)\|(process|thread)\]|## process_group:init ##)$")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
REPEATED_CATEGORIES = {"cpu_op", "user_annotation", "gpu_user_annotation", "kernel", "gpu_memcpy", "gpu_memset",
                       "cuda_runtime", "cuda_driver", "ac2g", "fwdbwd"}
KINETO_IDS = ("External id", "Record function id", "correlation", "Sequence number")


@dataclass
class Made:
    k: int
    json_bytes: int  # uncompressed, both files
    kineto_bytes: int
    once_out: int  # nodes a recording has once that become output nodes (the process-group node)

    def expected_nodes(self, single: int) -> int:
        """Output nodes of the K-repeat conversion, given those of one recording."""
        return self.k * single - (self.k - 1) * self.once_out


def make(source: Path, dest: Path, k: int) -> Made:
    """rank0.{et,kineto}.json.gz of `source` repeated k times into dest (reused when already made)."""
    stamp = dest.parent / f"{dest.name}.made.json"  # beside the folder: a job folder holds only the job's files
    if stamp.exists():
        return Made(**json.loads(stamp.read_text()))
    dest.mkdir(parents=True, exist_ok=True)
    et = orjson.loads(gzip.decompress((source / "rank0.et.json.gz").read_bytes()))
    kineto = orjson.loads(gzip.decompress((source / "rank0.kineto.json.gz").read_bytes()))
    shifts = _Shifts(et, kineto)
    et_bytes = _write(dest / "rank0.et.json.gz", et, "nodes", _et_nodes(et["nodes"], shifts, k))
    kineto_bytes = _write(dest / "rank0.kineto.json.gz", kineto, "traceEvents",
                          _kineto_events(kineto["traceEvents"], shifts, k))
    made = Made(k, et_bytes + kineto_bytes, kineto_bytes,
                sum(1 for n in et["nodes"] if n["name"] == "## process_group:init ##"))
    stamp.write_text(json.dumps(made.__dict__))
    return made


def kineto_only(both: Path, dest: Path) -> None:
    """A folder with the Kineto trace of `both` alone."""
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / "rank0.kineto.json.gz").exists():
        shutil.copy(both / "rank0.kineto.json.gz", dest / "rank0.kineto.json.gz")


class _Shifts:
    """The per-repeat offsets: one more than the largest value of each id in either file."""

    def __init__(self, et: dict, kineto: dict):
        nodes, events = et["nodes"], kineto["traceEvents"]
        attrs = [{a["name"]: a.get("value") for a in n.get("attrs", ())} for n in nodes]
        tensors = [t for n in nodes for part in ("inputs", "outputs") for t in _tensors(n[part]["values"])]
        timed = [e for e in events if e.get("ph") == "X" and e.get("cat") in REPEATED_CATEGORIES]
        self.node = max(n["id"] for n in nodes) + 1
        self.rf = max([a.get("rf_id", 0) for a in attrs] +
                      [e["args"].get("Record function id", 0) for e in timed]) + 1
        self.seq = max([a.get("seq_id", -1) for a in attrs] +
                       [e["args"].get("Sequence number", -1) for e in timed]) + 1
        self.tensor = max([t[0] for t in tensors] + [t[1] for t in tensors] + [0]) + 1
        self.ids = {key: max([e.get("args", {}).get(key, 0) for e in timed if type(e.get("args", {}).get(key)) is int]
                             + [0]) + 1 for key in KINETO_IDS}
        self.flow = max([e["id"] for e in events if e.get("ph") in ("s", "f")] + [0]) + 1
        self.window = math.ceil(max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)) + 1
        self.steps = len({n["name"] for n in nodes if STEP.match(n["name"])})
        self.once = {n["id"] for n in nodes if ONCE.match(n["name"])}

    def of(self, kineto_key: str) -> int:
        """The offset of a Kineto id (record-function and sequence ids shared with the ET)."""
        return {"Record function id": self.rf, "Sequence number": self.seq}.get(kineto_key) or self.ids[kineto_key]

    def step(self, name: str, r: int) -> str:
        found = STEP.match(name)
        return f"ProfilerStep#{int(found.group(1)) + r * self.steps}" if found and r else name


def _tensors(values) -> list:
    if type(values) is list and len(values) == 6 and type(values[0]) is int and type(values[5]) is str:
        return [values]
    return [t for v in values for t in _tensors(v)] if type(values) is list else []


def _shift_tensors(values, by: int):
    if type(values) is list and len(values) == 6 and type(values[0]) is int and type(values[5]) is str:
        return [values[0] + by, values[1] + by, *values[2:]]
    return [_shift_tensors(v, by) for v in values] if type(values) is list else values


def _et_nodes(nodes: list[dict], s: _Shifts, k: int):
    """The nodes of k repeats: a recording's once-only nodes before its first repeated node in
    the first repeat, those after its last in the last."""
    repeated = [i for i, n in enumerate(nodes) if n["id"] not in s.once]
    first, last = (repeated[0], repeated[-1]) if repeated else (len(nodes), len(nodes))
    yield from nodes[:first]
    for r in range(k):
        for n in nodes[first:last + 1]:
            if n["id"] in s.once:
                if r == 0:
                    yield n
                continue
            yield _et_node(n, s, r) if r else n
    yield from nodes[last + 1:]


def _et_node(n: dict, s: _Shifts, r: int) -> dict:
    out = dict(n, id=n["id"] + r * s.node, name=s.step(n["name"], r))
    if n.get("ctrl_deps") not in s.once:
        out["ctrl_deps"] = n["ctrl_deps"] + r * s.node
    for part in ("inputs", "outputs"):
        out[part] = dict(n[part], values=_shift_tensors(n[part]["values"], r * s.tensor))
    attrs = []
    for a in n["attrs"]:
        value = a.get("value")
        if a["name"] in ("rf_id", "fw_parent") and value:
            a = dict(a, value=value + r * s.rf)
        elif a["name"] == "seq_id" and type(value) is int and value >= 0:
            a = dict(a, value=value + r * s.seq)
        attrs.append(a)
    out["attrs"] = attrs
    return out


def _kineto_events(events: list[dict], s: _Shifts, k: int):
    repeated = [e for e in events if e.get("cat") in REPEATED_CATEGORIES and e.get("ph") in ("X", "s", "f")]
    for r in range(k):
        for e in repeated:
            yield _kineto_event(e, s, r) if r else e
    yield from (e for e in events if not (e.get("cat") in REPEATED_CATEGORIES and e.get("ph") in ("X", "s", "f")))


def _kineto_event(e: dict, s: _Shifts, r: int) -> dict:
    out = dict(e, ts=e["ts"] + r * s.window, name=s.step(e.get("name", ""), r))
    if "id" in e:
        out["id"] = e["id"] + r * s.flow
    args = e.get("args")
    if args:
        out["args"] = dict(args, **{key: args[key] + r * s.of(key)
                                    for key in KINETO_IDS if type(args.get(key)) is int and args[key] >= 0})
    return out


def _write(path: Path, document: dict, array_key: str, items) -> int:
    """The document with its array from `items`, gzip'd; returns the uncompressed size."""
    size = 0
    with gzip.open(path, "wb", compresslevel=6) as f:
        def put(data: bytes) -> None:
            nonlocal size
            f.write(data)
            size += len(data)

        members = list(document.items())
        at = [key for key, _ in members].index(array_key)
        head = b",\n".join(orjson.dumps(key) + b": " + orjson.dumps(value) for key, value in members[:at])
        put(b"{\n" + head + (b",\n" if head else b"") + orjson.dumps(array_key) + b": [\n")
        batch, first = [], True
        for item in items:
            batch.append(orjson.dumps(item))
            if len(batch) == 4096:
                put((b"" if first else b",\n") + b",\n".join(batch))
                batch, first = [], False
        if batch:
            put((b"" if first else b",\n") + b",\n".join(batch))
        tail = b"".join(b",\n" + orjson.dumps(key) + b": " + orjson.dumps(value) for key, value in members[at + 1:])
        put(b"\n]" + tail + b"\n}\n")
    return size


if __name__ == "__main__":  # bigtrace.py SOURCE DEST K: make (in a process of its own) and print what was made
    print(json.dumps(make(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])).__dict__))
