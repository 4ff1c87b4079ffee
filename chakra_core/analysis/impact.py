"""What a change costs the step: the job simulated as it is and with only the changed part set
back to its earlier value.

A flagged change names a part of the job (changes.py): a kernel family's device time
(`family_ns:<f>`), an operator class's compute time (`class_ns:<c>`), the host's operator time
(`host_ns`) or a collective kind's bytes (`comm_bytes:<k>`). Its effect on the step is not its
own size: a host-bound job's kernels can grow 40% and the step hardly moves. So the part's nodes
in today's traces are scaled by before / after (every kernel of the family, every message of the
kind, by the same factor, which gives the part its earlier total) and the job is simulated
again, as the nightly predicts its step:

- a job with device work: its predicted step (device_time's span per recorded step on the
  prediction system, the `predicted_step_ns` of the history), max over ranks;
- any other job: its finish on the reference system (`sim_finish_ns`).

`step_impact` is the step today over the step with the part set back, minus one: the relative
change this part alone causes (+5%: the change made the step 5% longer). Idle time, message
counts and the program have no nodes to set back: their rows say so instead of a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis import stats
from chakra_core.analysis.kernels import families
from chakra_core.errors import ChakraError
from chakra_core.format.columns import device_compute
from chakra_core.format.depgraph import to_numpy
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COMP

NO_EFFECT = 0.01  # a part that moves the step by less than this has no effect on it worth acting on
DURATIONS = ("duration_micros", "duration_ns")


@dataclass(frozen=True)
class StepImpact:
    """The step with and without one change; `impact` None where it could not be worked out
    (`note` says why)."""

    metric: str
    basis: str  # predicted_step_ns or sim_finish_ns
    impact: float | None
    impact_ns: int | None
    note: str


def part_metric(metric: str, cause: str) -> str:
    """The part whose value a flagged row's impact sets back: the row's own metric when it is a
    part, else its cause's (a headline explained by `family:gemm` is `family_ns:gemm`)."""
    if metric.split(":", 1)[0] in PART_NODES:
        return metric
    base, _, name = cause.partition(":")
    metric_base = CAUSE_METRICS.get(base)
    return metric if metric_base is None else f"{metric_base}:{name}" if name else metric_base


def _family_nodes(table: pa.Table, name: str) -> np.ndarray:
    kernels = to_numpy(pc.and_(device_compute(table), pc.is_valid(table.column("stream"))), False)
    return kernels & (families(table.column("name")) == name)


def _class_nodes(table: pa.Table, name: str) -> np.ndarray:
    comp = to_numpy(pc.equal(table.column("type"), COMP), False)
    mask = np.zeros(table.num_rows, bool)
    mask[comp] = to_numpy(pc.equal(stats.compute_classes(table), name), False)
    return mask


def _host_nodes(table: pa.Table, _name: str) -> np.ndarray:
    return to_numpy(pc.and_(pc.equal(table.column("type"), COMP), pc.invert(device_compute(table))), False)


def _comm_nodes(table: pa.Table, name: str) -> np.ndarray:
    rows = stats.collective_rows(table)
    ids = pc.filter(rows.column("node_id"), pc.equal(rows.column("kind"), name))
    return to_numpy(pc.is_in(table.column("id"), value_set=ids.combine_chunks()), False)


# metric base -> (the nodes of the part, the columns its value is the sum of)
PART_NODES = {"family_ns": (_family_nodes, DURATIONS), "class_ns": (_class_nodes, DURATIONS),
              "host_ns": (_host_nodes, DURATIONS), "comm_bytes": (_comm_nodes, ("comm_size",))}
# a flagged row's cause -> the metric of the part it names (changes.CAUSE_NAMES the other way)
CAUSE_METRICS = {"family": "family_ns", "class": "class_ns", "comm_bytes": "comm_bytes", "comm_count": "comm_count",
                 "host": "host_ns", "idle": "idle_ns", "program": "program"}
HEADLINE_ALONE = "no part of the job explains this change, so none can be set back alone"
NOT_REVERSIBLE = {
    **dict.fromkeys(("step_ns", "predicted_step_ns", "sim_finish_ns"), HEADLINE_ALONE),
    "idle_ns": "idle time is what the rest leaves: it has no nodes of its own to set back",
    "comm_count": "a count of messages cannot be set back without another program",
    "program": "the program changed: there is no earlier value of one part to set back",
}


def reverted(tables: list[pa.Table], metric: str, factor: float) -> list[pa.Table]:
    """The tables with the part `metric` names scaled by `factor` (its nodes' durations or bytes)."""
    base, _, name = metric.partition(":")
    select, columns = PART_NODES[base]
    out = []
    for table in tables:
        mask = select(table, name)
        for column in columns:
            if column in table.column_names and mask.any():
                values = table.column(column).combine_chunks()
                now = to_numpy(values, 0).astype(np.int64)
                new = pa.array(np.where(mask, np.rint(now * factor).astype(np.int64), now)).cast(values.type)
                table = table.set_column(table.schema.get_field_index(column), column,  # a null stays null
                                         pc.if_else(pc.is_valid(values), new, pa.nulls(len(values), values.type)))
        out.append(table)
    return out


def step_ns(job: Job, prediction_file: str | None) -> tuple[str, int]:
    """(basis, ns): the job's predicted step where it has device work, else its finish on the
    reference system (the module's docstring)."""
    from chakra_core.analysis.facade import JobAnalysis
    from chakra_core.analysis.job_record import device_rows
    from chakra_core.sim.reference import simulate_reference

    analysis = JobAnalysis(job, prediction_file=prediction_file)
    if analysis.device_ranks:
        predicted = [r for r in device_rows(analysis)[1] if r["variant"] == "predicted" and r["steps"]]
        if not predicted:
            raise ChakraError(f"{job.name}: its step could not be predicted ({analysis.prediction_error})")
        return "predicted_step_ns", int(max(r["span_ns"] / r["steps"] for r in predicted))
    return "sim_finish_ns", int(simulate_reference(job.tables, job.comm_groups).finish_ns)


def step_impacts(job: Job, parts: Mapping[str, tuple[float | None, float | None]],
                 prediction_file: str | None) -> dict[str, StepImpact]:
    """metric -> its StepImpact, for each part `metric: (before, after)` (the flagged values)."""
    basis, today = step_ns(job, prediction_file)
    out = {}
    for metric, (before, after) in parts.items():
        reason = _not_reversible(metric, before, after)
        if reason is not None:
            out[metric] = StepImpact(metric, basis, None, None, reason)
            continue
        back = Job(reverted(job.tables, metric, before / after), job.comm_groups, job.name)
        _, earlier = step_ns(back, prediction_file)
        impact = today / earlier - 1 if earlier else None
        out[metric] = StepImpact(metric, basis, impact, today - earlier, _said(impact))
    return out


def _not_reversible(metric: str, before: float | None, after: float | None) -> str | None:
    base = metric.split(":", 1)[0]
    if base not in PART_NODES:
        return NOT_REVERSIBLE.get(base, f"{metric} is not a part of the job that can be set back")
    if not before or not after:
        return "the part is new or gone: it has no earlier value to set back to"
    return None


def _said(impact: float | None) -> str:
    if impact is None:
        return "the step without the change has no length"
    if abs(impact) < NO_EFFECT:
        return "no effect on the step: something else bounds it"
    return f"{impact:+.1%} of the step"
