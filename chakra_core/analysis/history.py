"""A job's figures as the fleet's history keeps them, and its program's fingerprint.

A job is followed across days by its `job_id`; `fingerprint` tells "the program changed"
(other operators, other collectives, other ranks) apart from "the same program got slower".
`figures` turns what the nightly already computes for a job (its `traces` rows, collectives,
device rows and its simulation on the reference system) into one flat dict, metric -> value,
the `job_history` table's rows. Metric names say their unit and, after a colon, their part:

| metric | what | unit |
|---|---|---|
| `step_ns` | recorded device step: a step's span on the device, max over ranks | ns |
| `predicted_step_ns` | the same step as the simulator predicts it without the profiler | ns |
| `sim_finish_ns` | the whole trace on the reference system (every job that simulates) | ns |
| `path_step_ns` | the recorded step on the critical path across the ranks (`chakra stragglers`; jobs of several ranks) | ns |
| `rank_ns:<rank>:<cause>` | what a straggler costs the job a step, by rank and cause (`compute:<class>`, `host`, ...) | ns |
| `sim_compute_ns`, `sim_host_ns`, `sim_exposed_comm_ns`, `sim_idle_ns` | its parts on the NPU that finishes last | ns |
| `family_ns:<family>` | recorded device time of a kernel family per step, mean over device ranks | ns |
| `idle_ns:<cause>` | recorded device idle time by cause per step, mean over device ranks | ns |
| `busy_share` | the device's busy share, mean over device ranks | share |
| `class_ns:<class>` | compute time of an operator class in the trace, mean over ranks (to the ns where the trace timed it so) | ns |
| `host_ns` | time of the host's operators in the trace, mean over ranks | ns |
| `comm_bytes:<kind>`, `comm_count:<kind>` | communication by kind, summed over ranks | bytes, count |
| `ranks`, `nodes` | the job's size | count |

Per-step and per-rank means keep every part in the unit of its headline: `family_ns:*` and
`idle_ns:*` add up to about `step_ns` (families overlap where streams run side by side).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

import humanize
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.device_time import CAUSES

HEADLINES = ("step_ns", "predicted_step_ns", "sim_finish_ns", "path_step_ns")
SIM_PARTS = {"compute_ns": "sim_compute_ns", "host_ns": "sim_host_ns", "exposed_comm_ns": "sim_exposed_comm_ns",
             "idle_ns": "sim_idle_ns"}
# the numbers a program's recordings differ in from day to day (a step's index, a rank's thread): not the program
_RECORDING_NUMBERS = re.compile(r"#\d+")


def unit(metric: str) -> str:
    """The unit of a metric, from its name."""
    base = metric.split(":", 1)[0]
    if base.endswith("_ns"):
        return "ns"
    if base == "comm_bytes":
        return "bytes"
    return "share" if base == "busy_share" else "count"


WORDS = {"step_ns": "recorded step", "predicted_step_ns": "predicted step",
         "sim_finish_ns": "simulated finish (reference system)", "sim_compute_ns": "simulated compute",
         "sim_host_ns": "simulated host time", "sim_exposed_comm_ns": "simulated exposed communication",
         "sim_idle_ns": "simulated idle time", "busy_share": "device busy share", "host_ns": "host operator time",
         "ranks": "ranks", "nodes": "trace nodes"}
PART_WORDS = {"family_ns": "{} kernel time per step", "idle_ns": "device idle per step: {}",
              "class_ns": "{} operator compute time", "comm_bytes": "{} bytes", "comm_count": "{} count"}


def words(metric: str) -> str:
    """A metric in words, for people (its key stays what queries name)."""
    base, _, part = metric.partition(":")
    if part and base in PART_WORDS:
        return PART_WORDS[base].format(part.replace("_", " "))
    return WORDS.get(metric, metric)


def part_of(metric: str) -> str | None:
    """The part a metric names after its colon (`gemm` of `family_ns:gemm`), None for a whole-job figure."""
    return metric.split(":", 1)[1] if ":" in metric else None


def figures(traces: list[dict], collectives: pa.Table | None, device_time: list[dict],
            device_verdicts: list[dict], sim: Mapping | None, path_step_ns: int = 0,
            stragglers: Iterable[Mapping] = ()) -> dict[str, float]:
    """metric -> value for one job (see the module's table). `traces`: its `traces` rows (one per
    rank); `collectives`: its communication nodes (kind, comm_size); `device_time` and
    `device_verdicts`: its rows of those tables (both variants); `sim`: its `sim_results` row on
    the reference system, None or not ok when it did not simulate; `path_step_ns` and
    `stragglers`: its critical path's step across ranks and its `stragglers` rows (0 and none
    for a job of one rank)."""
    out: dict[str, float] = {"ranks": len(traces), "nodes": sum(r["nodes"] for r in traces)}
    if traces:
        out["host_ns"] = sum(_compute_ns(r) - _compute_ns(r, "npu_") for r in traces) / len(traces)
        for row in traces:
            for op_class, ns in _compute_ns_by_class(row).items():
                key = f"class_ns:{op_class}"
                out[key] = out.get(key, 0.0) + ns / len(traces)
    out.update(_communication(collectives))
    out.update(_device(device_time, device_verdicts))
    if path_step_ns:
        out["path_step_ns"] = path_step_ns
    for row in stragglers:
        cause = f"{row['cause']}:{row['family']}" if row.get("family") else row["cause"]
        out[f"rank_ns:{row['rank']}:{cause}"] = row["cost_ns"]
    return {k: float(v) for k, v in out.items() if v is not None} | simulated_figures(sim)


def simulated_figures(sim: Mapping | None) -> dict[str, float]:
    """The figures of a job's `sim_results` row on the reference system (none when it did not
    simulate): apart from the rest, as a night computes them where the job converted, before
    its simulation."""
    if not sim or sim.get("status") != "ok":
        return {}
    out = {"sim_finish_ns": sim["finish_ns"],
           **{metric: sim[column] for column, metric in SIM_PARTS.items() if sim.get(column) is not None}}
    return {k: float(v) for k, v in out.items() if v is not None}


def _compute_ns(row: Mapping, prefix: str = "") -> int:
    """A `traces` row's compute time (prefix "npu_": on the device) in ns; rows written before
    the ns columns existed have whole microseconds only."""
    ns = row.get(f"{prefix}compute_ns")
    return row[f"{prefix}compute_micros"] * 1000 if ns is None else ns


def _compute_ns_by_class(row: Mapping) -> dict[str, int]:
    by_class = row.get("compute_ns_by_class")
    if by_class is None:
        return {op_class: micros * 1000 for op_class, (_, micros) in _as_dict(row["compute_by_class"]).items()}
    return {op_class: ns for op_class, (_, ns) in _as_dict(by_class).items()}


def _as_dict(value) -> dict:
    return json.loads(value) if isinstance(value, str) else (value or {})


def _communication(collectives: pa.Table | None) -> dict[str, float]:
    if collectives is None or not collectives.num_rows:
        return {}
    grouped = collectives.group_by("kind").aggregate([("comm_size", "sum"), ("kind", "count")]).to_pylist()
    out = {}
    for row in grouped:
        out[f"comm_bytes:{row['kind']}"] = row["comm_size_sum"] or 0
        out[f"comm_count:{row['kind']}"] = row["kind_count"]
    return out


def _device(device_time: list[dict], device_verdicts: list[dict]) -> dict[str, float]:
    """Per-step, per-rank figures of the device analysis (nothing for a job without device work)."""
    recorded = [r for r in device_verdicts if r["variant"] == "recorded" and r.get("steps")]
    if not recorded:
        return {}
    steps = {r["rank"]: r["steps"] for r in recorded}
    ranks = len(recorded)
    out: dict[str, float] = {"step_ns": max(r["span_ns"] / r["steps"] for r in recorded),
                             "busy_share": sum(r["busy_share"] for r in recorded) / ranks}
    predicted = [r for r in device_verdicts if r["variant"] == "predicted" and r.get("steps")]
    if predicted:
        out["predicted_step_ns"] = max(r["span_ns"] / r["steps"] for r in predicted)
    for cause in CAUSES:
        out[f"idle_ns:{cause}"] = sum(r[f"idle_{cause}_ns"] / r["steps"] for r in recorded) / ranks
    for row in device_time:
        if row["variant"] == "recorded" and row["rank"] in steps:
            key = f"family_ns:{row['family']}"
            out[key] = out.get(key, 0.0) + row["ns"] / steps[row["rank"]] / ranks
    return out


def fingerprint(tables: Iterable[pa.Table]) -> str:
    """A digest of the job's program: per rank, how many nodes of each type, collective kind and
    name (recording numbers such as a step's `#12` left out), whatever they took or moved. The
    same program recorded again keeps it; another model, other collectives or other ranks change it."""
    digest = hashlib.sha256()
    for table in tables:
        names = pc.replace_substring_regex(table.column("name").cast(pa.string()).fill_null(""),
                                           _RECORDING_NUMBERS.pattern, "#")
        columns = {"type": table.column("type"), "name": names}
        if "comm_type" in table.column_names:
            columns["comm_type"] = table.column("comm_type")
        counted = pa.table(columns).group_by(list(columns)).aggregate([("type", "count")])
        rows = sorted(tuple("" if v is None else str(v) for v in row.values()) for row in counted.to_pylist())
        digest.update(json.dumps(rows, separators=(",", ":")).encode())
        digest.update(b"\x00rank\x00")
    return digest.hexdigest()[:16]


def shown(metric: str, value: float | None) -> str:
    """A metric's value as people read it, in the terminal and on the pages alike: ms for times,
    binary units for bytes (KiB, MiB, GiB), % for shares."""
    if value is None:
        return ""
    kind = unit(metric)
    if kind == "ns":
        return f"{value / 1e6:,.3f} ms"
    if kind == "bytes":  # as the pages write sizes: one unit for the same bytes everywhere
        return humanize.naturalsize(value, binary=True, format="%.2f")
    return f"{value:.1%}" if kind == "share" else f"{value:,.0f}"
