"""The night's placement what-if: the day's representative jobs (or a chosen set) placed together
on a named cluster network (sim/colocation.py), each job's slowdown and the links it waited on
longest, as the `colocation` table (docs/pipeline.md, 'Tables') and a section of the day's page.

    python -m flows.nightly --colocate cluster.yml [--colocate-placement spread] [--colocate-jobs a,b]

One simulation of all the jobs together and one alone per job, on the driver, after the
representatives are chosen. Jobs are read from the warehouse where they converted. A set that
does not fit the network, or a job that cannot be read, gives each job a row with the reason
in `status`; the night goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.sim.colocation import PlacedJob, colocate
from chakra_core.sim.config import load_network, load_system
from chakra_core.sim.files import read_job
from chakra_core.sim.placement import place
from chakra_core.sim.reference import reference_system
from chakra_core.table_schema import TableSchema, column

COLOCATION = TableSchema("colocation", (
    column("job_id", pa.string()), column("network", pa.string()), column("placement", pa.string()),
    column("mode", pa.string()), column("ranks", pa.int32(), nullable=True),
    column("npus", pa.string(), nullable=True),  # the NPUs of its ranks, in rank order (JSON)
    *(column(name, pa.int64(), nullable=True) for name in ("finish_ns", "alone_finish_ns", "waited_ns")),
    column("slowdown", pa.float64(), nullable=True),
    column("top_link", pa.string(), nullable=True), column("top_link_waited_ns", pa.int64(), nullable=True),
    column("links", pa.string(), nullable=True),  # the links it waited on longest (JSON)
    column("behind", pa.string(), nullable=True),  # whose traffic it waited behind, ns and bytes (JSON, by job_id)
    column("status", pa.string()), column("run_id", pa.string())))


@dataclass(frozen=True)
class ColocationPlan:
    """--colocate NETWORK [--colocate-placement P] [--colocate-jobs IDS] [--colocate-system SYS]."""

    network: str  # the cluster's network file
    placement: str = "packed"
    jobs: tuple[str, ...] = ()  # none: the day's representatives
    system: str | None = None  # a system file; none: the reference system (sim/reference.py)
    mode: str = "aware"


def chosen_jobs(plan: ColocationPlan, representatives: pa.Table) -> list[str]:
    """The jobs to place: the plan's, else the day's representatives (in job order)."""
    if plan.jobs:
        return list(plan.jobs)
    return sorted(r["job_id"] for r in representatives.to_pylist() if r["representative"])


def colocation_rows(plan: ColocationPlan, converted: dict, job_ids: list[str], run_id: str) -> list[dict]:
    """A `colocation` row per job: converted maps a job id to (prefix, ranks, groups file)."""
    common = {"network": plan.network, "placement": plan.placement, "mode": plan.mode, "run_id": run_id}
    missing = [j for j in job_ids if j not in converted]
    if missing:
        why = f"not placed: {', '.join(missing)} did not convert today"
        return [{"job_id": j, **common, "status": why} for j in job_ids]
    try:
        network = load_network(plan.network)
        system = load_system(plan.system) if plan.system else reference_system()
        jobs = [read_job(*converted[j]) for j in job_ids]
        npus = place(plan.placement, [job.npus for job in jobs], network.npus)
        outcome = colocate([PlacedJob(j, job, where) for j, job, where in zip(job_ids, jobs, npus)], network, system,
                           mode=plan.mode)
    except ChakraError as exc:  # a set that does not fit, a job that cannot be read: said on every row
        return [{"job_id": j, **common, "status": f"not placed: {exc}"} for j in job_ids]
    return [_row(job, job_ids, common) for job in outcome.jobs]


def _row(job, job_ids: list[str], common: dict) -> dict:
    top = job.links[0] if job.links else {}
    return {"job_id": job.workload, **common, "ranks": len(job.npus), "npus": json.dumps(job.npus),
            "finish_ns": job.finish_ns, "alone_finish_ns": job.alone_finish_ns, "waited_ns": job.waited_ns,
            "slowdown": job.slowdown, "top_link": top.get("link"), "top_link_waited_ns": top.get("waited_ns"),
            "links": json.dumps(job.links),
            "behind": json.dumps([{**b, "job": job_ids[b["job"]]} for b in job.behind]), "status": "ok"}
