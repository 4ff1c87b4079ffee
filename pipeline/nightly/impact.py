"""What each flagged change costs the step (chakra_core/analysis/impact.py), for the night's
`regressions`: a Ray task per job with flagged changes reads its converted traces and simulates
them with each flagged part set back to its baseline value. The rows gain `step_impact`,
`step_impact_ns`, `impact_basis` and `impact_note`, and each job's rows are listed by impact,
largest first.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from chakra_core.analysis.impact import part_metric, step_impacts
from chakra_core.analysis.predicted import PREDICTION_SYSTEM
from chakra_core.errors import ChakraError
from chakra_core.format.job import Job
from pipeline.cluster import WORKER_RETRIES


def parts_to_set_back(rows: list[dict], figures_by_job: Mapping[str, Mapping[str, float]],
                      history: Mapping[str, list[tuple[str, str, dict]]]) -> dict[str, dict[str, tuple]]:
    """job -> {part: (baseline value, today's value)} for the parts its flagged rows name."""
    out: dict[str, dict[str, tuple]] = {}
    for row in rows:
        job, part = row["job_id"], part_metric(row["metric"], row["cause"])
        past = history.get(job)
        baseline = past[-1][2] if past else {}
        out.setdefault(job, {})[part] = (baseline.get(part), figures_by_job.get(job, {}).get(part))
    return out


def job_impacts(prefix: str, parts: Mapping[str, tuple], prediction_file: str | None) -> dict[str, dict] | str:
    """part -> its StepImpact as a dict; or the one line why the job could not be simulated."""
    try:
        found = step_impacts(Job.read(prefix), parts, prediction_file)
    except ChakraError as exc:
        return " ".join(str(exc).split())
    return {metric: vars(impact) for metric, impact in found.items()}


def with_step_impacts(regressions: pa.Table, prefixes: Mapping[str, str],
                      parts: Mapping[str, dict[str, tuple]], prediction_file: str | None = PREDICTION_SYSTEM
                      ) -> list[dict]:
    """The regressions' rows with their impact columns, each job's listed by impact; a task per job."""
    import ray

    task = ray.remote(max_retries=WORKER_RETRIES)(job_impacts)
    refs = {job: task.remote(prefixes[job], wanted, prediction_file)
            for job, wanted in parts.items() if job in prefixes}
    found = {job: ray.get(ref) for job, ref in refs.items()}
    rows = [_with_impact(row, found.get(row["job_id"])) for row in regressions.to_pylist()]
    order = {job: k for k, job in enumerate(dict.fromkeys(r["job_id"] for r in rows))}
    return sorted(rows, key=lambda r: (order[r["job_id"]], -abs(r["step_impact"] or 0.0)))


def _with_impact(row: dict, found: dict[str, dict] | str | None) -> dict:
    impact: dict = {"impact": None, "impact_ns": None, "basis": None, "note": "the job was not simulated"}
    if isinstance(found, str):
        impact["note"] = f"the job could not be simulated again: {found}"
    elif found is not None:
        impact = found.get(part_metric(row["metric"], row["cause"]), impact)
    return {**row, "step_impact": impact["impact"], "step_impact_ns": impact["impact_ns"],
            "impact_basis": impact["basis"], "impact_note": impact["note"]}
