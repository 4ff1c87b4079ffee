"""The warehouse as the report pages show it: each section a query over the nightly tables
(chakra_core/warehouse/query.py's views), answered as a pyarrow Table.

`open_day(url, date)` opens the warehouse for one day (the latest night's when no date is
given), its views over the HISTORY_WINDOW_DAYS up to it; `day_sections(day)` answers the day
page's sections, `days_index(day)` the index of every day (a day opened with window=False), `history(day, jobs, metrics)` the figures of `job_history` over the
HISTORY_WINDOW_DAYS up to the day. A section whose tables the warehouse lacks (a warehouse
from before that table existed) is an empty table, not an error.

The figures are chosen so that they cannot mislead: per job, a step's time is the slowest
rank's (as `job_history`'s `step_ns`) and idle time is per step and the mean over ranks, so
idle never exceeds the step; device time by family is the recorded one only (the prediction
changes host time, not kernels), the predicted step beside the recorded one; a job's best
system comes with how many systems simulated it and why the others did not; the
representatives carry their own cluster's error, and the day's estimate error is a section of
its own, said once.
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass

import pyarrow as pa

from chakra_core.warehouse.query import WarehouseError, open_warehouse, run_query
from chakra_core.warehouse.snapshots import committed_days

HISTORY_WINDOW_DAYS = 90  # the trends show this many days up to the day

# a recorded step of each rank: its span, busy share and idle by cause per step
_STEPS = """
    SELECT job_id, rank, variant, system, bound, busy_share, greatest(coalesce(steps, 1), 1) AS steps,
           span_ns / greatest(coalesce(steps, 1), 1) AS step_ns,
           (idle_host_launch_ns + idle_synchronisation_ns) / greatest(coalesce(steps, 1), 1) AS idle_host_ns,
           idle_communication_ns / greatest(coalesce(steps, 1), 1) AS idle_comm_ns,
           idle_other_ns / greatest(coalesce(steps, 1), 1) AS idle_other_ns
    FROM device_verdicts WHERE date = {date}"""

# section -> (the tables it reads, SQL with {date} for the day's literal)
SECTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "jobs": (("traces",), """
        SELECT job_id, count(*) AS ranks, sum(nodes)::BIGINT AS nodes, any_value(source_format) AS source,
               arg_min(path, rank) AS path
        FROM traces WHERE date = {date} GROUP BY job_id ORDER BY job_id"""),
    "rejects": (("rejects",), """
        SELECT coalesce(job_id, '') AS job_id, stage, reason, list(file ORDER BY file) AS files FROM rejects
        WHERE date = {date} GROUP BY ALL ORDER BY job_id, len(files), reason"""),
    "device_families": (("device_time",), """
        SELECT family, sum(ns)::BIGINT AS ns, sum(count)::BIGINT AS count, sum(ns) / sum(sum(ns)) OVER () AS share
        FROM device_time WHERE date = {date} AND variant = 'recorded' GROUP BY family ORDER BY ns DESC"""),
    "device_jobs": (("device_verdicts",), f"""
        SELECT job_id, count(DISTINCT rank) AS ranks, max(steps) FILTER (variant = 'recorded') AS steps,
               max(step_ns) FILTER (variant = 'recorded') AS step_ns,
               max(step_ns) FILTER (variant = 'predicted') AS predicted_step_ns,
               any_value(system) FILTER (variant = 'predicted') AS predicted_by,
               avg(busy_share) FILTER (variant = 'recorded') AS busy_share,
               avg(busy_share) FILTER (variant = 'predicted') AS predicted_busy_share,
               avg(idle_host_ns) FILTER (variant = 'recorded') AS idle_host_ns,
               avg(idle_comm_ns) FILTER (variant = 'recorded') AS idle_comm_ns,
               avg(idle_other_ns) FILTER (variant = 'recorded') AS idle_other_ns,
               mode(bound) FILTER (variant = 'recorded') AS bound,
               mode(bound) FILTER (variant = 'predicted') AS predicted_bound
        FROM ({_STEPS}) GROUP BY job_id ORDER BY job_id"""),
    "systems": (("sim_results",), """
        SELECT job_id, count(*) AS systems, count(*) FILTER (status = 'ok') AS simulated,
               arg_min(system, finish_ns) FILTER (status = 'ok') AS best,
               min(finish_ns) FILTER (status = 'ok') AS best_ns,
               arg_max(system, finish_ns) FILTER (status = 'ok') AS worst,
               CASE WHEN count(*) FILTER (status = 'ok') >= 2
                    THEN max(finish_ns) FILTER (status = 'ok') / nullif(min(finish_ns) FILTER (status = 'ok'), 0)
               END AS worst_over_best,
               count(*) FILTER (status = 'ok' AND finish_ns = best_of_job) AS tied
        FROM (SELECT *, min(finish_ns) FILTER (status = 'ok') OVER (PARTITION BY job_id) AS best_of_job
              FROM sim_results WHERE date = {date})
        GROUP BY job_id ORDER BY job_id"""),
    "not_simulated": (("sim_results",), """
        SELECT job_id, status, coalesce(error, '') AS error, list(system ORDER BY system) AS systems
        FROM sim_results WHERE date = {date} AND status <> 'ok' GROUP BY ALL ORDER BY job_id, status, error"""),
    "representatives": (("representatives",), """
        SELECT job_id, npus, family, cluster, weight, cluster_time_share, cluster_estimate_error FROM representatives
        WHERE date = {date} AND representative ORDER BY weight DESC"""),
    "estimate": (("representatives",), """
        SELECT any_value(estimate_error) AS estimate_error, any_value(estimate_errors) AS estimate_errors,
               count(*) FILTER (representative) AS representatives, count(*) AS jobs
        FROM representatives WHERE date = {date} AND status = 'ok' HAVING count(*) > 0"""),
    "fidelity": (("fidelity",), """
        SELECT npus, cluster, real_jobs, synthetic_jobs, iteration_time_relative_error, composition_tv,
               message_size_ks_worst, verdict FROM fidelity WHERE date = {date} ORDER BY npus, cluster"""),
    "colocation": (("colocation",), """
        SELECT job_id, network, placement, mode, ranks, finish_ns, alone_finish_ns, slowdown, waited_ns, top_link,
               top_link_waited_ns, behind, status FROM colocation WHERE date = {date}
        ORDER BY slowdown DESC NULLS LAST, job_id"""),
    "changes": (("regressions",), """
        SELECT job_id, metric, before, after, change, threshold, noise, kind, cause, explained, baseline_date,
               history_days, step_impact, step_impact_ns, impact_basis, impact_note FROM regressions
        WHERE date = {date} ORDER BY job_id, abs(step_impact) DESC NULLS LAST, abs(change) DESC NULLS FIRST"""),
}


@dataclass
class Day:
    """A warehouse opened for one day of it."""

    con: object  # DuckDB connection, confined to the warehouse
    tables: dict[str, list[str]]  # table -> its Parquet files
    date: str

    def has(self, *names: str) -> bool:
        return all(self.tables.get(n) for n in names)

    def query(self, sql: str) -> pa.Table:
        """`sql` with {date} standing for the day and {first} for the first day of the history window
        (replaced, not str.format: literals in `sql` may hold braces)."""
        return run_query(self.con, sql.replace("{date}", _date(self.date)).replace("{first}",
                                                                                  _date(_first_day(self.date))))


def literal(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _date(day: str) -> str:
    return f"CAST({literal(day)} AS DATE)"


def _first_day(day: str) -> str:
    """The first day of the HISTORY_WINDOW_DAYS ending on `day`; one line when `day` is not one."""
    try:
        return (dt.date.fromisoformat(day) - dt.timedelta(days=HISTORY_WINDOW_DAYS - 1)).isoformat()
    except ValueError:
        raise WarehouseError(f"--date {day!r}: expected YYYY-MM-DD") from None


def _days(files_by_table: dict) -> set[str]:
    """The days the nightly committed: its `nights` rows (days of no job included), by their
    files' folders; a warehouse older than that table, by its `traces` folders."""
    table = "nights" if files_by_table.get("nights") else "traces"
    days = {part[5:] for f in files_by_table.get(table, []) for part in f.split("/") if part.startswith("date=")}
    if not days:
        raise WarehouseError("the warehouse has no night: no day to report")
    return days


