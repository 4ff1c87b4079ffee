"""The nightly flow: a day's drop of traces becomes Parquet tables.

    python -m flows.nightly --date YYYY-MM-DD --source URL --warehouse URL [--sweep FILE] [--num-cpus N]
        [--representatives K] [--synthetic-jobs K] [--per-rank-bytes N]

Defaults: yesterday (UTC: the nightly run processes the day that just ended), a local
object-store folder under the project (out/object-store/drops), the warehouse out/warehouse,
the default sweep (pipeline/sweeps/default.yaml), local Ray with every CPU, Prefect's
ephemeral API (a Prefect server when PREFECT_API_URL is set, a Ray cluster when RAY_ADDRESS
is). Steps: list the day -> per job on Ray: hash, convert, split per NPU, statistics -> per
job x system on Ray: simulate -> the day's representative jobs -> fit the synthesizer on the
day's jobs and sample synthetic jobs per NPU count (Ray) -> write each table for the day
atomically, then the day's report page (WAREHOUSE/reports/date=<d>/index.html, linked as a
Prefect artifact). Writing retries transient storage errors; bad input becomes `rejects` rows.
On Ray the steps overlap (no barrier): a job's simulations start as soon as that job is
converted and no other conversion waits for a CPU, and the fit as soon as the last job is
converted; the stage `simulate (Ray)` waits for the simulations still running then, and its
log line says how many those were.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from functools import partial

# first: it sets Prefect's environment
from flows.stages import (CHECKOUT_SOURCE, CHECKOUT_WAREHOUSE, DEFAULT_SOURCE, DEFAULT_WAREHOUSE, StageFailed,
                          from_cwd, in_checkout, quiet_console, run_stage, transient_only)
from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.exceptions import FailedRun  # noqa: E402
from prefect.states import Failed  # noqa: E402

from chakra_core.days import iso_day  # noqa: E402
from pipeline import preflight, tables  # noqa: E402
from pipeline.nightly.bigjobs import PER_RANK_BYTES  # noqa: E402
from pipeline.nightly.colocation import ColocationPlan  # noqa: E402
from pipeline.cluster import end_on_signals, start_ray, stopped_by  # noqa: E402
from pipeline.day_lock import DayLocked, day_lock  # noqa: E402
from pipeline.layout import StorageError, describe, report_dir, storage_fault  # noqa: E402
from pipeline.nightly.represent import DEFAULT_REPRESENTATIVES  # noqa: E402
from pipeline.nightly.run import DayResult, run_day  # noqa: E402
from chakra_core.warehouse.catalog import table_location  # noqa: E402
from pipeline.simulation import load_sweep  # noqa: E402
from pipeline.nightly.synthesis import JOBS_PER_NPU_COUNT, MAX_JOBS_PER_NPU_COUNT  # noqa: E402
from chakra_core.synth.fidelity import TARGETS  # noqa: E402

STORAGE_RETRIES = 3


@task(name="commit tables", retries=STORAGE_RETRIES, retry_delay_seconds=[1, 4, 10], cache_policy=NO_CACHE,
      retry_condition_fn=transient_only)
def commit_tables(warehouse: str, date: str, files: dict, run_id: str, committed: list[str]) -> dict:
    """The night's data files compacted and committed, one Iceberg commit per table."""
    return tables.commit_night(warehouse, date, files, run_id, committed)


@task(name="write report", retries=STORAGE_RETRIES, retry_delay_seconds=[1, 4, 10], cache_policy=NO_CACHE,
      retry_condition_fn=transient_only)
def write_report(warehouse: str, date: str) -> str:
    """The day's report page beside the tables, linked as a Prefect artifact of the run."""
    from prefect.artifacts import create_link_artifact

    from chakra_core.viz.report import write_report as write_page

    url = write_page(warehouse, report_dir(warehouse, date), date)
    create_link_artifact(url, link_text=f"fleet report {date}", key=f"fleet-report-{date}",
                         description="the day's jobs, device time, best systems, representatives and fidelity")
    return url


