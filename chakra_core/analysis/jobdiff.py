"""Two versions of one job side by side (`chakra diff`), with the nightly detection's engine.

A side is a job's figures (history.figures), its kernels by name and its messages by kind and
size, taken either from converted traces (`side_of_traces`: the job analysed as the nightly
does, and simulated on the reference system) or from a day of the warehouse (`side_of_day`: the
`job_history`, `kernels` and `collectives` rows of that day; no trace is read). `diff` compares
the figures with changes.compare (with the job's history before the older day when there is
one, so that the flags are the nightly's), and the kernels and messages by name and size.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

from chakra_core.analysis import changes
from chakra_core.analysis.history import figures

KERNEL_COLUMNS = ("name", "family", "count", "total_ns")


@dataclass
class Side:
    label: str
    figures: dict[str, float]
    kernels: dict[str, dict]  # name -> {family, count, total_ns}
    messages: Counter  # (kind, bytes) -> count, over the ranks
    fingerprint: str | None = None
    history: list[dict] = field(default_factory=list)  # earlier days' figures of the same program, oldest first


@dataclass
class JobDiff:
    before: Side
    after: Side
    changes: list[changes.Change]
    kernels: list[dict]  # name, family, count and time on each side, change, status
    messages: list[dict]  # kind, bytes, count on each side

    def to_dict(self) -> dict:
        return {"before": self.before.label, "after": self.after.label,
                "program_changed": self.before.fingerprint != self.after.fingerprint,
                "changes": [c.to_dict() for c in self.changes], "kernels": self.kernels, "messages": self.messages}


def side_of_traces(prefix: str, label: str | None = None) -> Side:
    """A converted job (<prefix>.<rank>.et and its groups file) analysed and simulated on the reference system."""
    from chakra_core.analysis.facade import JobAnalysis
    from chakra_core.analysis.job_record import record_job
    from chakra_core.format.job import Job
    from chakra_core.sim.reference import simulate_reference

    job = Job.read(prefix)
    record = record_job(JobAnalysis(job, prefix))
    sim = simulated(simulate_reference(job.tables, job.comm_groups))
    values = figures(record.traces, record.collectives, record.device_time, record.device_verdicts, sim,
                     record.path_step_ns, record.stragglers)
    messages = Counter()
    if record.collectives is not None:
        messages.update(zip(record.collectives.column("kind").to_pylist(),
                            record.collectives.column("comm_size").to_pylist()))
    return Side(label or prefix, values, {k["name"]: k for k in record.kernels}, messages, record.fingerprint)


def simulated(result) -> dict:
    """A simulation's figures as a `sim_results` row has them: the finish and, on the NPU that
    finishes last, the time of each part."""
    last = max(result.npus, key=lambda n: n.finish_ns)
    parts = last.time_by_category
    return {"status": "ok", "finish_ns": result.finish_ns, "compute_ns": parts["compute"], "host_ns": parts["host"],
            "exposed_comm_ns": parts["communication"], "idle_ns": parts["idle"]}


def side_of_day(con, job_id: str, date: str, history_days: int = 28) -> Side:
    """The job on one day of a warehouse (a connection of warehouse.open_warehouse), with its
    history of the `history_days` days before it."""
    from chakra_core.warehouse.query import WarehouseError, run_query

    day = dt.date.fromisoformat(date)
    first = day - dt.timedelta(days=history_days)
    key = job_id.replace("'", "''")
    rows = run_query(con, f"SELECT date, fingerprint, metric, value FROM job_history WHERE job_id = '{key}' "
                          f"AND date BETWEEN DATE '{first}' AND DATE '{day}' ORDER BY date").to_pylist()
    by_day: dict[dt.date, tuple[str, dict]] = {}
    for row in rows:
        figures = by_day.setdefault(row["date"], (row["fingerprint"], {}))[1]
        if row["metric"] is not None and row["value"] is not None:  # a damaged row is no figure
            figures[row["metric"]] = row["value"]
    if day not in by_day:
        raise WarehouseError(f"job {job_id!r} has no job_history rows on {date}"
                             + (f" (it has on {', '.join(str(d) for d in sorted(by_day))})" if by_day else ""))
    fingerprint, values = by_day.pop(day)
    kernels = run_query(con, f"SELECT {', '.join(KERNEL_COLUMNS)} FROM kernels WHERE job_id = '{key}' "
                             f"AND date = DATE '{day}'").to_pylist() if _has(con, "kernels") else []
    messages = run_query(con, f"SELECT kind, comm_size, count(*) AS n FROM collectives WHERE job_id = '{key}' "
                              f"AND date = DATE '{day}' GROUP BY ALL").to_pylist() if _has(con, "collectives") else []
    earlier = [v for d, (f, v) in sorted(by_day.items()) if f == fingerprint]
    return Side(f"{job_id} on {date}", values, {k["name"]: k for k in kernels},
                Counter({(m["kind"], m["comm_size"]): m["n"] for m in messages}), fingerprint, earlier)


def days_of_job(con, job_id: str) -> list[dt.date]:
    """The days on which the warehouse's job_history holds the job, oldest first."""
    from chakra_core.warehouse.query import run_query

    key = job_id.replace("'", "''")
    rows = run_query(con, f"SELECT DISTINCT date FROM job_history WHERE job_id = '{key}' ORDER BY date").to_pylist()
    return [row["date"] for row in rows]