def _known_day(days: set[str], date: str) -> str:
    """date, when a night committed it; else one line naming the days there are (no page of a
    day the warehouse lacks)."""
    if date not in days:
        raise WarehouseError(f"the warehouse has no day {date} (its days: {min(days)} to {max(days)}, {len(days)} "
                             "in all)")
    return date


def open_day(url: str, date: str | None = None, window: bool = True) -> Day:
    """The warehouse opened for a day (the latest night's when none is given), its views over the
    HISTORY_WINDOW_DAYS up to it when `window` (all the day page and its job pages read), else
    over every day (the index of days)."""
    committed = committed_days(url)
    day = date or (committed[-1] if committed else None)
    first = _first_day(day) if day else None  # (a day given is checked before anything is opened)
    con, files_by_table, skipped = open_warehouse(url, since=first if window else None)
    for warning in skipped:  # parts that are not Parquet, left out of their tables
        print(f"report: warning: {warning}", file=sys.stderr)
    days = set(committed) if committed else _days(files_by_table)
    if day is None:  # a warehouse without a catalog: its latest folder
        day = max(days)
        _first_day(day)
    _known_day(days, day)
    return Day(con, files_by_table, day)


def sections_of(day: Day) -> dict[str, pa.Table]:
    """{section: table} for the day page."""
    return {name: day.query(sql) if day.has(*needs) else pa.table({}) for name, (needs, sql) in SECTIONS.items()}


