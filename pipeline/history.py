"""The fleet's memory: each night's figures per job (`job_history`), its kernels by name
(`kernels`), and what changed against the job's own history (`regressions`).

The detection reads only what it needs: the `job_history` parts of the HISTORY_DAYS days
before the night (partition folders listed, older ones never opened), three columns of them,
never a trace. Each job is compared with its latest earlier day (the baseline); its noise
comes from the days before that of the same program (chakra_core/analysis/changes.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from chakra_core.analysis import changes
from chakra_core.analysis.history import figures, unit
from chakra_core.table_schema import TableSchema, column
from pipeline.jobs import KERNELS
from pipeline.layout import PART, filesystem, join

HISTORY_DAYS = 28
HISTORY_COLUMNS = ["job_id", "fingerprint", "metric", "value"]

_JOB, _METRIC, _RUN = column("job_id", pa.string()), column("metric", pa.string()), column("run_id", pa.string())
# history_rows' rows: one per job and metric
JOB_HISTORY = TableSchema("job_history", (_JOB, column("fingerprint", pa.string()), _METRIC,
                                          column("value", pa.float64()), column("unit", pa.string()), _RUN))
# regression_rows': a changed program has no values to compare; a change without history, no noise
REGRESSIONS = TableSchema("regressions", (
    _JOB, _METRIC, *(column(name, pa.float64(), nullable=True) for name in ("before", "after", "change")),
    column("threshold", pa.float64()), column("noise", pa.float64(), nullable=True), column("kind", pa.string()),
    column("cause", pa.string()), column("explained", pa.float64(), nullable=True),
    column("baseline_date", pa.date32()), column("history_days", pa.int32()), _RUN))


def history_rows(day_tables: Mapping[str, pa.Table], fingerprints: Mapping[str, str], reference: str,
                 run_id: str) -> list[dict]:
    """The night's `job_history` rows: every converted job's figures (history.figures) from the
    day's tables, its simulation on the `reference` system included."""
    by_job = {name: _by_job(day_tables[name]) for name in ("traces", "device_time", "device_verdicts")}
    sims = {r["job_id"]: r for r in day_tables["sim_results"].to_pylist() if r["system"] == reference}
    collectives = day_tables["collectives"]
    rows = []
    for job_id, fp in sorted(fingerprints.items()):
        mine = collectives.filter(pc.equal(collectives.column("job_id"), job_id))
        values = figures(by_job["traces"].get(job_id, []), mine, by_job["device_time"].get(job_id, []),
                         by_job["device_verdicts"].get(job_id, []), sims.get(job_id))
        rows += [{"job_id": job_id, "fingerprint": fp, "metric": metric, "value": value, "unit": unit(metric),
                  "run_id": run_id} for metric, value in sorted(values.items())]
    return rows


def _by_job(table: pa.Table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in table.to_pylist():
        out.setdefault(row["job_id"], []).append(row)
    return out


def read_history(warehouse: str, date: str, days: int = HISTORY_DAYS) -> dict[str, list[tuple[str, str, dict]]]:
    """job -> [(day, fingerprint, {metric: value})] of the `days` days before `date`, oldest first.
    Only those days' partitions are listed and read (three columns)."""
    fs, root = filesystem(join(warehouse, "tables", "job_history"))
    first = (dt.date.fromisoformat(date) - dt.timedelta(days=days)).isoformat()
    try:
        folders = fs.ls(root, detail=False)
    except FileNotFoundError:
        return {}
    wanted = sorted(day for day in (f.rstrip("/").rsplit("date=", 1)[-1] for f in folders if "date=" in f)
                    if first <= day < date)
    out: dict[str, list[tuple[str, str, dict]]] = {}
    for day in wanted:
        path = f"{root.rstrip('/')}/date={day}/{PART}"
        if not fs.exists(path):
            continue
        with fs.open(path, "rb") as f:
            table = pq.read_table(f, columns=HISTORY_COLUMNS)
        for job_id, fp, values in _grouped(table):
            out.setdefault(job_id, []).append((day, fp, values))
    return out


def _grouped(table: pa.Table):
    """(job, fingerprint, {metric: value}) per job of one day's part."""
    columns = table.to_pydict()
    jobs: dict[str, tuple[str, dict]] = {}
    for job_id, fp, metric, value in zip(columns["job_id"], columns["fingerprint"], columns["metric"],
                                         columns["value"]):
        jobs.setdefault(job_id, (fp, {}))[1][metric] = value
    return [(job_id, fp, values) for job_id, (fp, values) in jobs.items()]


def regression_rows(today: Sequence[dict], history: Mapping[str, list[tuple[str, str, dict]]],
                    run_id: str) -> list[dict]:
    """The night's flagged changes: each job of `today` (job_history rows) against its latest
    earlier day, with the noise of the earlier days of the same program."""
    rows = []
    for job_id, fp, values in _grouped(JOB_HISTORY.from_rows(list(today))):  # typed: a day with no job too
        past = history.get(job_id)
        if not past:
            continue  # a new job: nothing to compare with yet
        baseline_day, baseline_fp, baseline = past[-1]
        same_program = [v for _, f, v in past if f == baseline_fp]
        found = changes.compare(baseline, values, same_program, program_changed=fp != baseline_fp)
        if fp != baseline_fp:
            found.insert(0, changes.Change("program", None, None, None, 0.0, None, True, "changed", "program", None))
        rows += [{"job_id": job_id, **{k: v for k, v in c.to_dict().items() if k != "flagged"},
                  "baseline_date": dt.date.fromisoformat(baseline_day), "history_days": len(same_program),
                  "run_id": run_id} for c in changes.flagged(found)]
    return rows


def memory_tables(day_tables: Mapping[str, pa.Table], fingerprints: Mapping[str, str], kernels: list[dict],
                  reference: str, history: Mapping[str, list], run_id: str) -> dict[str, pa.Table]:
    """The night's job_history, kernels and regressions tables."""
    today = history_rows(day_tables, fingerprints, reference, run_id)
    return {"job_history": JOB_HISTORY.from_rows(today), "kernels": KERNELS.from_rows(kernels),
            "regressions": REGRESSIONS.from_rows(regression_rows(today, history, run_id))}
