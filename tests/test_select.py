"""Fleet discovery and representative selection (`chakra select`)."""

from __future__ import annotations

import json
import shutil

import pytest

from chakra_core.analysis.fleet import find_jobs, load_job
from chakra_core.analysis.select import (
    SelectionError,
    select_representatives,
    summarize_job,
)
from chakra_core.cli import main
from chakra_core.generate.builder import write_job
from tools.make_drop import generate_job


def _write(folder, index: int, seed: int = 0) -> str:
    job = generate_job(index, seed)
    write_job(job.tables, str(folder), job.job_id)
    return job.job_id


@pytest.fixture(scope="module")
def summaries():
    """Three identical data-parallel jobs and three identical DLRM jobs (same generator seed)."""
    dp, dlrm = generate_job(0), generate_job(3)
    jobs = [summarize_job(f"{job.job_id}-copy{c}", job.tables) for job in (dp, dlrm) for c in range(3)]
    return jobs


def test_find_jobs_reads_a_job_folder_and_a_folder_of_jobs(tmp_path):
    single = _write(tmp_path / "one", 0)
    _write(tmp_path / "fleet" / "a", 1)
    _write(tmp_path / "fleet" / "nested" / "b", 3)
    jobs, problems = find_jobs([str(tmp_path / "one"), str(tmp_path / "fleet")])
    assert problems == []
    assert [j.job_id for j in jobs] == [single, "a", "nested/b"]
    tables, groups = load_job(jobs[2])
    assert len(tables) == jobs[2].ranks == generate_job(3).npus and groups == {}


def test_find_jobs_reports_what_is_not_a_job(tmp_path):
    _write(tmp_path / "gap", 0)
    (tmp_path / "gap" / f"{generate_job(0).job_id}.2.et").unlink()
    _write(tmp_path / "mixed", 0)
    _write(tmp_path / "mixed", 1)
    (tmp_path / "empty").mkdir()
    jobs, problems = find_jobs([str(tmp_path / "gap"), str(tmp_path / "mixed"), str(tmp_path / "empty"),
                                str(tmp_path / "absent")])
    assert jobs == []
    assert len(problems) == 4
    assert "lacks rank file(s) [2]" in problems[0]
    assert "rank files of several jobs" in problems[1]
    assert "no per-rank ETs" in problems[2] and "not a folder" in problems[3]


def test_same_job_under_two_folders_gets_distinct_ids(tmp_path):
    _write(tmp_path / "x" / "j", 0)
    shutil.copytree(tmp_path / "x", tmp_path / "y")
    jobs, _ = find_jobs([str(tmp_path / "x"), str(tmp_path / "y")])
    assert [j.job_id for j in jobs] == ["j", "j#2"]


def test_two_families_are_estimated_exactly_by_one_job_each(summaries):
    selection = select_representatives(summaries, 2)
    by_rep = {c["representative"]: c for c in selection.clusters}
    assert {rep.rsplit("-copy", 1)[0] for rep in by_rep} == {"gen-dp-000-n8", "gen-dlrm-003-n8"}
    assert all(c["jobs"] == 3 and c["weight"] == pytest.approx(3.0) for c in selection.clusters)
    assert selection.error == pytest.approx(0.0, abs=1e-6) and selection.coverage == pytest.approx(1.0)
    assert all(r["estimate"] == pytest.approx(r["actual"], rel=1e-6) for r in selection.estimates)
    members = {}
    for row in selection.jobs:
        members.setdefault(row["cluster"], set()).add(row["job_id"].rsplit("-copy", 1)[0])
    assert all(len(families) == 1 for families in members.values())
    assert sum(row["representative"] for row in selection.jobs) == 2


def test_one_representative_estimates_with_its_calibrated_weight(summaries):
    selection = select_representatives(summaries, 1)
    [cluster] = selection.clusters
    rep = next(j for j in summaries if j.job_id == cluster["representative"])
    time = next(r for r in selection.estimates if r["group"] == "time")
    assert time["estimate"] == pytest.approx(cluster["weight"] * rep.finish_ns)
    assert time["actual"] == sum(j.finish_ns for j in summaries)
    # one job cannot reproduce two kinds of job: some estimate is off
    assert selection.error > 0.1 and selection.coverage == pytest.approx(1 - selection.error)
    assert selection.curve == [{"k": 1, "error": selection.error, "errors": selection.errors}]


def test_k_beyond_an_exact_estimate_is_lowered_and_said(summaries):
    selection = select_representatives(summaries, 4)
    assert selection.k == 2 and "k lowered from 4" in selection.notes[0]
    with pytest.raises(SelectionError, match="k may not exceed"):
        select_representatives(summaries, 7)


def test_without_k_the_fewest_meeting_the_error(summaries):
    selection = select_representatives(summaries, max_error=0.05)
    assert selection.k == 2 and selection.error <= 0.05 and selection.curve[0]["error"] > 0.05


def test_features_follow_the_jobs(summaries):
    selection = select_representatives(summaries, 2)
    assert {"log2_npus", "sim_compute_share", "sim_exposed_comm_share", "log2_message_p99", "log10_sim_ns",
            "compute_share_gemm", "bytes_share_all_reduce", "bytes_share_all_to_all"} <= set(selection.features)


def test_cli_select(tmp_path, capsys):
    for index in (0, 1, 3, 5, 6, 8):
        _write(tmp_path / "fleet" / f"job{index}", index)
    _write(tmp_path / "fleet" / "broken", 2)
    (tmp_path / "fleet" / "broken" / f"{generate_job(2).job_id}.0.et").write_bytes(b"\x05garbage")
    out = tmp_path / "selection.json"
    assert main(["select", str(tmp_path / "fleet"), "-k", "3", "--json", "-o", str(out)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == json.loads(out.read_text())
    assert document["k"] == 3 and len(document["clusters"]) == 3 and len(document["jobs"]) == 6
    assert [c["k"] for c in document["curve"]] == [1, 2, 3]
    errors = [c["error"] for c in document["curve"]]
    assert errors == sorted(errors, reverse=True) and document["error"] == errors[-1]
    time = next(r for r in document["estimates"] if r["group"] == "time")
    assert time["error"] == pytest.approx(abs(time["estimate"] - time["actual"]) / time["actual"])
    assert time["error"] <= document["errors"]["time"] + 1e-12
    assert len(document["skipped"]) == 1 and "broken" in document["skipped"][0]
    assert main(["select", str(tmp_path / "fleet"), "--max-error", "0.1"]) == 0
    printed = capsys.readouterr()
    assert "what the subset estimates" in printed.out and "bytes_by_kind" in printed.out
    assert "the fewest representatives whose largest error is within 10.0%" in printed.err
    assert main(["select", str(tmp_path / "fleet"), "-k", "9"]) == 2
    assert "k may not exceed" in capsys.readouterr().err
