"""One facade over the analyses of a job: every question answered as a pyarrow.Table.

    from chakra_core.analysis import JobAnalysis
    analysis = JobAnalysis.from_files("out/job")        # out/job.0.et, out/job.1.et, ...
    analysis.traces()        # one row per rank: the `traces` columns of docs/pipeline.md
    analysis.collectives()   # one row per communication node, with its rank
    analysis.findings()      # one row per validation finding, with its rank
    analysis.summary()       # one row: the job's cross-rank figures (imbalance, ...)

Each analysis lives in its own module (stats, validate, ...); this class only runs them over
the ranks of one `chakra_core.format.job.Job`, once each, and shapes what they return into
tables, so that a notebook, the CLI and the pipeline ask the same questions the same way.
"""

from __future__ import annotations

import json
from functools import cached_property

import pyarrow as pa

from chakra_core.analysis import stats, validate
from chakra_core.format.job import Job, rank_url


class JobAnalysis:
    def __init__(self, job: Job, prefix: str | None = None):
        self.job = job
        self.prefix = prefix or job.name  # how findings name a rank's file

    @classmethod
    def from_files(cls, prefix: str, npus: int | None = None) -> JobAnalysis:
        return cls(Job.read(prefix, npus), prefix)

    @cached_property
    def _trace_rows(self) -> list[dict]:
        return [stats.trace_row(table) for table in self.job.tables]

    @cached_property
    def _collectives(self) -> list[pa.Table]:
        return [stats.collective_rows(table) for table in self.job.tables]

    def traces(self) -> pa.Table:
        return pa.Table.from_pylist([{"rank": rank, **row} for rank, row in enumerate(self._trace_rows)])

    def collectives(self) -> pa.Table:
        return pa.concat_tables([_with_rank(table, rank) for rank, table in enumerate(self._collectives)])

    def findings(self) -> pa.Table:
        rows = [{"rank": rank, **finding.to_dict()} for rank, table in enumerate(self.job.tables)
                for finding in validate.validate_table(table, rank_url(self.prefix, rank))]
        return pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA)

    def summary(self) -> pa.Table:
        """The job's cross-rank figures as one row; nested figures are JSON text."""
        figures = stats.job_stats(dict(enumerate(self._trace_rows)), dict(enumerate(self._collectives)))
        row = {"job": self.job.name, "ranks": self.job.npus,
               **{key: json.dumps(value) if isinstance(value, (dict, list)) else value for key, value in figures.items()}}
        return pa.Table.from_pylist([row])


FINDINGS_SCHEMA = pa.schema([("rank", pa.int32()), ("severity", pa.string()), ("code", pa.string()),
                             ("path", pa.string()), ("node_ids", pa.list_(pa.uint64())), ("message", pa.string())])


def _with_rank(table: pa.Table, rank: int) -> pa.Table:
    return table.add_column(0, "rank", pa.array([rank] * table.num_rows, pa.int32()))
