"""Issue 41, item 1: the unit of failure is the job. A file name no character of which takes the
night down, ranks that do not make one job rejected whole (never converted short of a rank), and
the day's stages after conversion going on past jobs that could not be simulated or selected.

The whole night with such jobs runs in test_faults_night.py; here `list_day`, `process_job` and
the stages' own functions, on a drop in memory:// or a local folder.
"""

from __future__ import annotations

import pytest
from table_rows import complete

from chakra_core.analysis.select import merged_rank_rows
from pipeline.nightly.drop import list_day
from pipeline.nightly.ingest import plain_name
from pipeline.nightly.jobs import process_job
from pipeline.nightly.represent import representatives_table
from pipeline.nightly.run import representatives_counts, simulation_counts
from test_pipeline_accounting import DATE, GLOO, SOURCE, accounted, gloo_job, run_job, warehouse_files

GLOO_MLP = GLOO.parent / "mlp_ddp-w2"


@pytest.mark.parametrize("odd", ["rank1.et.json.gz ", "rank\u0661.et.json.gz", "rank1.et.json.gz\u200b",
                                 " rank1.et.json.gz", "rank\uff11.et.json.gz"],
                         ids=["trailing-space", "arabic-digit", "zero-width", "leading-space", "fullwidth-digit"])
def test_a_rank_file_whose_name_is_almost_a_ranks_rejects_the_job_whole(memfs, odd):
    """The job would otherwise convert as a 1-rank job, its rank 1 dropped in silence."""
    gloo_job(SOURCE, "j", {odd: (GLOO / "rank1.et.json.gz").read_bytes()},
             skip=("rank1.et.json.gz", "rank1.kineto.json.gz"))
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert not outcome.ingest and outcome.prefix is None and warehouse_files() == []
    culprit = next(f for f in files if f not in ("j/rank0.et.json.gz", "j/rank0.kineto.json.gz"))
    assert "named like a rank file (rank1.et.json.gz)" in reasons[culprit]
    assert all(reasons[f] == f"{culprit} of this job was rejected" for f in files if f != culprit)


@pytest.mark.parametrize("name", ["rank0.et.json.gz\n", "rank1.et.json.gz\n", "x\ny.txt", "rank0.kineto.json.gz\n"])
def test_a_newline_in_a_file_name_never_raises(tmp_path, name):
    """`$` matched before a final newline: the file was taken for a rank trace and its rank was
    read from the escaped name (AttributeError: 'NoneType' object has no attribute 'group')."""
    source, warehouse = (tmp_path / "drops").as_uri(), (tmp_path / "wh").as_uri()
    gloo_job(source, "j", {name: b"{}"})
    job = next(j for j in list_day(source, DATE)[0] if j.job_id == "j")
    outcome = process_job(job, DATE, warehouse, "r1")
    reasons = accounted(outcome, sorted(f.name for f in job.files))
    assert all("\n" not in r for r in reasons.values())
    escaped = "j/" + name.replace("\n", "\\n")
    assert "control character" in reasons[escaped] or "named like a rank file" in reasons[escaped]
    if name.startswith("rank") and "kineto" not in name:  # meant as a rank: the job is not converted short of it
        assert outcome.prefix is None
    else:
        assert outcome.ranks == 2


def test_ranks_from_two_recordings_are_rejected_whole(memfs):
    """rank0 of one recording beside rank1 of another converts, but its collectives do not match
    across ranks: not one job."""
    gloo_job(SOURCE, "j", {"rank1.et.json.gz": (GLOO_MLP / "rank1.et.json.gz").read_bytes()},
             skip=("rank0.kineto.json.gz", "rank1.kineto.json.gz"))
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert outcome.prefix is None and warehouse_files() == []
    assert all("ranks do not make one job" in r or "of this job was rejected" in r for r in reasons.values())
    assert {r["stage"] for r in outcome.rejects} == {"convert"}


def test_a_rank_missing_from_the_recording_rejects_the_job(memfs):
    """rank 0 alone of a 2-rank recording: its process group names rank 1, which is not there."""
    gloo_job(SOURCE, "j", skip=("rank1.et.json.gz", "rank1.kineto.json.gz"))
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert outcome.prefix is None, reasons
    assert any("rank 1" in r for r in reasons.values())


def test_plain_name_is_what_a_person_reads():
    assert plain_name("rank\u0661.et.json ") == "rank1.et.json"
    assert plain_name("ra\u200bnk2.et\u202e.json") == "rank2.et.json"
    assert plain_name("rank0.et.json") == "rank0.et.json"


def _reference_rows(status: str) -> list[dict]:
    return [{"job_id": "a", "status": status, "error": None if status == "ok" else "deadlock", "finish_ns": 10,
             "max_compute_ns": 5, "max_exposed_comm_ns": 1}]


def test_a_job_without_a_reference_simulation_is_counted_not_summed():
    """The stage's count summed a column that is null for unplaced jobs (TypeError: int + NoneType)."""
    row = merged_rank_rows([complete("traces", {"job_id": "a", "rank": 0, "nodes": 3, "comm_by_kind": "{}",
                                                "compute_by_class": "{}"})])
    table = representatives_table({"a": (1, row)}, _reference_rows("not simulated"), 4, "r1")
    row = table.to_pylist()[0]
    assert row["representative"] is None and row["status"].startswith("not selected: no reference simulation")
    assert representatives_counts(table) == "0 representatives of 1 jobs (1 not selected)"
    sims = [{"status": "not simulated"}, {"status": "ok"}, {"status": "failed"}]
    assert simulation_counts(sims, 0) == "3 simulations, 1 ok, 2 failed (0 finished in this stage)"


def test_twins_of_a_job_name_and_names_too_long_for_the_warehouse_are_rejected(tmp_path):
    """Before: NFC/NFD and zero-width twins were weighted as separate jobs; names of 240-255
    bytes failed on the staging path."""
    source, warehouse = (tmp_path / "drops").as_uri(), (tmp_path / "wh").as_uri()
    for job in ("caf\u00e9", "cafe\u0301", "job\u200b1", "job1", "x" * 240):
        gloo_job(source, job)
    jobs = {j.job_id: j for j in list_day(source, DATE)[0]}
    assert sum(j.problem is None for j in jobs.values()) == 2  # one of each twin pair
    twins = [j.problem for j in jobs.values() if j.problem and "the same job as" in j.problem]
    assert len(twins) == 2 and all("Unicode form or invisible characters" in p for p in twins)
    assert "a job name of 240 bytes; at most 200" in jobs["x" * 240].problem
    outcome = process_job(jobs["x" * 240], DATE, warehouse, "r1")
    assert outcome.prefix is None and len(outcome.rejects) == len(jobs["x" * 240].files)
