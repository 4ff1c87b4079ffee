"""Every job of the shipped datasets that the nightly simulates runs to the end on every system
of the default sweep, congestion-unaware and congestion-aware (issue 49: no dead end).

The jobs are those of a day's drop (tools/make_drop.py: the recorded gloo and GPU runs, the
FlexFlow graph and the ASTRA-sim text workload; no generated or corrupt jobs), listed and
converted as the nightly does (pipeline/nightly: list_day, the job's source with its job.json
options) and simulated by the nightly's own row function on each sweep point: 13 jobs x 6
systems x 2 modes, 156 simulations sharing one conversion per job, about 25 s on a loaded
2-core machine: marked slow."""

from __future__ import annotations

import dataclasses

import pytest

from chakra_core.format.job import Job, read_comm_groups
from chakra_core.sim.backends import MODES
from pipeline.nightly.drop import list_day
from pipeline.nightly.ingest import job_input, source_options
from pipeline.simulation import load_sweep, simulate_job
from tools.make_drop import make_drop

DATE = "2026-01-01"


def converted_jobs(root: str, out: str) -> dict[str, Job]:
    """The drop's jobs, each converted by its source with its job.json options (as the nightly)."""
    make_drop(root, DATE, generated_jobs=0, corrupt=False, other_formats=True, drift=False)
    jobs = {}
    for job in list_day(root, DATE)[0]:
        converted = job.source.convert(job_input(job), f"{out}/{job.job_id}", job.job_id, source_options(job))
        groups = read_comm_groups(converted.comm_group_file) if converted.comm_group_file else {}
        jobs[job.job_id] = Job(converted.tables, groups, job.job_id)
    return jobs


@pytest.mark.slow
def test_every_shipped_job_simulates_on_every_default_system_in_both_modes(tmp_path):
    jobs = converted_jobs(str(tmp_path / "drops"), str(tmp_path / "converted"))
    # the datasets' runs: every gloo and GPU run, and the two other formats
    assert len(jobs) == 13 and {"gloo-collectives-w4", "gpu-mlp_gloo2", "gpu-gpt", "flexflow-alexnet-n4",
                                "text-dlrm-n8"} <= set(jobs)
    failed = []
    for job_id, job in jobs.items():
        for point in load_sweep():
            for mode in MODES:
                row = simulate_job(job_id, job, len(job.tables), dataclasses.replace(point, mode=mode))
                if row["status"] != "ok":
                    failed.append(f"{job_id} on {point.name} {mode}: {row['status']}: {row['error']}")
    assert not failed, "\n".join(failed)