def jobs_in_history(con) -> list[str]:
    """Every job the warehouse's job_history holds, by name."""
    from chakra_core.warehouse.query import run_query

    return [row["job_id"] for row in run_query(con, "SELECT DISTINCT job_id FROM job_history ORDER BY 1").to_pylist()]


def _has(con, table: str) -> bool:
    """Whether the warehouse has the table (one that no night has written yet reads as no rows)."""
    from chakra_core.warehouse.query import run_query

    found = run_query(con, f"SELECT count(*) AS n FROM information_schema.tables WHERE table_name = '{table}'")
    return found.column("n")[0].as_py() > 0


def diff(before: Side, after: Side) -> JobDiff:
    found = changes.compare(before.figures, after.figures, [*before.history, before.figures],
                            program_changed=before.fingerprint != after.fingerprint)
    return JobDiff(before, after, found, _kernels(before.kernels, after.kernels), _messages(before.messages,
                                                                                              after.messages))


def _kernels(before: dict[str, dict], after: dict[str, dict]) -> list[dict]:
    """Kernels by name, largest change of time first; `changed` where the count differs or the
    time moves beyond the floor of times (changes.FLOORS), so that a day's drift is not news."""
    rows = []
    for name in {*before, *after}:
        a, b = before.get(name), after.get(name)
        ns_a, ns_b = ((k or {}).get("total_ns") or 0 for k in (a, b))  # (null in a damaged row: none)
        count_a, count_b = ((k or {}).get("count") or 0 for k in (a, b))
        moved = abs(ns_b - ns_a) > changes.FLOORS["ns"] * ns_a
        status = "added" if a is None else "vanished" if b is None else "changed" if (
            moved or count_a != count_b) else "same"
        rows.append({"name": name, "family": (b or a)["family"], "count_before": count_a,
                     "count_after": count_b, "ns_before": ns_a, "ns_after": ns_b,
                     "change": (ns_b - ns_a) / ns_a if ns_a else None, "status": status})
    return sorted(rows, key=lambda r: (-abs(r["ns_after"] - r["ns_before"]), r["name"]))


def _messages(before: Counter, after: Counter) -> list[dict]:
    """Messages by kind and size whose count differs."""
    keys = sorted({*before, *after}, key=lambda k: (str(k[0]), k[1] or 0))
    return [{"kind": kind, "bytes": size, "count_before": before[(kind, size)], "count_after": after[(kind, size)]}
            for kind, size in keys if before[(kind, size)] != after[(kind, size)]]
