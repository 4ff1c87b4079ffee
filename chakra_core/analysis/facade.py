"""One facade over the analyses of a job: every question answered as a pyarrow.Table.

    from chakra_core.analysis import JobAnalysis
    analysis = JobAnalysis.from_files("out/job")        # out/job.0.et, out/job.1.et, ...
    analysis.traces()        # one row per rank: the `traces` columns of docs/pipeline.md
    analysis.collectives()   # one row per communication node, with its rank
    analysis.findings()      # one row per validation finding, with its rank
    analysis.summary()       # one row: the job's cross-rank figures (imbalance, ...)
    analysis.straggler_report  # the critical path across the ranks, the stragglers with cause and cost
    analysis.device_steps()  # per rank with device kernels and step: where device time goes
    analysis.device_families("predicted")   # device time by family, as the simulator predicts it
    analysis.recorded_steps() # per rank and ProfilerStep#N: its operators, and those no other step holds

Each analysis lives in its own module (stats, validate, ...); this class only runs them over
the ranks of one `chakra_core.format.job.Job`, once each, and shapes what they return into
tables, so that a notebook, the CLI and the pipeline ask the same questions the same way.
"""

from __future__ import annotations

import json
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis import device_time, device_work, predicted, rank_timeline, stats, step_work, stragglers, validate
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import ETReader, projected_schema, with_metadata
from chakra_core.format.job import Job, rank_url
from chakra_core.format.nodenames import NAMES, NameDictionary
from chakra_core.format.nodetypes import METADATA
from chakra_core.sim.config import SystemConfig
from chakra_core.sim.workload import nodes

VARIANTS = ("recorded", "predicted")


def read_columns(prediction: SystemConfig | None) -> tuple[str, ...]:
    """The node-table columns that traces(), collectives(), summary() and the device analysis
    read, its prediction's simulation on `prediction` included (None: no prediction); a big
    trace read with only these (etfile.read_table's `columns`) gives the same figures.
    findings() (the validator) reads every column."""
    simulated = nodes.read_columns(prediction, timeline=True) if prediction is not None else ()
    return tuple(dict.fromkeys((*stats.TRACE_COLUMNS, *stats.COLLECTIVE_COLUMNS, *device_work.COLUMNS,
                                *step_work.COLUMNS, *rank_timeline.COLUMNS, *simulated)))


def read_trace(url: str, prediction: SystemConfig | None) -> pa.Table:
    """One rank's trace as the figures of read_columns(prediction) need it, read batch by batch:
    only those columns, `inputs` only on metadata nodes (the process groups' backends the
    device analysis reads) unless the prediction's model counts every node's inputs, and the
    names dictionary-encoded (format/nodenames.py). Those texts are most of a converted trace's
    bytes; the figures are the whole file's."""
    columns = read_columns(prediction)
    every_input = prediction is not None and "inputs" in nodes.read_columns(prediction)
    names = NameDictionary()
    with ETReader(url) as reader:
        schema = with_metadata(projected_schema(columns), reader.metadata_bytes, url)
        at, named = schema.get_field_index("inputs"), schema.get_field_index("name")
        batches = []
        for batch in reader.iter_batches():
            batch = batch.select(schema.names)
            if not every_input:
                inputs = batch.column(at)
                batch = batch.set_column(at, schema.field(at), pc.if_else(
                    pc.equal(batch.column("type"), METADATA), inputs, pa.scalar(None, inputs.type)))
            names.encode(batch.column(named))
            batches.append(batch.drop_columns(["name"]))
    table = pa.Table.from_batches(batches, schema=schema.remove(named))
    return table.add_column(named, schema.field(named).with_type(NAMES), names.column())


