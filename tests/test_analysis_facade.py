"""chakra_core.analysis.JobAnalysis: one job's analyses as tables, agreeing with the modules it runs."""

from __future__ import annotations

import pyarrow as pa

from chakra_core.analysis import JobAnalysis, stats, step_work
from chakra_core.format.job import Job
from chakra_core.generate.workloads import generate


def _job(tmp_path) -> str:
    job = generate("mlp", 4)
    Job(job.tables(), job.comm_groups, "mlp").write(str(tmp_path))
    return str(tmp_path / "mlp")


def test_every_question_is_a_table_with_a_row_per_rank_or_node(tmp_path):
    prefix = _job(tmp_path)
    analysis = JobAnalysis.from_files(prefix)
    traces = analysis.traces()
    assert traces.column("rank").to_pylist() == [0, 1, 2, 3]
    first = Job.read(prefix).tables[0]
    assert traces.slice(0, 1).to_pylist()[0] == {"rank": 0, **stats.trace_row(first),
                                                 **step_work.trace_figures(step_work.step_table(first))}
    assert analysis.recorded_steps().num_rows == 0  # a generated job has no ProfilerStep#N
    collectives = analysis.collectives()
    assert collectives.num_rows == sum(stats.collective_rows(t).num_rows for t in Job.read(prefix).tables) > 0
    assert set(collectives.column("rank").to_pylist()) == {0, 1, 2, 3}
    summary = analysis.summary()
    assert summary.num_rows == 1 and summary.column("ranks").to_pylist() == [4]
    assert analysis.findings().num_rows == 0


def test_findings_name_the_rank_and_its_file(tmp_path):
    prefix = _job(tmp_path)
    job = Job.read(prefix)
    table = job.tables[1]
    ids = table.column("id").to_pylist()
    job.tables[1] = table.set_column(table.schema.get_field_index("data_deps"), "data_deps",
                                     pa.array([[ids[0] + 10**9]] + [[]] * (len(ids) - 1), pa.list_(pa.uint64())))
    findings = JobAnalysis(job, prefix).findings().to_pylist()
    assert findings and {f["rank"] for f in findings} == {1}
    assert all(f["path"] == f"{prefix}.1.et" for f in findings)