@flow(name="nightly")
def nightly(date: str | None = None, source: str = CHECKOUT_SOURCE, warehouse: str = CHECKOUT_WAREHOUSE,
            sweep: str | None = None, num_cpus: int | None = None, progress=None,
            representatives: int = DEFAULT_REPRESENTATIVES, synthetic_jobs: int = JOBS_PER_NPU_COUNT,
            per_rank_bytes: int = PER_RANK_BYTES, announce=None, colocate: str | None = None,
            colocate_placement: str = "packed", colocate_jobs: list[str] | None = None,
            colocate_system: str | None = None) -> dict:
    """Process one day's drop; returns the summary (also logged).

    Args:
        date: the day to process, YYYY-MM-DD; none: yesterday in UTC (the day that just ended)
        source: drops, SOURCE/<date>/<job>/... (an fsspec URL; a relative path is a folder of the checkout)
        warehouse: traces and tables (an fsspec URL; a relative path is a folder of the checkout)
        sweep: the sweep file; none: pipeline/sweeps/default.yaml
        num_cpus: CPUs of a local Ray; none: every CPU (ignored on the cluster RAY_ADDRESS names)
        progress: a progress callback, for the command line only; none: no progress shown
        representatives: representative jobs to choose
        synthetic_jobs: synthetic jobs per NPU count; 0: no synthesis
        per_rank_bytes: a PyTorch job whose largest rank reads this many bytes converts a Ray task per rank
        announce: called with each stage's line as the stage ends, for the command line only; none: logged only
        colocate: none: no placement what-if; else a cluster's network file: the day's representatives (or
            colocate_jobs) placed together on it by colocate_placement, into the colocation table
        colocate_placement: packed, interleaved, spread, random:SEED or a JSON file (with colocate)
        colocate_jobs: none: the day's representatives; else the job ids placed together (with colocate)
        colocate_system: none: the reference system; else the system file they are simulated on (with colocate)
    """
    date = date or (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)).isoformat()
    source, warehouse = in_checkout(source), in_checkout(warehouse)
    start_ray(num_cpus)
    try:
        preflight.check(source, warehouse)
    except preflight.PreflightError as e:  # the run fails with this line as its message, no traceback
        get_run_logger().error(str(e))
        return Failed(message=str(e))
    try:
        with day_lock(warehouse, date):  # a second run of the day is refused, never interleaved
            stage = partial(run_stage, announce=lambda line: announce(f"nightly {date}: {line}")) if announce \
                else run_stage
            plan = ColocationPlan(colocate, colocate_placement, tuple(colocate_jobs or ()),
                                  colocate_system) if colocate else None
            day = run_day(date, source, warehouse, load_sweep(sweep), progress, representatives, synthetic_jobs,
                          stage, per_rank_bytes, _progress_line, plan)
            paths = _commit(warehouse, date, day)
            changes = _changes(day)
            _changes_artifact(date, changes)
            report = _written("the report page", lambda: write_report(warehouse, date), warehouse, list(paths),
                              len(paths))
    except (StageFailed, DayLocked, StorageError) as e:  # the run fails with one line, no second traceback
        return Failed(message=str(e))  # said once, as the run's final state (a stage's failure was logged by it)
    summary = {
        "date": date, "run_id": day.run_id, "jobs": day.jobs, "jobs_converted": day.jobs_converted,
        "ranks": day.ranks, "nodes": day.nodes, "files_processed": day.files_processed,
        "rejects": day.rejected_files, "rejected_jobs": day.rejected_jobs, "files_outside_jobs": day.files_outside_jobs,
        "simulations": day.tables["sim_results"].num_rows,
        "simulations_failed": sum(s != "ok" for s in day.tables["sim_results"].column("status").to_pylist()),
        "best_system": {job: {"system": s, "finish_ns": ns, "ties": ties, "systems": n}
                        for job, (s, ns, ties, n) in sorted(day.best_systems().items())},
        "representatives": {r["job_id"]: r["weight"] for r in day.tables["representatives"].to_pylist()
                            if r["representative"]},
        "coverage": next((r["coverage"] for r in day.tables["representatives"].to_pylist() if r["status"] == "ok"),
                         None),
        "synthetic": _synthetic_summary(day),
        "changes": changes,
        "ray_nodes": sorted(day.ray_nodes),
        "tables": paths,
        "report": report,
    }
    get_run_logger().info("nightly %s: %d jobs, %d ranks, %d nodes, %d rejects", date, day.jobs, day.ranks, day.nodes,
                          summary["rejects"])
    return summary


