"""One job on one day of the warehouse, as its report page shows it: where each rank's step
goes, its top kernels, its figures over the days, and what changed against the day before.

- `breakdown`: per rank and variant (recorded, predicted), a step split into parts that add up
  to the step's span: device compute by kernel family (the families' summed durations scaled
  to the compute time, since kernels of concurrent streams overlap), memory copies, device
  communication with no compute beside it, and idle time by cause.
- `kernels`: the job's kernels by name (the `kernels` table), with their share of its time.
- `stragglers`: the ranks that hold it back, with cause and cost (the `stragglers` table).
- `against_day_before`: `chakra diff` (jobdiff.py) of the job on its latest earlier day and on
  the day: its figures judged as the nightly detection judges them, its kernels by name and
  its messages by kind and size.
"""

from __future__ import annotations

from collections import defaultdict

from chakra_core.analysis import jobdiff
from chakra_core.analysis.daily import Day, literal
from chakra_core.analysis.device_time import CAUSES
from chakra_core.analysis.jobdiff import JobDiff
from chakra_core.analysis.kernels import COMMUNICATION
MEMCPY = ("memcpy_htod", "memcpy_dtoh", "memcpy_dtod", "memset")
IDLE_LABELS = {"host_launch": "idle: host launch", "synchronisation": "idle: synchronisation",
               "communication": "idle: communication", "other": "idle: other"}


def device_rows(day: Day, job: str) -> tuple[list[dict], list[dict]]:
    """(the job's device_verdicts rows, its device_time rows) of the day."""
    if not day.has("device_verdicts", "device_time"):
        return [], []
    where = f"date = {{date}} AND job_id = {literal(job)}"
    verdicts = day.query(f"SELECT * EXCLUDE (date) FROM device_verdicts WHERE {where} ORDER BY rank, variant DESC")
    families = day.query(f"SELECT rank, variant, family, ns, count FROM device_time WHERE {where}")
    return verdicts.to_pylist(), families.to_pylist()


def step_parts(verdict: dict, families: list[dict]) -> dict[str, float]:
    """A rank's step (one device_verdicts row and its device_time rows) as parts in ns per step
    that add up to its span per step: compute by family, memcpy, communication, idle by cause."""
    steps = max(verdict.get("steps") or 1, 1)
    compute = {f["family"]: f["ns"] for f in families if f["family"] != COMMUNICATION}
    total = sum(compute.values())
    scale = verdict["compute_ns"] / total if total > verdict["compute_ns"] and total else 1.0
    return _named_parts({name: ns * scale / steps for name, ns in compute.items()},
                        {cause: verdict[f"idle_{cause}_ns"] / steps for cause in CAUSES},
                        communication=max(verdict["busy_ns"] - verdict["compute_ns"], 0) / steps)


def _named_parts(families: dict[str, float], idle: dict[str, float], communication: float = 0.0
                 ) -> dict[str, float]:
    """A step's parts as the bars name them: device time by family, largest first (copies and
    sets as one `memcpy`), then communication, then idle by cause; only those above 0."""
    parts: dict[str, float] = defaultdict(float)
    for name, ns in sorted(families.items(), key=lambda kv: -kv[1]):
        parts["memcpy" if name in MEMCPY else name] += ns
    parts["communication"] += communication
    for cause, ns in idle.items():
        parts[IDLE_LABELS[cause]] = ns
    return {k: v for k, v in parts.items() if v > 0}


def breakdown(verdicts: list[dict], families: list[dict], max_ranks: int = 32) -> list[dict]:
    """One entry per rank and variant (the first `max_ranks` ranks): label, rank, variant,
    system, bound, steps, step_ns and parts (step_parts)."""
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for row in families:
        by_key[(row["rank"], row["variant"])].append(row)
    ranks = sorted({v["rank"] for v in verdicts})[:max_ranks]
    out = []
    for v in verdicts:
        if v["rank"] in ranks:
            steps = max(v.get("steps") or 1, 1)
            out.append({"label": f"rank {v['rank']} {v['variant']}", "rank": v["rank"], "variant": v["variant"],
                        "system": v["system"], "bound": v["bound"],
                        "busy_share": v["busy_share"], "steps": steps, "step_ns": v["span_ns"] / steps,
                        "parts": step_parts(v, by_key[(v["rank"], v["variant"])])})
    return sorted(out, key=lambda e: (e["rank"], e["variant"] != "recorded"))


def simulated_parts(figures: dict[str, float]) -> dict[str, float]:
    """The slowest NPU's parts of the simulated finish on the reference system (job_history's
    sim_* figures), in ns: a breakdown for jobs without device work."""
    names = {"sim_compute_ns": "compute", "sim_host_ns": "host", "sim_exposed_comm_ns": "communication",
             "sim_idle_ns": "idle"}
    return {name: figures[m] for m, name in names.items() if figures.get(m)}


def history_parts(figures: dict[str, float]) -> dict[str, float]:
    """One day's step as parts in ns from its job_history figures: device time by family and idle
    by cause per step (means over ranks) for a job with device work, else the simulated finish's
    parts (simulated_parts)."""
    families = {m.split(":", 1)[1]: v for m, v in figures.items() if m.startswith("family_ns:")}
    if not any(v > 0 for v in families.values()):
        return simulated_parts(figures)
    return _named_parts(families, {cause: figures.get(f"idle_ns:{cause}") or 0.0 for cause in CAUSES})


def before_after(rows: list[dict], date: str) -> list[dict]:
    """The job's step on its latest earlier day and on `date`, as bars (label, parts): what a
    flagged change did to the step, side by side; [] without both days."""
    held = by_day(rows)
    earlier = sorted(d for d in held if d < date)
    if date not in held or not earlier:
        return []
    return [{"label": day, "parts": history_parts(held[day][1])} for day in (earlier[-1], date)]


def kernels(day: Day, job: str) -> list[dict]:
    """The job's kernels on the day, most time first, with `share`, their part of the job's kernel time."""
    if not day.has("kernels"):
        return []
    rows = day.query(f"""
        SELECT name, family, count, total_ns, median_ns, ranks, total_ns / sum(total_ns) OVER () AS share
        FROM kernels WHERE date = {{date}} AND job_id = {literal(job)} ORDER BY total_ns DESC, name""")
    return rows.to_pylist()


def stragglers(day: Day, job: str) -> list[dict]:
    """The job's rows of the `stragglers` table on the day, biggest cost first."""
    if not day.has("stragglers"):
        return []
    return day.query(f"""
        SELECT rank, cause, family, operator, cost_ns, share, step_ns FROM stragglers
        WHERE date = {{date}} AND job_id = {literal(job)} ORDER BY cost_ns DESC, rank""").to_pylist()


def by_day(rows: list[dict]) -> dict[str, tuple[str, dict[str, float]]]:
    """job_history rows of one job -> {day: (fingerprint, {metric: value})}."""
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for r in rows:
        out.setdefault(str(r["date"]), (r["fingerprint"], {}))[1][r["metric"]] = r["value"]
    return out


def against_day_before(day: Day, job: str, rows: list[dict]) -> JobDiff | None:
    """`chakra diff` of the job on its latest earlier day (within the history window) and on the
    day; None when the job has no earlier day. `rows`: its job_history rows over the window."""
    held = by_day(rows)
    earlier = sorted(d for d in held if d < day.date)
    if day.date not in held or not earlier:
        return None
    before, after = (jobdiff.side_of_day(day.con, job, d) for d in (earlier[-1], day.date))
    return jobdiff.diff(before, after)
