"""One simulation of a job on a system as a table row, and the systems a job is simulated on.

The nightly flow simulates each job on a sweep file's systems (`load_sweep`, `simulate_row`);
an ad hoc sweep (flows/sweep.py) runs batches of one job's points (`simulate_batch`). Both
read sweep files with pipeline/sweep/file.py into SweepPoints (the simulator's configuration
objects, pipeline/sweep_point.py) and simulate in memory (chakra_core.sim.engine.simulate): a batch reads its job once
and simulates every point on the same node tables.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.job import Job
from chakra_core.sim import reference
from chakra_core.sim.colocation import PlacedJob, colocate
from chakra_core.sim.engine import simulate
from chakra_core.sim.files import read_job
from chakra_core.sim.placement import place
from chakra_core.table_schema import TableSchema, column
from pipeline.sweep_point import SweepPoint
from pipeline.sweep.file import load_sweep_file
from pipeline.sweep.jobs import SweepJob, exists, read_sweep_job

DEFAULT_SWEEP = os.path.join(os.path.dirname(__file__), "sweeps", "default.yaml")
INT64_MAX = 2**63 - 1


def load_sweep(path: str | None = None) -> list[SweepPoint]:
    """The systems of a sweep file (pipeline/sweep/file.py: named systems and grids)."""
    return load_sweep_file(path or DEFAULT_SWEEP).points


def reference_point(points: list[SweepPoint]) -> SweepPoint:
    """The sweep's native-ring entry (the reference point of synthesis and selection), or the
    reference system on a native ring when the sweep has none."""
    return next((p for p in points if p.network is None),
                SweepPoint("reference", None, reference.reference_system()))


# where the time of the NPU that finishes last went (sim/breakdown.py): the columns add up to finish_ns
PARTS = {"compute": "compute_ns", "host": "host_ns", "memory": "memory_ns", "communication": "exposed_comm_ns",
         "idle": "idle_ns"}
# simulate_job's row: the `sim_results` table, the first columns of a sweep's (pipeline/sweep/table.py);
# a simulation that did not run has an error and no times
SIM_RESULTS = TableSchema("sim_results", (
    column("job_id", pa.string()), column("system", pa.string()), column("topology", pa.string()),
    column("npus", pa.int32()), column("traced_npus", pa.int32()), column("status", pa.string()),
    column("error", pa.string(), nullable=True),
    *(column(name, pa.int64(), nullable=True) for name in (
        "finish_ns", "max_compute_ns", "max_cpu_ns", "max_exposed_comm_ns", "comm_ns")),
    column("what_if", pa.string(), nullable=True),
    column("simulated_npus", pa.int32(), nullable=True), column("unshared", pa.string(), nullable=True),
    *(column(name, pa.int64(), nullable=True) for name in (*PARTS.values(), "astra_exposed_comm_ns"))))


def simulate_row(job_id: str, prefix: str, ranks: int, comm_groups: str | None, on: SweepPoint) -> dict:
    """One sim_results row: the job read from `<prefix>.<rank>.et` and its groups file (none when
    that does not exist), scaled to the network's NPU count, on one system."""
    groups = comm_groups if comm_groups and exists(comm_groups) else None
    return simulate_job(job_id, lambda: read_job(prefix, ranks, groups), ranks, on)


