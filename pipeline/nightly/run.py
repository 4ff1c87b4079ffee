"""A day of work on Ray: every job converted and summarised, every converted job simulated on
every system of the sweep. Tasks read object storage and write their rows as the night's table
files themselves, returning a job's digest (pipeline/nightly/job_digest.py), so neither traces nor a
job's rows pass through the driver: what it holds grows with the jobs of the day, a few KB
each, not with their ranks or nodes. The tables the driver makes itself (simulations, history,
representatives, synthesis) have a row or a few per job. The day runs in named stages
(`run_day`'s `stage`), which the nightly flow shows as Prefect tasks; the Ray plumbing is
pipeline/cluster.py; flows/nightly.py commits the files (pipeline/tables.py: commit_night).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from chakra_core.inputs import sha256
from pipeline.nightly.colocation import ColocationPlan, chosen_jobs, colocation_rows
from pipeline.nightly.bigjobs import PER_RANK_BYTES, ProgressLog, capped, converts_by_rank, job_memory
from pipeline.cluster import WORKER_RETRIES, Stage, direct
from pipeline.nightly.drop import list_day
from pipeline.nightly.history import memory_tables, read_history
from pipeline.nightly.impact import parts_to_set_back, with_step_impacts
from pipeline.nightly.ingest import InputFile, JobInput
from pipeline.nightly.job_digest import JobDigest, digest
from pipeline.nightly.jobs import process_job
from pipeline.layout import StorageError, raise_if_storage, remove, retried, staging_day
from pipeline.nightly.represent import DEFAULT_REPRESENTATIVES, representatives_table
from pipeline.sweep_point import SweepPoint
from pipeline.simulation import reference_point, simulate_row
from pipeline.sweep.jobs import exists
from pipeline.nightly.synthesis import JOBS_PER_NPU_COUNT, fit_day, synthesize_npus, target_npus
from pipeline.nightly.night import night_table
from pipeline.tables import from_rows, write_rows

FAULT_KILL_ONCE = "CHAKRA_FAULT_KILL_WORKER_ONCE"  # test hook: a marker file path (see tests)
DRAIN_EVERY_S = 1.0  # while jobs convert a task per rank, their progress lines are logged this often


@dataclass
class DayResult:
    date: str
    run_id: str
    tables: dict[str, pa.Table] = field(default_factory=dict)  # the small tables the driver makes
    files: dict[str, list[str]] = field(default_factory=dict)  # table -> the night's data files, not yet committed
    jobs: int = 0
    jobs_converted: int = 0
    ranks: int = 0
    nodes: int = 0
    files_processed: int = 0
    rejected_files: int = 0  # of jobs, and outside any job's folder
    rejected_jobs: int = 0  # jobs with a rejected file
    files_outside_jobs: int = 0  # loose files of the drop (each rejected)
    jobs_by_rank: int = 0  # jobs converted a Ray task per rank (pipeline/nightly/bigjobs.py)
    training: dict = field(default_factory=dict)  # the synthesizer's training summary (pipeline/nightly/synthesis.py)
    ray_nodes: set[str] = field(default_factory=set)  # the Ray nodes that ran job tasks

    def best_systems(self) -> dict[str, tuple[str, int, int, int]]:
        """job -> (system, finish_ns) of the earliest finish, how many systems finish the job at that
        time (a one-rank job finishes alike on every system: a tie, no best) and how many simulated it."""
        rows = [r for r in self.tables["sim_results"].to_pylist() if r["status"] == "ok"]
        best: dict[str, tuple[str, int, int, int]] = {}
        for row in rows:
            if row["job_id"] not in best or row["finish_ns"] < best[row["job_id"]][1]:
                best[row["job_id"]] = (row["system"], row["finish_ns"])
        simulated = {job: [r["finish_ns"] for r in rows if r["job_id"] == job] for job in best}
        return {job: (system, ns, simulated[job].count(ns), len(simulated[job])) for job, (system, ns) in best.items()}


def _process_remote(job: JobInput, date: str, warehouse: str, run_id: str,
                    per_rank_bytes: int, log: ProgressLog | None) -> tuple[JobDigest, str]:
    """The job processed and its rows written as table files: its digest, and the node that ran
    it (on a cluster, the summary says where work went)."""
    import ray

    marker = os.environ.get(FAULT_KILL_ONCE)
    if marker and not os.path.exists(marker):  # fault injection for the retry test: die once
        open(marker, "w").close()
        os._exit(1)
    outcome = process_job(job, date, warehouse, run_id, per_rank_bytes, log)
    try:
        written = digest(outcome, warehouse, date, run_id)
    except Exception as exc:  # a full or read-only warehouse: one line, as every storage fault (not the job's)
        raise_if_storage(exc, f"the rows of job {job.job_id} were written to the warehouse {warehouse}")
        raise
    return written, ray.get_runtime_context().get_node_id()


def run_day(date: str, source: str, warehouse: str, systems: list[SweepPoint],
            progress: Callable[[str, int, int], None] | None = None,
            representatives: int = DEFAULT_REPRESENTATIVES,
            synthetic_jobs: int = JOBS_PER_NPU_COUNT, stage: Stage = direct,
            per_rank_bytes: int = PER_RANK_BYTES, log: Callable[[str], None] | None = None,
            colocation: ColocationPlan | None = None) -> DayResult:
    """Everything for one day, as data files of its tables (not yet committed: the nightly flow
    commits them), in named stages: `stage(name, step,
    counts)` runs each step and says what it did with counts(result). per_rank_bytes: a PyTorch
    job whose largest rank reads this much converts a Ray task per rank (pipeline/nightly/bigjobs.py);
    `log` gets the lines of their progress (ProgressLog) while the conversions run. With
    `colocation`, the representatives (or the plan's jobs) are placed together on its network
    (pipeline/nightly/colocation.py)."""
    result = DayResult(date, uuid.uuid4().hex[:12])
    jobs, loose = stage("list day", lambda: _list(source, date, warehouse),
                        lambda listed: f"{len(listed[0])} jobs, {len(listed[1])} file(s) outside any job's folder")
    result.jobs = len(jobs)
    reference = reference_point(systems)
    if reference not in systems:  # representatives need every job on the reference system
        systems = [*systems, reference]
    # No barrier between the stages: a job's simulations start as soon as its conversion returns
    # (and no conversion waits for a CPU), the synthesizer's fit (it reads only the converted
    # jobs) as soon as the last one has, beside the simulations still running.
    sims = _Simulations(systems, progress)
    outcomes = stage("ingest, convert and statistics (Ray)",
                     lambda: _convert(jobs, date, warehouse, result, progress, sims, per_rank_bytes, log),
                     lambda done: f"{result.jobs_converted} of {len(done)} jobs converted ({result.jobs_by_rank} "
                                  f"a task per rank), {result.ranks} ranks, "
                                  f"{result.nodes} nodes; {sims.submitted} of their simulations started meanwhile, "
                                  f"{len(sims.rows)} done")
    per_count = synthetic_jobs if result.jobs_converted else 0
    fitting = _start_fit(date, warehouse, per_count)
    sim_rows = stage("simulate (Ray)", sims.finish, lambda rows: simulation_counts(rows, sims.after_conversion))
    converted = [d for _, d in outcomes if d.prefix]
    reference_rows = [r for r in sim_rows if r["system"] == reference.name]
    result.tables = {"rejects": from_rows("rejects", _loose_rejects(loose, result.run_id)),
                     "sim_results": from_rows("sim_results", sim_rows)}
    result.rejected_files += len(loose)
    result.files_outside_jobs = len(loose)
    memory, history = stage(
        "compare with history", lambda: _remember(result, converted, reference_rows, warehouse, log),
        lambda done: f"{done[0]['regressions'].num_rows} flagged change(s) in "
                     f"{len(set(done[0]['regressions'].column('job_id').to_pylist()))} job(s)")
    result.tables.update(memory)
    result.tables["regressions"] = stage(
        "what each change costs the step (Ray)", lambda: _costs(memory["regressions"], converted, history),
        lambda table: f"{sum(v is not None for v in table.column('step_impact').to_pylist())} of "
                      f"{table.num_rows} flagged change(s) priced by simulating their job again")
    result.tables["representatives"] = stage(
        "select representatives", lambda: representatives_table(
            {d.job_id: (d.ranks, d.selection_row) for d in converted if d.selection_row}, reference_rows,
            representatives, result.run_id),
        representatives_counts)
    result.tables["colocation"] = from_rows("colocation", [] if colocation is None else stage(
        "colocate (placement what-if)", lambda: _colocate(colocation, converted, result),
        lambda rows: f"{len(rows)} jobs placed {colocation.placement} on {colocation.network}"))
    synthetic, fidelity, result.training = stage(
        "synthesis (Ray)", lambda: _synthesize(date, warehouse, result.run_id, per_count, progress, fitting),
        lambda done: f"{len(done[0])} synthetic jobs, {len(done[1])} fidelity comparisons")
    result.tables["synthetic_traces"] = from_rows("synthetic_traces", synthetic)
    result.tables["fidelity"] = from_rows("fidelity", fidelity)
    result.tables["nights"] = night_table(result, len(sim_rows))
    _gather_files(result, outcomes, warehouse)
    return result


def simulation_counts(rows: list[dict], after_conversion: int) -> str:
    """The simulation stage's line; a job that could not be simulated has its row, status and error."""
    ok = sum(r["status"] == "ok" for r in rows)
    return f"{len(rows)} simulations, {ok} ok, {len(rows) - ok} failed ({after_conversion} finished in this stage)"


def representatives_counts(table: pa.Table) -> str:
    """The selection stage's line; a job that could not be placed has a row whose status says why."""
    rows = table.to_pylist()
    chosen, unplaced = sum(r["representative"] is True for r in rows), sum(r["status"] != "ok" for r in rows)
    return f"{chosen} representatives of {len(rows)} jobs ({unplaced} not selected)"


def _list(source: str, date: str, warehouse: str) -> tuple[list[JobInput], list[InputFile]]:
    """The day's jobs and loose files; clears what a dead run of the day left in staging."""
    listed = retried("listing", source, lambda: list_day(source, date))
    staging = staging_day(warehouse, date)
    retried("clearing", staging, lambda: remove(staging))  # no reader looks there
    return listed


def _convert(jobs: list[JobInput], date: str, warehouse: str, result: DayResult,
             progress: Callable[[str, int, int], None] | None,
             sims: _Simulations, per_rank_bytes: int,
             log: Callable[[str], None] | None) -> list[tuple[JobInput, JobDigest]]:
    """A Ray task per job (hash, convert or validate, statistics, publish), declaring the memory
    its files need (pipeline/nightly/bigjobs.py); counts into result. Where jobs convert a task per
    rank, the lines their tasks put on a ProgressLog go to `log` as they come (every DRAIN_EVERY_S).
    A converted job's simulations (`sims`) go to Ray as soon as its task returns, except while
    conversions still wait for a CPU: Ray would run the simulations first (it has no priorities),
    and the end of the conversions, which the synthesizer's fit waits for, would move back.
    Simulations that finish while jobs still convert are collected here. Outcomes in job order."""
    import ray

    process = ray.remote(max_retries=WORKER_RETRIES)(_process_remote)
    lines = ProgressLog.open() if log and any(converts_by_rank(job, per_rank_bytes) for job in jobs) else None
    pending = {process.options(memory=capped(job_memory(job))).remote(job, date, warehouse, result.run_id,
                                                                      per_rank_bytes, lines): i
               for i, job in enumerate(jobs)}
    outcomes: list[JobDigest | None] = [None] * len(jobs)
    try:
        while pending:  # wait for a conversion or a simulation
            ready, _ = ray.wait([*pending, *sims.pending], num_returns=1, timeout=DRAIN_EVERY_S if lines else None)
            if lines:  # (a task's lines are all put before it returns)
                lines.drain(log)
            if not ready:
                continue
            if ready[0] not in pending:
                sims.collect(ready)
                continue
            i = pending.pop(ready[0])
            outcome, node = _result(ready[0])
            result.ray_nodes.add(node)
            outcomes[i] = outcome
            result.files_processed += outcome.files_processed
            result.rejected_files += outcome.rejected_files
            result.rejected_jobs += outcome.rejected_files > 0
            if outcome.prefix:
                sims.add(jobs[i].job_id, outcome)
                result.jobs_converted += 1
                result.jobs_by_rank += outcome.by_rank
                result.ranks += outcome.ranks
                result.nodes += outcome.nodes
            if sims.waiting and len(pending) <= ray.cluster_resources().get("CPU", 0):  # no conversion waits
                sims.release()
            if progress:
                progress("jobs", len(jobs) - len(pending), len(jobs))
    except BaseException:  # a failed night leaves nothing of its own running on the cluster
        sims.cancel()
        _abandon(list(pending))
        raise
    finally:
        if lines:
            lines.close()
    return list(zip(jobs, outcomes))


def _abandon(refs: list) -> None:
    """Cancels the tasks a failed night no longer waits for. Their own failures (a full disk meets
    every job) are the night's one line already: not also Ray's 'unhandled error' stack frames,
    which it prints for every failed result nobody read."""
    import ray

    os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
    for ref in refs:
        ray.cancel(ref)


def _result(ref) -> Any:
    """A task's value; a storage fault it raised, as the one-line StorageError it is (Ray wraps it
    with the task's traceback)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, StorageError):
            raise exc.cause from None
        raise


class _Simulations:
    """The day's simulations, a Ray task per converted job and system: added job by job as
    conversions return, submitted to Ray when released, collected as they finish, in the
    conversion stage and then in `finish` (the simulation stage)."""

    def __init__(self, systems: list[SweepPoint], progress: Callable[[str, int, int], None] | None):
        import ray

        self.systems, self.progress = systems, progress
        self._simulate = ray.remote(max_retries=WORKER_RETRIES)(simulate_row)
        self.waiting: list[tuple] = []  # simulate_row's arguments, not yet released
        self.pending: set = set()  # ObjectRefs of simulate_row
        self.rows: list[dict] = []
        self.submitted = 0
        self.after_conversion = 0  # rows collected by finish, after the last conversion returned

    def add(self, job_id: str, outcome: JobDigest) -> None:
        self.waiting += [(job_id, outcome.prefix, outcome.ranks, outcome.comm_groups, system) for system in self.systems]

    def release(self) -> None:
        """Submits the waiting simulations to Ray."""
        self.pending.update(self._simulate.remote(*args) for args in self.waiting)
        self.submitted += len(self.waiting)
        self.waiting = []

    def collect(self, ready: list) -> None:
        import ray

        self.pending.difference_update(ready)
        self.rows += ray.get(ready)
        if self.progress:
            self.progress("simulations", len(self.rows), self.submitted + len(self.waiting))

    def finish(self) -> list[dict]:
        """Every row, once the rest have finished; sorted by job and system."""
        import ray

        before = len(self.rows)
        self.release()
        try:
            while self.pending:
                self.collect(ray.wait(list(self.pending), num_returns=1)[0])
        except BaseException:
            self.cancel()
            raise
        self.after_conversion = len(self.rows) - before
        return sorted(self.rows, key=lambda r: (r["job_id"], r["system"]))

    def cancel(self) -> None:
        import ray

        for ref in self.pending:
            ray.cancel(ref)


def _loose_rejects(loose: list[InputFile], run_id: str) -> list[dict]:
    return [{"job_id": None, "file": f.name, "bytes": f.bytes, "sha256": None if f.problem else sha256(f.url),
             "stage": "ingest", "reason": f.problem or f"{f.name}: not inside a job folder", "run_id": run_id}
            for f in loose]


def _remember(result: DayResult, converted: list[JobDigest], reference_rows: list[dict], warehouse: str,
              log: Callable[[str], None] | None) -> tuple[dict[str, pa.Table], dict]:
    """The night's job_history and regressions (pipeline/nightly/history.py), and the history read."""
    warn = log or (lambda line: print(line, file=sys.stderr))
    history = retried("reading the history of", warehouse, lambda: read_history(warehouse, result.date, warn=warn))
    return memory_tables({d.job_id: d.figures for d in converted},
                         {d.job_id: d.fingerprint for d in converted if d.fingerprint},
                         {r["job_id"]: r for r in reference_rows}, history, result.run_id), history


def _costs(regressions: pa.Table, converted: list[JobDigest], history: dict) -> pa.Table:
    """The regressions with what each change costs the step (pipeline/nightly/impact.py)."""
    rows = regressions.to_pylist()
    parts = parts_to_set_back(rows, {d.job_id: d.figures for d in converted}, history)
    return from_rows("regressions", with_step_impacts(regressions, {d.job_id: d.prefix for d in converted}, parts))


def _colocate(plan: ColocationPlan, converted: list[JobDigest], result: DayResult) -> list[dict]:
    """The colocation rows of the plan's jobs (the representatives where it names none)."""
    found = {d.job_id: (d.prefix, d.ranks, d.comm_groups if d.comm_groups and exists(d.comm_groups) else None)
             for d in converted}
    return colocation_rows(plan, found, chosen_jobs(plan, result.tables["representatives"]), result.run_id)


def _gather_files(result: DayResult, outcomes: list[tuple[JobInput, JobDigest]], warehouse: str) -> None:
    """Every data file of the night, table by table: the jobs' (their workers wrote them) and
    the driver's own small tables, written here."""
    for _, outcome in outcomes:
        for table, urls in outcome.files.items():
            result.files.setdefault(table, []).extend(urls)
    for table, data in result.tables.items():
        result.files.setdefault(table, []).extend(write_rows(warehouse, table, result.date,
                                                             f"{result.run_id}-driver", data))


def _start_fit(date: str, warehouse: str, per_count: int) -> Any:
    """The synthesizer's fit on the day's converted jobs (a task, `fit_day`, which reads the jobs
    as tasks of their own), submitted as soon as the last conversion returned so that it runs
    beside the simulations; None: no synthesis."""
    import ray

    return ray.remote(max_retries=WORKER_RETRIES)(fit_day).remote(date, warehouse) if per_count >= 1 else None


def _synthesize(date: str, warehouse: str, run_id: str, per_count: int,
                progress: Callable[[str, int, int], None] | None,
                fitting: Any) -> tuple[list[dict], list[dict], dict]:
    """The fit (`_start_fit`'s task), then samples per NPU count (a task each)."""
    import ray

    if fitting is None:
        return [], [], {}
    training = ray.get(fitting)
    if not training["model"]:
        return [], [], training
    sample = ray.remote(max_retries=WORKER_RETRIES)(synthesize_npus)
    pending = [sample.remote(date, warehouse, training["model"], n, run_id, per_count)
               for n in target_npus(training["npus"])]
    synthetic, fidelity = [], []
    for done, ref in enumerate(pending, 1):
        jobs, rows = ray.get(ref)
        synthetic += jobs
        fidelity += rows
        if progress:
            progress("synthetic jobs (per NPU count)", done, len(pending))
    return synthetic, fidelity, training
