"""What-if sweeps: the systems every job is simulated on, and one simulation as a table row.

The nightly flow simulates each job on a sweep file's systems (`load_sweep`, `simulate_row`);
an ad hoc sweep (flows/sweep.py) runs batches of one job's points (`simulate_batch`). Both
read sweep files with pipeline/grid.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass

import fsspec

from chakra_core.errors import ChakraError
from chakra_core.sim import reference
from chakra_core.sim.config import load_network
from chakra_core.sim.workload import simulate_files
from pipeline.grid import NATIVE_RING, Point, cost_of, load_sweep_file
from pipeline.sweep_jobs import SweepJob, in_memory

DEFAULT_SWEEP = os.path.join(os.path.dirname(__file__), "sweeps", "default.yaml")
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class SystemSpec:
    """A system of the sweep, carrying its configurations as text so that a Ray worker on any
    node can simulate it without the driver's checkout."""

    name: str
    network: str  # ASTRA-sim network keys as JSON text, or NATIVE_RING
    system: str  # ASTRA-sim system JSON text
    mode: str = "unaware"
    scaling: str = "weak"


def load_sweep(path: str | None = None) -> list[SystemSpec]:
    """The systems of a sweep file (pipeline/grid.py: named systems and grids)."""
    return [spec_of(p) for p in load_sweep_file(path or DEFAULT_SWEEP).points]


def spec_of(p: Point) -> SystemSpec:
    network = NATIVE_RING if p.network is None else json.dumps(p.network)
    return SystemSpec(p.name, network, json.dumps(p.system), p.mode, p.scaling)


def _materialise(text: str) -> str:
    """A worker-local memory:// URL holding `text` (the simulator reads configs by URL), named by
    its content: a worker simulating many points writes each configuration once."""
    url = f"memory://chakra-sweep/{hashlib.sha256(text.encode()).hexdigest()}"
    with fsspec.open(url, "w") as f:
        f.write(text)
    return url


def _native_ring(npus: int) -> str:
    """A Ring of the job's own size (the reference network: 50 GB/s, 500 ns), so that every job,
    even one whose process groups cannot be scaled to another NPU count, is simulated at least once."""
    return (f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ {reference.BANDWIDTH_GBPS} ]\n"
            f"latency: [ {reference.LATENCY_NS} ]\n")


def reference_spec(systems: list[SystemSpec]) -> SystemSpec:
    """The sweep's native-ring entry (the reference system of synthesis and selection), or the
    reference system itself when the sweep has none."""
    return next((s for s in systems if s.network == NATIVE_RING),
                SystemSpec("reference", NATIVE_RING, json.dumps(reference.SYSTEM)))


# where the time of the NPU that finishes last went (sim/breakdown.py): the columns add up to finish_ns
PARTS = {"compute": "compute_ns", "host": "host_ns", "memory": "memory_ns", "communication": "exposed_comm_ns",
         "idle": "idle_ns"}


def simulate_row(job_id: str, prefix: str, ranks: int, comm_groups: str | None, spec: SystemSpec) -> dict:
    """One sim_results row: the job's traces (scaled to the network's NPU count) on one system."""
    network_url = _materialise(_native_ring(ranks) if spec.network == NATIVE_RING else spec.network)
    system_url = _materialise(spec.system)
    network = load_network(network_url)
    npus = network.npus
    row = {"job_id": job_id, "system": spec.name, "topology": "x".join(d.topology.value for d in network.dims),
           "npus": npus, "traced_npus": ranks, "status": "ok", "error": None, "finish_ns": None,
           "max_compute_ns": None, "max_cpu_ns": None, "max_exposed_comm_ns": None, "comm_ns": None, "what_if": None,
           **dict.fromkeys(PARTS.values()), "astra_exposed_comm_ns": None}
    groups = comm_groups if comm_groups and _has_groups(comm_groups) else None
    try:
        result, assumptions = simulate_files(prefix, network_url, system_url, groups, mode=spec.mode,
                                             scaling=spec.scaling, traced_npus=ranks if ranks != npus else None)
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
               what_if="; ".join(assumptions) or None)
    last = max(result.npus, key=lambda n: n.finish_ns)  # the NPU the job waits for: its parts add up to finish_ns
    row.update({column: last.time_by_category[part] for part, column in PARTS.items()})
    return row


def _has_groups(url: str) -> bool:
    with fsspec.open(url, "r") as f:
        return bool(json.load(f))


def simulate_batch(job: SweepJob, points: list[Point], cost: dict[str, float]) -> list[dict]:
    """A sweep_results row per point: the job read once (into this worker's memory), then
    simulated on each point; a job that cannot be read fails every point of the batch."""
    try:
        with in_memory(job) as (prefix, groups):
            return [_sweep_row(job, prefix, groups, p, cost) for p in points]
    except (OSError, ChakraError) as exc:
        return [failed_row(job, p, f"cannot read the job: {' '.join(str(exc).split())}", cost) for p in points]


def _sweep_row(job: SweepJob, prefix: str, groups: str | None, p: Point, cost: dict[str, float]) -> dict:
    start = time.perf_counter()
    row = simulate_row(job.job_id, prefix, job.npus, groups, spec_of(p))
    row.update(_sweep_columns(job, p), cost=cost_of(cost, p.network, row["npus"]),
               seconds=time.perf_counter() - start)
    too_large = next((k for k, v in row.items() if isinstance(v, int) and not -INT64_MAX <= v <= INT64_MAX), None)
    if too_large:  # e.g. a bandwidth near 0: a time no int64 column holds
        error = f"{too_large} of {len(str(abs(row[too_large])))} digits does not fit in int64"
        row.update(dict.fromkeys(k for k in row if k.endswith("_ns")), status="failed", error=error)
    return row


def failed_row(job: SweepJob, p: Point, error: str, cost: dict[str, float]) -> dict:
    """The row of a point that could not run at all."""
    npus = p.npus or job.npus
    return {"job_id": job.job_id, "system": p.name, "npus": npus, "traced_npus": job.npus, "status": "failed",
            "error": error, "topology": "x".join(p.network["topology"]) if p.network else "Ring",
            "cost": cost_of(cost, p.network, npus), **_sweep_columns(job, p)}


def _sweep_columns(job: SweepJob, p: Point) -> dict:
    return {"origin": job.origin, "job_sha256": job.sha256, "point_key": p.key, "mode": p.mode,
            "scaling": p.scaling, **(p.params or {})}