def _progress_line(line: str) -> None:
    """A line of a long conversion's progress (pipeline/nightly/bigjobs.py), in the log of its stage."""
    get_run_logger().info(line)


def _changes(day: DayResult) -> list[dict]:
    """The night's flagged changes (the regressions table), by what they cost the step, then worst first."""
    columns = ("job_id", "metric", "before", "after", "change", "kind", "cause", "step_impact", "impact_note",
               "baseline_date")
    rows = [{k: r[k] for k in columns} for r in day.tables["regressions"].to_pylist()]
    for row in rows:
        row["baseline_date"] = str(row["baseline_date"])
    return sorted(rows, key=lambda r: (-abs(r["step_impact"] or 0), r["kind"] != "regression", -abs(r["change"] or 0),
                                       r["job_id"], r["metric"]))


def _changes_artifact(date: str, changes: list[dict]) -> None:
    """The flagged changes as a table artifact of the run (what the Prefect UI shows first)."""
    from prefect.artifacts import create_table_artifact

    create_table_artifact([{**c, "change": None if c["change"] is None else f"{c['change']:+.1%}"} for c in changes],
                          key=f"fleet-changes-{date}",
                          description=f"{len(changes)} flagged change(s) against each job's history on {date}")


def _commit(warehouse: str, date: str, day: DayResult) -> dict[str, str]:
    """The night's tables published (table -> its location); a storage fault (after the retries
    of a transient one) as one line: nothing of the night is then visible."""
    committed: list[str] = []
    _written("the tables", lambda: commit_tables(warehouse, date, day.files, day.run_id, committed), warehouse,
             committed, len(tables.TABLES))
    return {name: table_location(warehouse, name) for name in tables.TABLES}


def _written(what: str, write, warehouse: str, committed, total: int):
    """write(); a fault of the storage as StorageError naming the warehouse and the tables whose
    commit landed (each is whole: the night's or the one before)."""
    try:
        return write()
    except Exception as e:
        if storage_fault(e) is None:
            raise
        raise StorageError(f"writing {what} to the warehouse {warehouse} failed: {describe(e)}; {len(committed)} of "
                           f"{total} tables committed ({', '.join(committed) or 'none'}); no input was rejected for "
                           "it: re-run the day once the storage is fixed") from None


