"""One job on one day of the warehouse, as its report page shows it: where each rank's step
goes, its top kernels, its figures over the days, and what changed against the day before.

- `breakdown`: per rank and variant (recorded, predicted), a step split into parts that add up
  to the step's span: device compute by kernel family (the families' summed durations scaled
  to the compute time, since kernels of concurrent streams overlap), memory copies, device
  communication with no compute beside it, and idle time by cause.
- `kernels`: the job's kernels by name (the `kernels` table), with their share of its time.
- `compare_days`: the job's figures (`job_history`) against its latest earlier day, judged
  like the nightly detection (changes.compare, with the noise of the earlier days of the same
  program), and its kernels by name against that day's: added, vanished, changed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from chakra_core.analysis import changes
from chakra_core.analysis.daily import Day, history, literal
from chakra_core.analysis.device_time import CAUSES
from chakra_core.analysis.history import unit
from chakra_core.analysis.kernels import COMMUNICATION

COMPARISON_DAYS = 28  # earlier days whose noise judges a change: the nightly detection's window
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
    parts: dict[str, float] = defaultdict(float)
    for name, ns in sorted(compute.items(), key=lambda kv: -kv[1]):
        parts["memcpy" if name in MEMCPY else name] += ns * scale / steps
    parts["communication"] = max(verdict["busy_ns"] - verdict["compute_ns"], 0) / steps
    for cause in CAUSES:
        parts[IDLE_LABELS[cause]] = verdict[f"idle_{cause}_ns"] / steps
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


def kernels(day: Day, job: str, date_sql: str = "{date}") -> list[dict]:
    """The job's kernels on a day (`date_sql`: a SQL date; the day by default), most time first,
    with `share`, their part of the job's kernel time."""
    if not day.has("kernels"):
        return []
    rows = day.query(f"""
        SELECT name, family, count, total_ns, median_ns, ranks, total_ns / sum(total_ns) OVER () AS share
        FROM kernels WHERE date = {date_sql} AND job_id = {literal(job)} ORDER BY total_ns DESC, name""")
    return rows.to_pylist()


@dataclass
class DayComparison:
    """The job against its latest earlier day (None: the job's first day in the window)."""

    baseline: str | None = None
    program_changed: bool = False
    history_days: int = 0
    figures: list[changes.Change] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)


def by_day(rows: list[dict]) -> dict[str, tuple[str, dict[str, float]]]:
    """job_history rows of one job -> {day: (fingerprint, {metric: value})}."""
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for r in rows:
        out.setdefault(str(r["date"]), (r["fingerprint"], {}))[1][r["metric"]] = r["value"]
    return out


def compare_days(day: Day, job: str, rows: list[dict] | None = None) -> DayComparison:
    """The job's figures and kernels against its latest earlier day. `rows`: its job_history rows
    over the window (read when not given)."""
    days = by_day(rows if rows is not None else history(day, [job]).to_pylist())
    if day.date not in days:
        return DayComparison()
    earlier = sorted(d for d in days if d < day.date)[-COMPARISON_DAYS:]
    if not earlier:
        return DayComparison()
    baseline = earlier[-1]
    fingerprint, values = days[day.date]
    base_fp, base_values = days[baseline]
    same_program = [days[d][1] for d in earlier if days[d][0] == base_fp]
    found = changes.compare(base_values, values, same_program, program_changed=fingerprint != base_fp)
    return DayComparison(baseline, fingerprint != base_fp, len(same_program), found,
                         kernel_changes(kernels(day, job, f"CAST({literal(baseline)} AS DATE)"), kernels(day, job)))


def kernel_changes(before: list[dict], after: list[dict]) -> list[dict]:
    """Kernels by name on two days: name, family, count and time before and after, the relative
    change of time and a status (added, vanished, changed: another count or time beyond the
    floor of times, same), the
    largest moves of time first."""
    old, new = {k["name"]: k for k in before}, {k["name"]: k for k in after}
    floor = changes.FLOORS[unit("total_ns")]
    rows = []
    for name in {*old, *new}:
        a, b = old.get(name), new.get(name)
        t0, t1 = (a or {}).get("total_ns", 0), (b or {}).get("total_ns", 0)
        change = (t1 - t0) / t0 if a and b and t0 else None
        moved = a is not None and b is not None and (a["count"] != b["count"] or abs(change or 0) > floor)
        status = "added" if a is None else "vanished" if b is None else "changed" if moved else "same"
        rows.append({"name": name, "family": (b or a)["family"], "count_before": (a or {}).get("count"),
                     "count_after": (b or {}).get("count"), "before_ns": t0, "after_ns": t1, "change": change,
                     "status": status})
    return sorted(rows, key=lambda r: (-abs(r["after_ns"] - r["before_ns"]), r["name"]))
