"""Where a rank's device time goes, step by step, from its DeviceWork (device_work.py).

Per step, over its window (`span`):
- `busy`: the union of the device's work (all streams, communication on the device included);
  `compute`: the union of its work other than communication; `idle` = span - busy.
- idle time by cause, each instant given to the first that holds: `communication` (the host
  runs communication, e.g. gloo, that the device waits for), `synchronisation` (a host
  operator waits for the device to drain, e.g. `.item()`), `other` (work was launched but
  not started: it waits for another stream or an event), `host_launch` (nothing was launched
  yet: the device waits for the host).
- `overlap`: the share of the communication time (on the device or the host) during which
  the device computes; null without communication time.
- `launches` and the launch-to-start delay: each item's start minus when it was launched at
  the latest, the end of the operator that launched it (the runtime call itself is not in a
  Chakra trace): 0 where the device started it before the operator returned, long where it
  waited in a deep queue; median and 90th percentile.
- `bound`: what holds the step, the largest of `device` (compute / span), `host` (idle for
  host launch and synchronisation / span) and `communication` (communication running on
  the device with no compute beside it, plus idle for communication, / span). For a simulated
  step the critical path decides instead (path_bound; JobAnalysis applies it), so that
  `chakra stats`, `chakra simulate` and the nightly report give one verdict.

`family_table` and `top_kernels` say which work took the time (durations summed, not
unioned: concurrent kernels each count). Every time is in ns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from chakra_core.analysis import intervals
from chakra_core.analysis.device_work import DeviceWork
from chakra_core.analysis.kernels import FAMILY_NAMES
from chakra_core.format.nodenames import as_strings
from chakra_core.table_schema import TableSchema, column

CAUSES = ("host_launch", "synchronisation", "communication", "other")
BOUNDS = ("device", "host", "communication")
TOP_KERNELS = 10
ADDITIVE = ("span_ns", "busy_ns", "compute_ns", "device_comm_ns", "idle_ns", *(f"idle_{c}_ns" for c in CAUSES),
            "exposed_comm_ns", "comm_time_ns", "overlapped_ns", "launches")

# a step's figures; null: overlap without communication, launch delays without launches, bound of an empty span
STEP = TableSchema("device steps", (
    column("step", pa.string()), *(column(name, pa.int64()) for name in ADDITIVE),
    column("overlap", pa.float64(), nullable=True), column("busy_share", pa.float64()),
    column("launch_delay_p50_ns", pa.int64(), nullable=True), column("launch_delay_p90_ns", pa.int64(), nullable=True),
    column("bound", pa.string(), nullable=True)))
FAMILY = TableSchema("device families", (column("family", pa.string()), column("ns", pa.int64()),
                                         column("count", pa.int64())))
TOP = TableSchema("top kernels", (column("name", pa.string()), column("family", pa.string()),
                                  column("count", pa.int64()), column("total_ns", pa.int64()),
                                  column("median_ns", pa.int64())))
STEP_SCHEMA, FAMILY_SCHEMA, TOP_SCHEMA = STEP.schema, FAMILY.schema, TOP.schema


def _window_figures(work: DeviceWork, w0: int, w1: int, chosen: np.ndarray) -> dict:
    """The additive figures of one window over the chosen items."""
    def within(starts, ends) -> intervals.Intervals:
        return intervals.clip(intervals.union(starts, ends), w0, w1)

    comm = chosen & work.comm
    busy = within(work.start[chosen], work.end[chosen])
    compute = within(work.start[chosen & ~work.comm], work.end[chosen & ~work.comm])
    device_comm = within(work.start[comm], work.end[comm])
    host_comm = intervals.clip(work.host_comm, w0, w1)
    idle = intervals.subtract((np.array([w0]), np.array([w1])), busy)
    waiting_comm = intervals.intersect(idle, host_comm)
    rest = intervals.subtract(idle, host_comm)
    waiting_sync = intervals.intersect(rest, intervals.clip(work.sync, w0, w1))
    rest = intervals.subtract(rest, waiting_sync)
    launched = chosen & (work.launch >= 0)
    queued = intervals.intersect(rest, within(work.launch[launched], work.start[launched]))
    all_comm = intervals.union(np.r_[device_comm[0], host_comm[0]], np.r_[device_comm[1], host_comm[1]])
    return {
        "span_ns": w1 - w0, "busy_ns": intervals.measure(busy), "compute_ns": intervals.measure(compute),
        "device_comm_ns": intervals.measure(device_comm), "idle_ns": intervals.measure(idle),
        "idle_host_launch_ns": intervals.measure(rest) - intervals.measure(queued),
        "idle_synchronisation_ns": intervals.measure(waiting_sync),
        "idle_communication_ns": intervals.measure(waiting_comm), "idle_other_ns": intervals.measure(queued),
        "exposed_comm_ns": intervals.measure(intervals.subtract(device_comm, compute)),
        "comm_time_ns": intervals.measure(all_comm),
        "overlapped_ns": intervals.measure(intervals.intersect(all_comm, compute)),
        "launches": int(chosen.sum()),
    }


def _derived(figures: dict, delays: np.ndarray) -> dict:
    """Adds the ratios, the launch delays and the verdict to additive figures."""
    span = figures["span_ns"]
    shares = {"device": figures["compute_ns"],
              "host": figures["idle_host_launch_ns"] + figures["idle_synchronisation_ns"],
              "communication": figures["exposed_comm_ns"] + figures["idle_communication_ns"]}
    p50, p90 = (int(v) for v in np.percentile(delays, [50, 90])) if len(delays) else (None, None)
    return {**figures,
            "overlap": figures["overlapped_ns"] / figures["comm_time_ns"] if figures["comm_time_ns"] else None,
            "busy_share": figures["busy_ns"] / span if span else 0.0,
            "launch_delay_p50_ns": p50, "launch_delay_p90_ns": p90,
            "bound": max(BOUNDS, key=lambda b: shares[b]) if span else None}


def path_bound(path: dict[str, int] | None) -> str | None:
    """What bounds a simulated step by its critical path (sim/criticalpath.py): the largest of
    `device` (device work on the path, waiting for it included), `host` and `communication`;
    None without a path. The share-based `bound` above says what the device's time went to; this
    one what the step would shorten with: a device busy 85% of a step whose kernels each wait for
    their launch is bound by the host."""
    if not path:
        return None
    shares = {"device": path.get("device", 0) + path.get("waiting for the device", 0),
              "host": path.get("host", 0), "communication": path.get("communication", 0)}
    return max(BOUNDS, key=lambda b: shares[b])


def with_path_bound(table: pa.Table, path: dict[str, int] | None) -> pa.Table:
    """A step table whose `all` row's bound is path_bound(path) (unchanged without a path)."""
    verdict = path_bound(path)
    if verdict is None:
        return table
    rows = table.to_pylist()
    for row in rows:
        if row["step"] == "all":
            row["bound"] = verdict
    return pa.Table.from_pylist(rows, schema=table.schema)


