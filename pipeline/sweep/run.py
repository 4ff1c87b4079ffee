"""An ad hoc sweep on Ray: every job of its sources on every point of its sweep file.

`plan` lists the jobs, pairs them with their points (`where` on traced_npus), counts the
simulations and refuses more than the limit, all before any work. Then `run_sweep`'s stages
(its `stage` runs each; the flow shows them as Prefect tasks):
- prepare jobs (Ray): make the synthetic and generated jobs, hash every job (a task each);
- simulate (Ray): skip the (job hash, point) pairs with a row in the table but a failed one, then run the rest in
  batches of one job's points, so that a job is read once per batch. Batches are sized by
  simulated NPUs (a simulation's cost grows with them): about four per CPU of the cluster, at
  most MAX_BATCH_NPUS, the largest first. Rows are written as parts every FLUSH_ROWS rows or
  FLUSH_SECONDS, so an interrupted sweep loses at most that; a batch whose task fails
  (after Ray's retries) is recorded as failed rows with the reason, and the rest go on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.cluster import WORKER_RETRIES, Stage, direct
from pipeline.layout import join, retried, sweep_jobs_dir
from pipeline.simulation import failed_row, simulate_batch
from pipeline.sweep_point import SweepPoint
from pipeline.sweep.file import Sweep, SweepError
from pipeline.sweep.jobs import Sources, SweepJob, list_jobs, prepare_job
from pipeline.sweep.table import PartWriter, done_keys, schema, sweep_folder

BATCHES_PER_CPU = 4  # so that the cluster stays busy while the last batches finish
MAX_BATCH_NPUS = 32 * 1024  # simulated NPUs per batch: about 26 s at 0.8 ms each (bench_sweep.py)
FLUSH_ROWS = 10_000
FLUSH_SECONDS = 60.0
Progress = Callable[[str, int, int], None]
Batch = tuple[SweepJob, list[SweepPoint]]


@dataclass
class Plan:
    jobs: list[SweepJob]
    points: dict[str, list[SweepPoint]]  # job id -> its points
    problems: list[str]  # folders that are not jobs

    @property
    def simulations(self) -> int:
        return sum(len(p) for p in self.points.values())

    def describe(self, sweep: Sweep) -> str:
        return (f"{self.simulations:,} simulations: {len(self.jobs)} jobs x up to {len(sweep.points):,} points"
                + "".join(f"; not a job: {line}" for line in self.problems))


@dataclass
class SweepResult:
    folder: str
    planned: int = 0
    skipped: int = 0  # already in the table
    rows: int = 0  # written by this run
    status: dict[str, int] = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0  # simulating, the wall time


def plan(sweep: Sweep, sources: Sources, max_points: int) -> Plan:
    jobs, problems = list_jobs(sources)
    result = Plan(jobs, {job.job_id: sweep.points_for(job.npus) for job in jobs}, problems)
    if jobs and not result.simulations:
        raise SweepError(f"where: no point meets the conditions on traced_npus for any of the {len(jobs)} jobs "
                         f"({', '.join(c.text for c in sweep.where)}); nothing would be simulated")
    if result.simulations > max_points:
        raise SweepError(f"{result.simulations:,} simulations ({len(jobs)} jobs x {len(sweep.points):,} points) "
                         f"exceed the limit of {max_points:,} (--max-points raises it)")
    return result


def run_sweep(sweep: Sweep, planned: Plan, warehouse: str, name: str, date: str | None = None,
              progress: Progress | None = None, stage: Stage = direct) -> SweepResult:
    """The planned simulations not yet in the sweep's table (date: the nightly day its jobs came from)."""
    folder = sweep_folder(warehouse, name, date)
    store = sweep_jobs_dir(warehouse, name)
    jobs = stage("prepare jobs (Ray)", lambda: prepare(planned.jobs, store, progress),
                 lambda done: f"{len(done)} jobs hashed ({sum(j.recipe is not None for j in done)} made)")
    result = SweepResult(folder, planned.simulations, problems=planned.problems)
    return stage("simulate (Ray)", lambda: simulate(sweep, jobs, planned, result, progress),
                 lambda r: f"{r.rows:,} simulated ({_counts(r.status)}), {r.skipped:,} already in {folder}")


