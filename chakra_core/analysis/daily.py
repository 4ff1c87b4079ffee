"""One day of the warehouse as the daily report shows it: each section a query over the
nightly tables (warehouse.py's views), answered as a pyarrow Table.

`day_sections(url, date)` returns {section: table} for the day (the latest day of the
`traces` table when no date is given); a section whose table the warehouse lacks (a
warehouse from before that table existed) is an empty table, not an error.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from chakra_core.analysis.warehouse import WarehouseError, open_warehouse, run_query

# section -> (the tables it reads, SQL with {date} for the day's literal)
SECTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "jobs": (("traces",), """
        SELECT job_id, count(*) AS ranks, sum(nodes)::BIGINT AS nodes, any_value(source_format) AS source
        FROM traces WHERE date = {date} GROUP BY job_id ORDER BY job_id"""),
    "rejects": (("rejects",), """
        SELECT coalesce(job_id, '') AS job_id, file, stage, reason FROM rejects WHERE date = {date}
        ORDER BY job_id, file"""),
    "device_families": (("device_time",), """
        SELECT family, variant, sum(ns)::BIGINT AS ns, sum(count)::BIGINT AS count FROM device_time WHERE date = {date}
        GROUP BY ALL ORDER BY variant DESC, ns DESC"""),
    "device_jobs": (("device_verdicts",), """
        SELECT job_id, variant, any_value(system) AS system, max(span_ns) AS span_ns,
               avg(busy_share) AS busy_share, sum(idle_host_launch_ns + idle_synchronisation_ns)::BIGINT AS host_idle_ns,
               sum(idle_communication_ns)::BIGINT AS comm_idle_ns, mode(bound) AS bound
        FROM device_verdicts WHERE date = {date} GROUP BY ALL ORDER BY job_id, variant DESC"""),
    "host_bound": (("device_verdicts",), """
        SELECT job_id, variant, max(span_ns) AS span_ns, avg(busy_share) AS busy_share FROM device_verdicts
        WHERE date = {date} AND bound = 'host' GROUP BY ALL ORDER BY job_id, variant DESC"""),
    "best_system": (("sim_results",), """
        SELECT job_id, arg_min(system, finish_ns) AS best, min(finish_ns) AS finish_ns,
               max(finish_ns) / nullif(min(finish_ns), 0) AS worst_over_best
        FROM sim_results WHERE date = {date} AND status = 'ok' GROUP BY job_id ORDER BY job_id"""),
    "representatives": (("representatives",), """
        SELECT job_id, npus, weight, cluster_time_share, estimate_error FROM representatives
        WHERE date = {date} AND representative ORDER BY weight DESC"""),
    "fidelity": (("fidelity",), """
        SELECT npus, cluster, real_jobs, synthetic_jobs, iteration_time_relative_error, composition_tv,
               message_size_ks_worst, verdict FROM fidelity WHERE date = {date} ORDER BY npus, cluster"""),
}


def latest_day(files_by_table: dict) -> str:
    return max(_days(files_by_table))


def _days(files_by_table: dict) -> set[str]:
    """The days the nightly wrote (a traces part each, empty days included), by their folders."""
    days = {part[5:] for f in files_by_table.get("traces", []) for part in f.split("/") if part.startswith("date=")}
    if not days:
        raise WarehouseError("the warehouse has no traces table: no day to report")
    return days


def _known_day(files_by_table: dict, date: str) -> str:
    """date, when the nightly wrote it; else one line naming the days there are (no page of a day
    the warehouse lacks)."""
    days = _days(files_by_table)
    if date not in days:
        raise WarehouseError(f"the warehouse has no day {date} (its days: {min(days)} to {max(days)}, {len(days)} "
                             "in all)")
    return date


def day_sections(url: str, date: str | None = None) -> tuple[str, dict[str, pa.Table]]:
    """(the day, {section: table}) for the day's report."""
    con, files_by_table, skipped = open_warehouse(url)
    for warning in skipped:  # parts that are not Parquet, left out of their tables
        print(f"report: warning: {warning}", file=sys.stderr)
    day = _known_day(files_by_table, date) if date else latest_day(files_by_table)
    literal = "'" + day.replace("'", "''") + "'"
    sections = {}
    for name, (needs, sql) in SECTIONS.items():
        if all(files_by_table.get(t) for t in needs):
            sections[name] = run_query(con, sql.format(date=f"CAST({literal} AS DATE)"))
        else:
            sections[name] = pa.table({})
    return day, sections