def _delays(work: DeviceWork, chosen: np.ndarray) -> np.ndarray:
    launched = chosen & (work.launch >= 0)
    return np.maximum(work.start[launched] - work.launch[launched], 0)


def step_rows(work: DeviceWork) -> list[dict]:
    """One row of figures per step (STEP_SCHEMA's columns)."""
    rows = []
    for k, name in enumerate(work.step_names):
        chosen = work.step == k
        figures = _window_figures(work, int(work.windows[0][k]), int(work.windows[1][k]), chosen)
        rows.append({"step": name, **_derived(figures, _delays(work, chosen))})
    return rows


def total_row(work: DeviceWork, steps: list[dict]) -> dict:
    """The figures over all steps: the additive ones summed, the rest recomputed."""
    figures = {key: sum(row[key] for row in steps) for key in ADDITIVE}
    return {"step": "all", **_derived(figures, _delays(work, np.ones(len(work.start), bool)))}


def step_table(work: DeviceWork) -> pa.Table:
    rows = step_rows(work)
    return pa.Table.from_pylist([*rows, total_row(work, rows)], schema=STEP_SCHEMA)


def family_table(work: DeviceWork) -> pa.Table:
    """Device time and item count per family (families without work left out), in FAMILY_NAMES order."""
    durations = work.end - work.start
    rows = [{"family": f, "ns": int(durations[work.families == f].sum()), "count": int((work.families == f).sum())}
            for f in FAMILY_NAMES]
    return pa.Table.from_pylist([r for r in rows if r["count"]], schema=FAMILY_SCHEMA)


def top_kernels(work: DeviceWork, limit: int | None = TOP_KERNELS) -> pa.Table:
    """The `limit` names (None: every name) with the most device time: count, total and median duration."""
    if not len(work.names):
        return TOP_SCHEMA.empty_table()
    durations = work.end - work.start
    encoded = as_strings(work.names).fill_null("").dictionary_encode()  # (names in the order first seen)
    index = encoded.indices.to_numpy(zero_copy_only=False)
    totals = np.bincount(index, weights=durations, minlength=len(encoded.dictionary))
    rows = []
    for k in np.argsort(-totals, kind="stable")[:limit]:
        mine = index == k
        rows.append({"name": encoded.dictionary[int(k)].as_py(), "family": work.families[mine][0],
                     "count": int(mine.sum()), "total_ns": int(durations[mine].sum()),
                     "median_ns": int(np.median(durations[mine]))})
    return pa.Table.from_pylist(rows, schema=TOP_SCHEMA)


def summary(work: DeviceWork) -> dict:
    """The figures over all steps as one JSON-ready object (what `chakra stats --json` shows)."""
    total = total_row(work, step_rows(work))
    return {
        "steps": list(work.step_names), "span_ns": total["span_ns"], "busy_ns": total["busy_ns"],
        "busy_share": total["busy_share"], "compute_ns": total["compute_ns"],
        "idle_ns": {cause: total[f"idle_{cause}_ns"] for cause in CAUSES},
        "families": {row["family"]: row["ns"] for row in family_table(work).to_pylist()},
        "top_kernels": top_kernels(work).to_pylist(), "overlap": total["overlap"], "launches": total["launches"],
        "launch_delay_ns": {"p50": total["launch_delay_p50_ns"], "p90": total["launch_delay_p90_ns"]},
        "bound": total["bound"],
    }
