"""The fleet's memory: each night's figures per job (`job_history`), its kernels by name
(`kernels`), and what changed against the job's own history (`regressions`).

The detection reads only what it needs: the committed `job_history` files of the HISTORY_DAYS
days before the night (older ones never opened), three columns of them, never a trace. Each job is compared with its latest earlier day (the baseline); its noise
comes from the days before that of the same program (chakra_core/analysis/changes.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa

from chakra_core.analysis import changes
from chakra_core.analysis.history import simulated_figures, unit
from chakra_core.table_schema import TableSchema, column
from chakra_core.warehouse import catalog as catalogs
from chakra_core.warehouse import snapshots

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
    column("baseline_date", pa.date32()), column("history_days", pa.int32()),
    # what the change costs the step (pipeline/nightly/impact.py): null until worked out, or where it cannot be
    column("step_impact", pa.float64(), nullable=True), column("step_impact_ns", pa.int64(), nullable=True),
    column("impact_basis", pa.string(), nullable=True), column("impact_note", pa.string(), nullable=True), _RUN))


def history_rows(figures_by_job: Mapping[str, dict[str, float]], fingerprints: Mapping[str, str],
                 sims: Mapping[str, dict], run_id: str) -> list[dict]:
    """The night's `job_history` rows: every converted job's figures (history.figures, computed
    where the job converted) with those of its simulation on the reference system (`sims`)."""
    rows = []
    for job_id, fp in sorted(fingerprints.items()):
        values = {**figures_by_job.get(job_id, {}), **simulated_figures(sims.get(job_id))}
        rows += [{"job_id": job_id, "fingerprint": fp, "metric": metric, "value": value, "unit": unit(metric),
                  "run_id": run_id} for metric, value in sorted(values.items())]
    return rows


def read_history(warehouse: str, date: str, days: int = HISTORY_DAYS,
                 warn: Callable[[str], None] | None = None) -> dict[str, list[tuple[str, str, dict]]]:
    """job -> [(day, fingerprint, {metric: value})] of the `days` days before `date`, oldest first,
    from the committed job_history (three columns of those days' files). A file that cannot be
    read (damaged, a column of another type) is skipped and named to `warn`: a night never dies
    of its history."""
    catalog = catalogs.open_catalog(warehouse)
    table = catalogs.load(catalog, JOB_HISTORY.name) if catalog is not None else None
    if table is None:
        return {}
    first = (dt.date.fromisoformat(date) - dt.timedelta(days=days)).isoformat()
    # the scan's filter prunes the older days' manifests and files; the night's own day is left out
    wanted = [f for f in snapshots.data_files(table, since=first) if f.date and f.date < date]
    schema = snapshots.arrow_schema(table)
    out: dict[str, list[tuple[str, str, dict]]] = {}
    for day, files in itertools.groupby(wanted, key=lambda f: f.date):  # (data_files are in day order)
        parts = []
        for f in files:
            try:
                parts.append(snapshots.read_files([f], schema, HISTORY_COLUMNS))
            except Exception as exc:  # noqa: BLE001 - any damage of one file costs that file only
                if warn:
                    warn(f"job_history: {f.url}: cannot be read ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}); its day is compared without it")
        for job_id, fp, values in _grouped(pa.concat_tables(parts)) if parts else []:
            out.setdefault(job_id, []).append((day, fp, values))
    return out


def _grouped(table: pa.Table):
    """(job, fingerprint, {metric: value}) per job of one day's rows; a job or metric left null
    by a damaged file is no figure."""
    columns = table.to_pydict()
    jobs: dict[str, tuple[str, dict]] = {}
    for job_id, fp, metric, value in zip(columns["job_id"], columns["fingerprint"], columns["metric"],
                                         columns["value"]):
        if job_id is not None and metric is not None and isinstance(value, float):
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
        rows += [{"job_id": job_id, **{k: v for k, v in c.to_dict().items() if k not in ("flagged", "why_not")},
                  "baseline_date": dt.date.fromisoformat(baseline_day), "history_days": len(same_program),
                  "run_id": run_id} for c in changes.flagged(found)]
    return rows


def memory_tables(figures_by_job: Mapping[str, dict[str, float]], fingerprints: Mapping[str, str],
                  sims: Mapping[str, dict], history: Mapping[str, list], run_id: str) -> dict[str, pa.Table]:
    """The night's job_history and regressions tables."""
    today = history_rows(figures_by_job, fingerprints, sims, run_id)
    return {"job_history": JOB_HISTORY.from_rows(today),
            "regressions": REGRESSIONS.from_rows(regression_rows(today, history, run_id))}