def day_sections(url: str, date: str | None = None) -> tuple[str, dict[str, pa.Table]]:
    """(the day, {section: table}) for the day's page."""
    day = open_day(url, date)
    return day.date, sections_of(day)


# the index: per day, what each table holds (table -> SQL of date and its counts)
_INDEX = {
    "traces": "SELECT date, count(DISTINCT job_id) AS jobs, count(*) AS ranks FROM traces GROUP BY date",
    "rejects": "SELECT date, count(*) AS rejected_files, count(DISTINCT job_id) AS rejected_jobs FROM rejects "
               "GROUP BY date",
    "sim_results": "SELECT date, count(*) FILTER (status = 'ok') AS simulations_ok, count(*) AS simulations "
                   "FROM sim_results GROUP BY date",
    "regressions": "SELECT date, count(*) FILTER (kind = 'regression') AS regressions, "
                   "count(*) FILTER (kind = 'improvement') AS improvements, count(*) AS flagged, "
                   "list(DISTINCT job_id ORDER BY job_id) AS flagged_jobs FROM regressions GROUP BY date",
}


def days_index(day: Day) -> list[dict]:
    """One dict per day of the warehouse, newest first: its counts of each table."""
    by_date: dict[str, dict] = {}
    zeros: dict[str, object] = {}  # a table the warehouse has but without rows on a day: nothing counted, 0
    for table, sql in _INDEX.items():
        if not day.has(table):
            continue
        result = run_query(day.con, sql)
        zeros.update({c: [] if c == "flagged_jobs" else 0 for c in result.column_names if c != "date"})
        for row in result.to_pylist():
            by_date.setdefault(str(row.pop("date")), {}).update(row)
    return [{"date": d, **zeros, **by_date[d]} for d in sorted(by_date, reverse=True)]


def history(day: Day, jobs: list[str], metrics: list[str] | None = None) -> pa.Table:
    """job_id, date, fingerprint, metric, value of `job_history` for `jobs` over the window up
    to the day (every metric unless `metrics`), oldest first."""
    schema = pa.schema([("job_id", pa.string()), ("date", pa.date32()), ("fingerprint", pa.string()),
                        ("metric", pa.string()), ("value", pa.float64())])
    if not jobs or not day.has("job_history"):
        return schema.empty_table()
    where = f"job_id IN ({', '.join(literal(j) for j in jobs)})"
    if metrics is not None:
        where += f" AND metric IN ({', '.join(literal(m) for m in metrics)})" if metrics else " AND false"
    return day.query(f"""
        SELECT job_id, date, fingerprint, metric, value FROM job_history
        WHERE date BETWEEN {{first}} AND {{date}} AND {where} ORDER BY job_id, date, metric""").cast(schema)
