"""A day of work on Ray: every job converted and summarised, every converted job simulated on
every system of the sweep. Tasks read and write object storage themselves and return rows
(small), so traces never pass through the driver.

Ray: `start_ray()` connects to the cluster named by RAY_ADDRESS, or starts a local one with
`num_cpus` CPUs. Tasks are retried by Ray when their worker process dies (max_retries); bad
input is not an exception of the task but reject rows, so it is never retried.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from pipeline.ingest import JobInput, list_day, sha256
from pipeline.jobs import JobOutcome, process_job
from pipeline.layout import remove, staging_day
from pipeline.represent import DEFAULT_REPRESENTATIVES, representatives_table
from pipeline.sweep import SystemSpec, reference_spec, simulate_row
from pipeline.synthesis import JOBS_PER_NPU_COUNT, fit_day, synthesize_npus, target_npus
from pipeline.tables import SCHEMAS, empty, from_rows

WORKER_RETRIES = 3
FAULT_KILL_ONCE = "CHAKRA_FAULT_KILL_WORKER_ONCE"  # test hook: a marker file path (see tests)


def start_ray(num_cpus: int | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


@dataclass
class DayResult:
    date: str
    run_id: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    jobs: int = 0
    jobs_converted: int = 0
    ranks: int = 0
    nodes: int = 0
    training: dict = field(default_factory=dict)  # the synthesizer's training summary (pipeline/synthesis.py)

    def best_systems(self) -> dict[str, tuple[str, int]]:
        """job -> (system, finish_ns) with the earliest finish."""
        best: dict[str, tuple[str, int]] = {}
        for row in self.tables["sim_results"].to_pylist():
            if row["status"] == "ok" and (row["job_id"] not in best or row["finish_ns"] < best[row["job_id"]][1]):
                best[row["job_id"]] = (row["system"], row["finish_ns"])
        return best


def _process_remote(job: JobInput, date: str, warehouse: str, run_id: str) -> JobOutcome:
    marker = os.environ.get(FAULT_KILL_ONCE)
    if marker and not os.path.exists(marker):  # fault injection for the retry test: die once
        open(marker, "w").close()
        os._exit(1)
    return process_job(job, date, warehouse, run_id)


def run_day(date: str, source: str, warehouse: str, systems: list[SystemSpec],
            progress: Callable[[str, int, int], None] | None = None,
            representatives: int = DEFAULT_REPRESENTATIVES,
            synthetic_jobs: int = JOBS_PER_NPU_COUNT) -> DayResult:
    """Everything for one day, as tables (not yet written)."""
    import ray

    run_id = uuid.uuid4().hex[:12]
    jobs, loose = list_day(source, date)
    remove(staging_day(warehouse, date))  # what a run of this day left when it died mid-job; no reader looks there
    result = DayResult(date, run_id, jobs=len(jobs))
    rejects = [{"job_id": None, "file": f.name, "bytes": f.bytes, "sha256": sha256(f.url), "stage": "ingest",
                "reason": f"{f.name}: not inside a job folder", "run_id": run_id} for f in loose]
    process = ray.remote(max_retries=WORKER_RETRIES)(_process_remote)
    simulate = ray.remote(max_retries=WORKER_RETRIES)(simulate_row)
    pending = {process.remote(job, date, warehouse, run_id): job for job in jobs}
    reference = reference_spec(systems)
    if reference not in systems:  # representatives need every job on the reference system
        systems = [*systems, reference]
    sims: list = []
    ingest, traces, collectives = [], [], []
    total_steps, done_steps = len(jobs), 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        job = pending.pop(ready[0])
        outcome: JobOutcome = ray.get(ready[0])
        done_steps += 1
        ingest += outcome.ingest
        rejects += outcome.rejects
        traces += outcome.traces
        if outcome.collectives is not None:
            collectives.append(outcome.collectives)
        if outcome.prefix:
            result.jobs_converted += 1
            result.ranks += outcome.ranks
            result.nodes += sum(t["nodes"] for t in outcome.traces)
            sims += [simulate.remote(job.job_id, outcome.prefix, outcome.ranks, outcome.comm_groups, spec)
                     for spec in systems]
            total_steps += len(systems)
        if progress:
            progress("jobs and simulations", done_steps, total_steps)
    sim_rows = []
    while sims:
        ready, sims = ray.wait(sims, num_returns=1)
        sim_rows.append(ray.get(ready[0]))
        done_steps += 1
        if progress:
            progress("jobs and simulations", done_steps, total_steps)
    result.tables = {
        "ingest_log": from_rows("ingest_log", _mark_duplicates(ingest)),
        "rejects": from_rows("rejects", rejects),
        "traces": from_rows("traces", traces),
        "collectives": pa.concat_tables(collectives).cast(SCHEMAS["collectives"]) if collectives else empty("collectives"),
        "sim_results": from_rows("sim_results", sorted(sim_rows, key=lambda r: (r["job_id"], r["system"]))),
    }
    result.tables["representatives"] = representatives_table(
        result.tables["traces"], [r for r in sim_rows if r["system"] == reference.name], representatives, run_id)
    synthetic, fidelity, result.training = _synthesize(date, warehouse, run_id,
                                                       synthetic_jobs if result.jobs_converted else 0, progress)
    result.tables["synthetic_traces"] = from_rows("synthetic_traces", synthetic)
    result.tables["fidelity"] = from_rows("fidelity", fidelity)
    return result


def _synthesize(date: str, warehouse: str, run_id: str, per_count: int,
                progress: Callable[[str, int, int], None] | None) -> tuple[list[dict], list[dict], dict]:
    """Fit on the day's converted jobs (one task), then sample per NPU count (a task each)."""
    import ray

    if per_count < 1:
        return [], [], {}
    training = ray.get(ray.remote(max_retries=WORKER_RETRIES)(fit_day).remote(date, warehouse))
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


def sweep_day(date: str, warehouse: str, systems: list[SystemSpec]) -> pa.Table:
    """Simulate a processed day's converted jobs (from its `traces` table) on other systems."""
    import ray

    from pipeline.tables import read_day

    jobs: dict[str, tuple[str, int]] = {}
    for row in read_day(warehouse, "traces", date).to_pylist():
        prefix = row["path"].rsplit(".", 2)[0]  # .../<job>.<R>.et -> .../<job>
        jobs[row["job_id"]] = (prefix, jobs.get(row["job_id"], (prefix, 0))[1] + 1)
    simulate = ray.remote(max_retries=WORKER_RETRIES)(simulate_row)
    pending = [simulate.remote(job, prefix, ranks, f"{prefix}.comm_groups.json", spec)
               for job, (prefix, ranks) in sorted(jobs.items()) for spec in systems]
    rows = ray.get(pending)
    return from_rows("sweep_results", sorted(rows, key=lambda r: (r["job_id"], r["system"])))


def _mark_duplicates(rows: list[dict]) -> list[dict]:
    """A file whose content appeared earlier in the day (another job's identical copy) is
    still processed with its job, and says which file it duplicates."""
    first: dict[str, str] = {}
    rows = sorted(rows, key=lambda r: (r["job_id"], r["file"]))
    for row in rows:
        if row["sha256"] in first:
            row["duplicate_of"] = first[row["sha256"]]
        else:
            first[row["sha256"]] = row["file"]
    return rows