def _counts(status: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {s}" for s, n in sorted(status.items())) or "none"


def prepare(jobs: list[SweepJob], store: str, progress: Progress | None = None) -> list[SweepJob]:
    """Every job made and hashed, a Ray task each."""
    import ray

    task = ray.remote(max_retries=WORKER_RETRIES)(prepare_job)
    pending = [task.remote(job, store) for job in jobs]
    done = []
    for i, ref in enumerate(pending, 1):
        done.append(ray.get(ref))
        if progress:
            progress("jobs prepared", i, len(pending))
    return done


def simulate(sweep: Sweep, jobs: list[SweepJob], planned: Plan, result: SweepResult,
             progress: Progress | None = None) -> SweepResult:
    """The simulations not yet in the table, batched on Ray, written as they come."""
    import ray

    done = done_keys(result.folder)
    work = [(job, [p for p in planned.points[job.job_id] if (job.sha256, p.key) not in done]) for job in jobs]
    todo = sum(len(points) for _, points in work)
    result.skipped = planned.simulations - todo
    cpus = int(ray.cluster_resources().get("CPU", 1))
    task = ray.remote(max_retries=WORKER_RETRIES)(simulate_batch)
    pending = {task.remote(job, points, sweep.cost): (job, points) for job, points in batches(work, cpus)}
    run_id, rows, flushed, start = uuid.uuid4().hex[:12], [], time.monotonic(), time.monotonic()
    writer = PartWriter(result.folder, schema(sweep.columns, sweep.points), run_id)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        job, points = pending.pop(ready[0])
        rows += [{**row, "run_id": run_id} for row in _rows(ready[0], job, points, sweep.cost)]
        if len(rows) >= FLUSH_ROWS or (rows and time.monotonic() - flushed >= FLUSH_SECONDS) or not pending:
            _flush(writer, rows, result)
            rows, flushed = [], time.monotonic()
        if progress:
            progress("simulations", result.rows + len(rows), todo)
    result.seconds = time.monotonic() - start
    return result


def _rows(ref, job: SweepJob, points: list[SweepPoint], cost: dict[str, float]) -> list[dict]:
    """A batch's rows, or failed rows saying why its task failed (Ray retried a dead worker already)."""
    import ray

    try:
        return ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - any failure of the task is recorded, the sweep goes on
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        return [failed_row(job, p, f"the task failed: {reason}", cost) for p in points]


def _flush(writer: PartWriter, rows: list[dict], result: SweepResult) -> None:
    url = join(writer.folder, f"part-<n>-{writer.run_id}.parquet")
    result.parts.append(retried("writing", url, lambda: writer.write(rows)))
    result.rows += len(rows)
    for row in rows:
        result.status[row["status"]] = result.status.get(row["status"], 0) + 1


def batches(work: list[Batch], cpus: int) -> list[Batch]:
    """Each job's points in runs of about the same simulated NPUs, the costliest batches first."""
    def cost(job: SweepJob, p: SweepPoint) -> int:
        return max(p.npus or job.npus, job.npus)

    total = sum(cost(job, p) for job, points in work for p in points)
    budget = max(1, min(MAX_BATCH_NPUS, total // (BATCHES_PER_CPU * max(cpus, 1))))
    out: list[tuple[int, Batch]] = []
    for job, points in work:
        run: list[SweepPoint] = []
        spent = 0
        for p in sorted(points, key=lambda p: cost(job, p)):  # alike sizes together
            run.append(p)
            spent += cost(job, p)
            if spent >= budget:
                out.append((spent, (job, run)))
                run, spent = [], 0
        if run:
            out.append((spent, (job, run)))
    return [batch for _, batch in sorted(out, key=lambda item: -item[0])]