def _synthetic_summary(day: DayResult) -> dict:
    import json

    jobs = day.tables["synthetic_traces"].to_pylist()
    fidelity = day.tables["fidelity"].to_pylist()
    chosen = next((r for r in day.tables["representatives"].to_pylist() if r["status"] == "ok"), None)
    return {"model": day.training.get("model"), "training_jobs": day.training.get("training_jobs", 0),
            "training_skipped": len(day.training.get("skipped", [])), "error": day.training.get("error"),
            "jobs": len(jobs), "valid": sum(j["status"] == "ok" for j in jobs),
            "npus": sorted({j["npus"] for j in jobs}),
            "comparisons": len(fidelity), "meeting_targets": sum(r["verdict"] == "meets targets" for r in fidelity),
            "verdicts": {f"cluster {r['cluster']} at {r['npus']} NPUs": r["verdict"] for r in fidelity},
            # the groups whose comparison has fewer synthetic jobs than it needs: [jobs, jobs needed]
            "short": {f"cluster {r['cluster']} at {r['npus']} NPUs": [r["synthetic_jobs"], r["samples_needed"]]
                      for r in fidelity if r["verdict"].startswith("too few samples")},
            # the representatives' estimate error per group: here because nightly() builds the rest of the summary
            "selection_errors": json.loads(chosen["estimate_errors"]) if chosen else {}}


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    from chakra_core.terminal import console as stdout_console

    console = stdout_console()
    console.print(_counts_line(summary))
    best = Table("job", "best system of the sweep", "its simulated finish (ms)", box=None, pad_edge=False)
    for job, row in summary["best_system"].items():
        tie = row["ties"] > 1  # a one-rank job finishes alike everywhere: no system is best
        system = (f"none: all {row['systems']} tie" if row["ties"] == row["systems"] else
                  f"{row['system']} and {row['ties'] - 1} more (tie)") if tie else row["system"]
        best.add_row(job, system, f"{row['finish_ns'] / 1e6:,.3f}")
    console.print(best)
    if summary["representatives"]:
        console.print(f"{len(summary['representatives'])} representative job(s) (weight): "
                      + ", ".join(f"{job} ({w:.2f})" for job, w in summary["representatives"].items()))
    synthetic = summary["synthetic"]
    errors = synthetic["selection_errors"]
    if errors:
        console.print(f"  their estimate of the day's totals: largest error {max(errors.values()):.1%} ("
                      + ", ".join(f"{group} {error:.1%}" for group, error in errors.items()) + ")")
    if synthetic["model"]:
        npus = " and ".join(map(str, synthetic["npus"]))
        console.print(f"synthesizer: trained on {synthetic['training_jobs']} job(s) ({synthetic['training_skipped']} "
                      f"not usable), model {synthetic['model']}; {synthetic['valid']} of {synthetic['jobs']} "
                      f"synthetic job(s) valid at {npus} NPUs; {synthetic['meeting_targets']} of "
                      f"{synthetic['comparisons']} (cluster, NPU count) comparison(s) meet the targets")
        for group, verdict in synthetic["verdicts"].items():
            if verdict != "meets targets":  # what misses, by how much, or why it cannot be judged yet
                console.print(f"  {group}: {_in_words(verdict, synthetic['short'].get(group))}")
    elif synthetic["error"]:
        console.print(f"synthesizer: no model ({synthetic['error']})")
    console.print("tables: " + ", ".join(summary["tables"]) + " (Iceberg tables under "
                  + summary["tables"]["traces"].rsplit("/tables/", 1)[0] + "/tables/<table>/; chakra query reads them)")
    _print_changes(console, summary["changes"])


def _in_words(verdict: str, short: list[int] | None) -> str:
    """A fidelity verdict for the terminal; "too few samples (16, need 6348)" said as what it means."""
    if short is None:
        return verdict
    jobs, needed = short
    misses = verdict.partition("; so far misses: ")[2]
    return (f"not judged: the real jobs' iteration times spread too widely for {jobs} synthetic job(s) to place "
            f"their median within {TARGETS['iteration_time_relative_error']:.0%} (that takes about {needed:,}; a "
            f"night makes at most {MAX_JOBS_PER_NPU_COUNT} per NPU count)"
            + (f"; so far it misses: {misses}" if misses else ""))


def _counts_line(summary: dict) -> str:
    """The night's head line: jobs, then files (a rejected file is a file, of a job or of no job),
    then simulations with those that failed."""
    outside = summary["files_outside_jobs"]
    of_jobs = summary["rejects"] - outside
    where = [f"{of_jobs} in {summary['rejected_jobs']} job(s)"] if of_jobs else []
    where += [f"{outside} outside any job's folder"] if outside else []
    rejected = f" ({', '.join(where)}: chakra query \"SELECT * FROM rejects WHERE date = '{summary['date']}'\")" \
        if where else ""
    failed = summary["simulations_failed"]
    why = f": chakra query \"SELECT job_id, system, error FROM sim_results WHERE status <> 'ok' AND date = " \
          f"'{summary['date']}'\"" if failed else ""
    return (f"nightly {summary['date']} (run {summary['run_id']}): {summary['jobs']} jobs, {summary['jobs_converted']} "
            f"converted ({summary['ranks']} rank traces, {summary['nodes']:,} nodes); {summary['files_processed']} "
            f"files read, {summary['rejects']} files rejected{rejected}; {summary['simulations']} simulations, "
            f"{failed} failed{why}")


