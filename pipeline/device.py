"""A converted job's device time for the warehouse: the `device_time` rows (job, rank, variant,
family, ns, count) and the `device_verdicts` rows (one per job, rank and variant: span, busy,
idle by cause, overlap, launches, what bounds the step), as recorded and as predicted by
chakra_core.analysis (JobAnalysis's device_* tables). Jobs without device kernels give none."""

from __future__ import annotations

from chakra_core.analysis.device_time import CAUSES
from chakra_core.analysis.facade import VARIANTS, JobAnalysis
from chakra_core.analysis.predicted import prediction_system

VERDICT_FIGURES = ("span_ns", "busy_ns", "compute_ns", "busy_share", *(f"idle_{c}_ns" for c in CAUSES),
                   "exposed_comm_ns", "overlap", "launches", "launch_delay_p50_ns", "bound")


def device_rows(analysis: JobAnalysis) -> tuple[list[dict], list[dict]]:
    """(device_time rows, device_verdicts rows) of one job (its Job's name is the job id), without run_id."""
    job_id = analysis.job.name
    if not analysis.device_ranks:
        return [], []
    system = prediction_system(analysis.system)[1]
    times, verdicts = [], []
    for variant in VARIANTS:
        label = "recorded" if variant == "recorded" else system
        times += [{"job_id": job_id, "variant": variant, **row} for row in analysis.device_families(variant).to_pylist()]
        verdicts += [{"job_id": job_id, "rank": row["rank"], "variant": variant, "system": label,
                      **{k: row[k] for k in VERDICT_FIGURES}}
                     for row in analysis.device_steps(variant).to_pylist() if row["step"] == "all"]
    return times, verdicts