class JobAnalysis:
    """`prediction_file`: the system file of the device analysis's predicted variant (predicted.py);
    `predict` False leaves that variant out (e.g. for a job of which some ranks are missing).
    `ranks`: the rank of each of the job's tables when it holds only some of them (default 0..N-1);
    every table is labelled with it."""

    def __init__(self, job: Job, prefix: str | None = None, prediction_file: str | None = predicted.PREDICTION_SYSTEM,
                 predict: bool = True, ranks: list[int] | None = None):
        self.job = job
        self.prefix = prefix or job.name  # how findings name a rank's file
        self.prediction_file = prediction_file
        self.predict = predict
        self.prediction_error: str | None = None if predict else "not predicted"  # why the variant is missing
        self.ranks = list(range(job.npus)) if ranks is None else ranks
        self._tables = dict(zip(self.ranks, job.tables))
        self._critical_paths: dict[int, dict[str, int]] = {}  # predicted: per rank, what held its critical path

    @classmethod
    def from_files(cls, prefix: str, npus: int | None = None,
                   prediction_file: str | None = predicted.PREDICTION_SYSTEM) -> JobAnalysis:
        return cls(Job.read(prefix, npus), prefix, prediction_file)

    @cached_property
    def _trace_rows(self) -> list[dict]:
        return [stats.trace_row(table) for table in self.job.tables]

    @cached_property
    def _collectives(self) -> list[pa.Table]:
        return [stats.collective_rows(table) for table in self.job.tables]

    def trace_rows(self) -> list[dict]:
        """traces() as rows (the figures keep their Python types: nested ones stay dicts): each
        rank's statistics and what its recorded steps hold beyond one another (step_work)."""
        return [{"rank": rank, **row, **step_work.trace_figures(self._recorded_steps[rank])}
                for rank, row in zip(self.ranks, self._trace_rows)]

    def traces(self) -> pa.Table:
        return pa.Table.from_pylist(self.trace_rows())

    def collectives(self) -> pa.Table:
        return pa.concat_tables([_with_rank(table, rank) for rank, table in zip(self.ranks, self._collectives)])

    def findings(self) -> pa.Table:
        rows = [{"rank": rank, **finding.to_dict()} for rank, table in self._tables.items()
                for finding in validate.validate_table(table, rank_url(self.prefix, rank))]
        return pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA)

    def summary_figures(self) -> dict:
        """summary() as a dict (nested figures stay dicts and lists)."""
        return stats.job_stats(dict(zip(self.ranks, self._trace_rows)), dict(zip(self.ranks, self._collectives)))

    @cached_property
    def straggler_report(self) -> dict:
        """The critical path across the ranks and the stragglers with cause and cost
        (analysis/stragglers.py's report)."""
        return stragglers.job_report(self.job.tables, ranks=self.ranks)

    def summary(self) -> pa.Table:
        """The job's cross-rank figures as one row; nested figures are JSON text."""
        row = {"job": self.job.name, "ranks": self.job.npus,
               **{key: json.dumps(value) if isinstance(value, (dict, list)) else value
                  for key, value in self.summary_figures().items()}}
        return pa.Table.from_pylist([row])

    @cached_property
    def _recorded_steps(self) -> dict[int, pa.Table]:
        return {rank: step_work.step_table(table) for rank, table in self._tables.items()}

    def recorded_steps(self) -> pa.Table:
        """Per rank and recorded step (ProfilerStep#N): step_work.STEP_SCHEMA's figures; no rows
        for a rank without steps."""
        return _by_rank(self._recorded_steps, step_work.STEP_SCHEMA)

    def steps_of(self, rank: int) -> pa.Table:
        """One rank's recorded steps (step_work.step_table), without the rank column."""
        return self._recorded_steps[rank]

    @cached_property
    def device_ranks(self) -> list[int]:
        """The ranks whose traces hold device kernels (the device analysis covers those)."""
        return [rank for rank, table in self._tables.items() if device_work.has_device_work(table)]

    @cached_property
    def _prediction(self) -> tuple[SystemConfig, str]:
        """The predicted variant's system and its label, its file read once per job; ConfigError
        for a bad file (not cached: every use raises it)."""
        return predicted.prediction_system(self.prediction_file)

    @property
    def prediction_label(self) -> str:
        """What the predicted variant ran with (device_verdicts' `system`): the file, or its name."""
        return self._prediction[1]

    @cached_property
    def _device_work(self) -> dict[str, dict[int, device_work.DeviceWork]]:
        """variant -> rank -> DeviceWork; no predicted entries when the simulation failed. The
        prediction runs first, its result dropped once read, so that the simulation (the most
        memory a big trace's analysis takes) runs beside nothing of the recorded variant."""
        tables = self._tables
        work = {"predicted": self._predicted_work()}
        work["recorded"] = {r: device_work.device_work(tables[r], *device_work.recorded_times(tables[r]))
                            for r in self.device_ranks}
        return work

    def _predicted_work(self) -> dict[int, device_work.DeviceWork]:
        """rank -> DeviceWork as the prediction runs it ({} where it is not made or fails)."""
        if not self.device_ranks or self.prediction_error is not None:
            return {}
        try:
            result = predicted.predict(self.job, self._prediction[0])
        except ChakraError as exc:
            self.prediction_error = str(exc)
            return {}
        self._critical_paths = {r: result.npus[r].critical_path for r in self.device_ranks
                                if r < len(result.npus) and result.npus[r].critical_path}
        tables = self._tables
        return {r: device_work.device_work(tables[r], *device_work.simulated_times(tables[r], r, result.timeline))
                for r in self.device_ranks}

    def device_steps(self, variant: str = "recorded") -> pa.Table:
        """Per rank with device work and step (and `all`): device_time.STEP_SCHEMA's figures. A
        predicted `all` row's `bound` is its critical path's (device_time.path_bound): the one
        verdict `chakra simulate` and `chakra stats` give too."""
        tables = {r: device_time.step_table(w) for r, w in self._device_work[variant].items()}
        if variant == "predicted":
            tables = {r: device_time.with_path_bound(t, self._critical_paths.get(r)) for r, t in tables.items()}
        return _by_rank(tables, device_time.STEP_SCHEMA)

    def device_families(self, variant: str = "recorded") -> pa.Table:
        return _by_rank({r: device_time.family_table(w) for r, w in self._device_work[variant].items()},
                        device_time.FAMILY_SCHEMA)

    def device_top_kernels(self, variant: str = "recorded", limit: int | None = device_time.TOP_KERNELS) -> pa.Table:
        return _by_rank({r: device_time.top_kernels(w, limit) for r, w in self._device_work[variant].items()},
                        device_time.TOP_SCHEMA)

    def gpu(self) -> dict[int, dict]:
        """Per rank with device work: the recorded figures, `bound` as predicted (null without a
        prediction), `recorded_bound`, and the predicted figures under `predicted`."""
        recorded, forecast = self._device_work["recorded"], self._device_work["predicted"]
        out = {}
        for rank, work in recorded.items():
            figures = device_time.summary(work)
            ahead = device_time.summary(forecast[rank]) if rank in forecast else None
            if ahead is not None:
                ahead["system"] = self.prediction_label
                path = self._critical_paths.get(rank)
                ahead.update(busy_bound=ahead["bound"], critical_path=path, bound=device_time.path_bound(path)
                             or ahead["bound"])
            out[rank] = {**figures, "recorded_bound": figures["bound"], "bound": ahead and ahead["bound"],
                         "predicted": ahead}
        return out


FINDINGS_SCHEMA = pa.schema([("rank", pa.int32()), ("severity", pa.string()), ("code", pa.string()),
                             ("path", pa.string()), ("node_ids", pa.list_(pa.uint64())), ("message", pa.string())])


def _with_rank(table: pa.Table, rank: int) -> pa.Table:
    return table.add_column(0, "rank", pa.array([rank] * table.num_rows, pa.int32()))


def _by_rank(tables: dict[int, pa.Table], schema: pa.Schema) -> pa.Table:
    """The tables with their rank in front, one after the other."""
    return pa.concat_tables([_with_rank(tables[r], r) for r in sorted(tables)] or
                            [_with_rank(schema.empty_table(), 0)])