def simulate_job(job_id: str, job: Job | Callable[[], Job], ranks: int, on: SweepPoint) -> dict:
    """One sim_results row: a job of `ranks` traced ranks in memory (or what reads it) on one
    system. The simulator leaves the job's tables as they are (scaling makes new ones), so one
    Job serves every system of a batch."""
    network = on.network_for(ranks)
    npus = network.npus
    row = {"job_id": job_id, "system": on.name, "topology": on.topology,
           "npus": npus, "traced_npus": ranks, "status": "ok", "error": None, "finish_ns": None,
           "max_compute_ns": None, "max_cpu_ns": None, "max_exposed_comm_ns": None, "comm_ns": None, "what_if": None,
           "simulated_npus": None, "unshared": None,
           **dict.fromkeys(PARTS.values()), "astra_exposed_comm_ns": None}
    try:
        loaded = job if isinstance(job, Job) else job()
        if on.placement is None:
            result = simulate(loaded, network, on.system, mode=on.mode, scaling=on.scaling,
                              traced_npus=ranks if ranks != npus else None)
        else:
            result, colocated = _copies_together(loaded, network, on)
            row.update(colocated)
    except (ChakraError, ValueError) as exc:  # what the model cannot run is a result, not a crash
        row.update(status="not simulated", error=str(exc))
        return row
    except Exception as exc:  # noqa: BLE001 - a simulator fault is recorded, the sweep goes on
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        return row
    row.update(finish_ns=result.finish_ns, max_compute_ns=max(n.compute_ns for n in result.npus),
               max_cpu_ns=max(n.cpu_ns for n in result.npus),
               max_exposed_comm_ns=max(n.exposed_comm_ns for n in result.npus),
               comm_ns=max(sum(n.comm_ns.values()) for n in result.npus),
               astra_exposed_comm_ns=max(n.astra_exposed_comm_ns for n in result.npus),
               what_if="; ".join(result.assumptions) or None,
               simulated_npus=result.sharing.get("simulated_npus", npus),
               unshared=result.sharing.get("unshared") or result.sharing.get("not_shared", {}).get("why"))
    last = max(result.npus, key=lambda n: n.finish_ns)  # the NPU the job waits for: its parts add up to finish_ns
    row.update({column: last.time_by_category[part] for part, column in PARTS.items()})
    too_large = next((k for k, v in row.items() if isinstance(v, int) and not -INT64_MAX <= v <= INT64_MAX), None)
    if too_large:  # e.g. a bandwidth near 0 or a node of 2**62 µs: a time no int64 column holds
        error = f"{too_large} of {len(str(abs(row[too_large])))} digits does not fit in int64"
        row.update(dict.fromkeys(k for k in row if k.endswith("_ns")), status="failed", error=error)
    return row


def _copies_together(job: Job, network, on: SweepPoint) -> tuple:
    """(the run of on.copies copies of the job placed together by on.placement, the row's
    alone_finish_ns and slowdown: those of the copy slowed most; sim/colocation.py)."""
    placed = [PlacedJob(f"copy {i}", job, npus, 0)
              for i, npus in enumerate(place(on.placement, [job.npus] * on.copies, network.npus))]
    outcome = colocate(placed, network, on.system, mode=on.mode)
    slowest = max(outcome.jobs, key=lambda j: j.slowdown)
    return outcome.together, {"alone_finish_ns": slowest.alone_finish_ns, "slowdown": slowest.slowdown}


def simulate_batch(job: SweepJob, points: list[SweepPoint], cost: dict[str, float]) -> list[dict]:
    """A sweep_results row per point: the job read once into this worker's memory (read_sweep_job),
    then simulated on each point; a job that cannot be read fails every point of the batch."""
    try:
        loaded = read_sweep_job(job)
    except (OSError, ChakraError) as exc:
        return [failed_row(job, p, f"cannot read the job: {' '.join(str(exc).split())}", cost) for p in points]
    return [_sweep_row(job, loaded, p, cost) for p in points]


def _sweep_row(job: SweepJob, loaded: Job, p: SweepPoint, cost: dict[str, float]) -> dict:
    start = time.perf_counter()
    row = simulate_job(job.job_id, loaded, job.npus, p)
    row.update(_sweep_columns(job, p), cost=p.cost(cost, row["npus"]),
               seconds=time.perf_counter() - start)
    return row


def failed_row(job: SweepJob, p: SweepPoint, error: str, cost: dict[str, float]) -> dict:
    """The row of a point that could not run at all."""
    npus = p.npus or job.npus
    return {"job_id": job.job_id, "system": p.name, "npus": npus, "traced_npus": job.npus, "status": "failed",
            "error": error, "topology": p.topology, "cost": p.cost(cost, npus), **_sweep_columns(job, p)}


def _sweep_columns(job: SweepJob, p: SweepPoint) -> dict:
    return {"origin": job.origin, "job_sha256": job.sha256, "point_key": p.key, "mode": p.mode,
            "scaling": p.scaling, "placement": p.placement, "copies": p.copies if p.placement else None, **p.params}