def _print_changes(console, changes: list[dict]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from chakra_core.analysis.history import shown, words

    if not changes:
        console.print("changes against each job's history: none flagged")
        return
    table = Table("job", "figure", "before", "after", "change", "kind", "cause", "cost to the step", box=None,
                  pad_edge=False, title=f"{len(changes)} flagged change(s) against each job's history, by what "
                                        "they cost the step", title_justify="left")
    for c in changes:
        table.add_row(escape(str(c["job_id"])), escape(words(c["metric"])), shown(c["metric"], c["before"]),
                      shown(c["metric"], c["after"]), "" if c["change"] is None else f"{c['change']:+.1%}",
                      c["kind"], escape(c["cause"]), escape(c["impact_note"] or ""))
    console.print(table)



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.nightly", description=__doc__.split("\n")[0])
    parser.add_argument("--date", action="append", metavar="YYYY-MM-DD", type=iso_day,
                        help="the day to process (default: yesterday, UTC); repeat it to process several days in "
                             "turn, oldest first, in one Ray and Prefect session")
    parser.add_argument("--source", default=DEFAULT_SOURCE, type=from_cwd,
                        help="drops: SOURCE/<date>/<job>/... (any fsspec URL)")
    parser.add_argument("--warehouse", default=DEFAULT_WAREHOUSE, type=from_cwd,
                        help="traces and tables (any fsspec URL)")
    parser.add_argument("--sweep", help="sweep file (default: pipeline/sweeps/default.yaml)")
    parser.add_argument("--num-cpus", type=int, help="CPUs of the local Ray instance (default: all)")
    parser.add_argument("--representatives", type=int, default=DEFAULT_REPRESENTATIVES, metavar="K",
                        help=f"representative jobs to choose (default {DEFAULT_REPRESENTATIVES})")
    parser.add_argument("--synthetic-jobs", type=int, default=JOBS_PER_NPU_COUNT, metavar="K",
                        help=f"synthetic jobs per NPU count (default {JOBS_PER_NPU_COUNT}; 0: no synthesis)")
    parser.add_argument("--per-rank-bytes", type=int, default=PER_RANK_BYTES, metavar="N",
                        help=f"a PyTorch job whose largest rank reads N bytes or more (gzip expanded) converts a Ray "
                             f"task per rank (default {PER_RANK_BYTES})")
    parser.add_argument("--colocate", metavar="NETWORK.yml", type=from_cwd,
                        help="place the day's representatives (or --colocate-jobs) together on this cluster network, "
                             "congestion-aware, into the colocation table and the day's page")
    parser.add_argument("--colocate-placement", default="packed", metavar="P",
                        help="packed (default), interleaved, spread, random:SEED or a placement JSON file")
    parser.add_argument("--colocate-jobs", metavar="ID,ID,...", help="the jobs to place (default: the representatives)")
    parser.add_argument("--colocate-system", metavar="SYS.json", type=from_cwd,
                        help="the system file of the what-if (default: the reference system)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's and Ray's INFO lines")
    args = parser.parse_args(argv)
    end_on_signals()
    from chakra_core.terminal import Progress

    quiet_console(args.verbose)
    sys.stdout.reconfigure(line_buffering=True)  # into a pipe or a log too, each line as it is printed
    reports = []
    for date in sorted(args.date or [None], key=lambda d: d or ""):
        try:
            with Progress(items=True) as progress:
                summary = nightly(date, args.source, args.warehouse, args.sweep, args.num_cpus, progress,
                                  args.representatives, args.synthetic_jobs, args.per_rank_bytes, print,
                                  args.colocate, args.colocate_placement,
                                  args.colocate_jobs.split(",") if args.colocate_jobs else None, args.colocate_system)
        except BaseException as e:
            if stopper := stopped_by(e):  # Ctrl-C, or a stop signal (end_on_signals)
                print(f"nightly: stopped by {stopper}", file=sys.stderr)
                return 130
            if not isinstance(e, FailedRun):
                raise
            print(f"nightly: {e}", file=sys.stderr)  # a preflight refusal or a failed stage: its one line
            return 2
        _print_summary(summary)
        reports.append(summary["report"])
    print("report: " + "\nreport: ".join(reports))
    print("report pages: " + reports[-1].rsplit("/date=", 1)[0] + "/index.html (every day)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
