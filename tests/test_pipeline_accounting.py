"""Hostile input to the pipeline (issue 15): every input file is accounted for exactly once, and a
job is published into the warehouse whole or not at all.

Most tests call `process_job` directly on a drop in memory://; one runs a whole day on Ray.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from chakra_core.format.etfile import write_table
from pipeline.nightly import jobs as jobs_module
from pipeline.nightly.drop import REGULAR_FILES_ONLY, list_day
from pipeline.nightly.jobs import process_job
from pipeline.layout import filesystem, join, staging_dir, traces_dir
from table_rows import night_tables
from tools import make_drop as md

GLOO = Path(__file__).resolve().parents[1] / "datasets" / "pytorch-gloo" / "collectives-w2"
DATE = "2026-11-21"
SOURCE, WAREHOUSE = "memory://drops", "memory://wh"
GENERATED = md.generate_job(1)  # tensor parallel, 4 ranks


def chakra_job(source: str, job: str, names: dict[str, int], truncate: str | None = None) -> None:
    """Chakra ETs of GENERATED's ranks under the given file names (name -> rank)."""
    for name, rank in names.items():
        url = join(source, DATE, job, name)
        write_table(GENERATED.tables[rank], url)
        if name == truncate:
            fs, path = filesystem(url)
            fs.pipe_file(path, md.truncate_mid_message(fs.cat_file(path)))


def gloo_job(source: str, job: str, files: dict[str, bytes] | None = None, skip: tuple[str, ...] = ()) -> None:
    """A recorded 2-rank PyTorch job (traces and Kineto), minus `skip`, plus `files`."""
    fs, base = filesystem(join(source, DATE, job))
    fs.makedirs(base, exist_ok=True)
    for p in GLOO.glob("rank*.json.gz"):
        if p.name not in skip:
            fs.pipe_file(f"{base}/{p.name}", p.read_bytes())
    for name, data in (files or {}).items():
        fs.pipe_file(f"{base}/{name}", data)


def run_job(job: str, run_id: str = "r1", source: str = SOURCE, warehouse: str = WAREHOUSE):
    """(outcome, the day's files of the job) after processing it."""
    job_input = next(j for j in list_day(source, DATE)[0] if j.job_id == job)
    return process_job(job_input, DATE, warehouse, run_id), sorted(f.name for f in job_input.files)


def accounted(outcome, files: list[str]) -> dict[str, str]:
    """Asserts every file is in exactly one of the ingest rows and reject rows; file -> reason."""
    logged = [r["file"] for r in outcome.ingest] + [r["file"] for r in outcome.rejects]
    assert sorted(logged) == files
    return {r["file"]: r["reason"] for r in outcome.rejects}


def warehouse_files(warehouse: str = WAREHOUSE) -> list[str]:
    fs, path = filesystem(warehouse)
    found = sorted(p[len(path.rstrip("/")) + 1:] for p in fs.find(path)) if fs.exists(path) else []
    # (the tables and their catalog: the night's, not a job's outputs)
    return [p for p in found if not p.startswith("tables/") and p != "catalog.sqlite"]


def assert_job_rejected(outcome, files: list[str], culprit: str, *words: str) -> None:
    """The whole job rejected: the culprit's reason holds the words, the others name the culprit;
    nothing of the job in the warehouse."""
    reasons = accounted(outcome, files)
    assert not outcome.ingest and outcome.prefix is None and not outcome.traces
    assert all(word in reasons[culprit] for word in words), reasons[culprit]
    assert all(reasons[f] == f"{culprit} of this job was rejected" for f in files if f != culprit)
    assert all("\n" not in reason for reason in reasons.values())
    assert warehouse_files() == []


def test_two_chakra_files_claiming_one_rank_reject_the_job(memfs):
    chakra_job(SOURCE, "j", {"j.0.et": 0, "j.1.et": 1, "j.2.et": 2, "j.3.et": 3, "extra.0.et": 0})
    outcome, files = run_job("j")
    assert_job_rejected(outcome, files, "j/j.0.et", "j/extra.0.et", "j/j.0.et", "rank 0")
    assert {r["stage"] for r in outcome.rejects} == {"ingest"}


def test_a_plain_and_a_gzipped_pytorch_trace_of_one_rank_reject_the_job(memfs):
    plain = gzip.decompress((GLOO / "rank0.et.json.gz").read_bytes())
    gloo_job(SOURCE, "p", {"rank0.et.json": plain})
    outcome, files = run_job("p")
    assert_job_rejected(outcome, files, "p/rank0.et.json.gz", "p/rank0.et.json ", "p/rank0.et.json.gz", "rank 0")


def test_two_kineto_traces_of_one_rank_reject_the_job(memfs):
    plain = gzip.decompress((GLOO / "rank1.kineto.json.gz").read_bytes())
    gloo_job(SOURCE, "p", {"rank1.kineto.json": plain})
    outcome, files = run_job("p")
    assert_job_rejected(outcome, files, "p/rank1.kineto.json.gz", "p/rank1.kineto.json ", "Kineto trace of rank 1")


def test_chakra_ranks_with_different_names_reject_the_job(memfs):
    chakra_job(SOURCE, "j", {"a.0.et": 0, "b.1.et": 1})
    outcome, files = run_job("j")
    assert_job_rejected(outcome, files, "j/b.1.et", "j/a.0.et", "one name")


def test_a_chakra_et_beside_pytorch_traces_rejects_the_job(memfs):
    gloo_job(SOURCE, "p")
    chakra_job(SOURCE, "p", {"p.0.et": 0})
    outcome, files = run_job("p")
    assert_job_rejected(outcome, files, "p/p.0.et", "PyTorch traces", "one format")


def test_a_pytorch_job_missing_a_rank_is_rejected(memfs):
    gloo_job(SOURCE, "p", skip=("rank0.et.json.gz", "rank0.kineto.json.gz"))  # rank 1 alone would become rank 0
    outcome, files = run_job("p")
    reasons = accounted(outcome, files)
    assert not outcome.ingest and warehouse_files() == []
    assert all(reason == "p: no trace of rank 0; the job's ranks run up to 1" for reason in reasons.values())


def test_a_far_out_rank_is_rejected_without_counting_to_it(memfs):
    chakra_job(SOURCE, "j", {"j.0.et": 0, "j.999999999.et": 1})
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert set(reasons.values()) == {"j: no trace of rank 1 (and 999999997 more); the job's ranks run up to 999999999"}


@pytest.mark.parametrize("pytorch", [True, False], ids=["kineto-without-its-rank", "kineto-beside-chakra"])
def test_a_kineto_trace_the_job_cannot_use_is_rejected_alone(memfs, pytorch):
    kineto = (GLOO / "rank0.kineto.json.gz").read_bytes()
    if pytorch:
        gloo_job(SOURCE, "j", {"rank5.kineto.json.gz": kineto})
    else:
        chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)})
        memfs.pipe_file(f"/drops/{DATE}/j/rank5.kineto.json.gz", kineto)
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert list(reasons) == ["j/rank5.kineto.json.gz"] and reasons["j/rank5.kineto.json.gz"].startswith(
        "j/rank5.kineto.json.gz: a Kineto trace")
    assert outcome.ranks == (2 if pytorch else 4) and {r["status"] for r in outcome.ingest} == {"processed"}


def test_unprofiled_step_times_are_ingested_with_their_ranks_and_rejected_alone_without(memfs):
    timing = json.dumps({"steps_ns": [2_000_000, 2_100_000]}).encode()
    gloo_job(SOURCE, "j", {"rank0.timing.json": timing, "rank1.timing.json": timing, "rank5.timing.json": timing})
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert list(reasons) == ["j/rank5.timing.json"] and "rank 5, which has no rank5.et.json" in reasons[
        "j/rank5.timing.json"]
    assert sorted(r["file"] for r in outcome.ingest if r["kind"] == "timing") == ["j/rank0.timing.json",
                                                                                  "j/rank1.timing.json"]
    assert outcome.ranks == 2


def test_a_rejected_chakra_job_leaves_nothing_in_the_warehouse(memfs):
    chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)}, truncate="j.2.et")
    outcome, files = run_job("j")
    assert_job_rejected(outcome, files, "j/j.2.et", "j.2.et")  # ranks 0 and 1 were fine, and are not kept
    assert {r["stage"] for r in outcome.rejects} == {"convert"}


def test_a_pytorch_conversion_failing_half_way_leaves_nothing(memfs, monkeypatch):
    import chakra_core.convert.pytorch.job as convert_module

    written, real_write = [], convert_module.write_rows

    def disk_full_after_one(rows, url, metadata):
        if written:
            raise OSError(f"{url}: no space left on device (injected)\nsecond line")
        written.append(url)
        return real_write(rows, url, metadata)

    monkeypatch.setattr(convert_module, "write_rows", disk_full_after_one)
    gloo_job(SOURCE, "p")
    outcome, files = run_job("p")
    reasons = accounted(outcome, files)
    assert written and "/.staging/" in written[0]  # rank 0 was written, in the staging folder
    assert not outcome.ingest and warehouse_files() == []
    assert all("no space left on device (injected) second line" in r for r in reasons.values())


@pytest.mark.parametrize("local", [False, True], ids=["memory", "file"])
def test_a_rerun_replaces_an_earlier_publication_cleanly(memfs, tmp_path, local):
    source, warehouse = ((tmp_path / "drops").as_uri(), (tmp_path / "wh").as_uri()) if local else (SOURCE, WAREHOUSE)
    chakra_job(source, "j", {f"j.{r}.et": r for r in range(4)})
    first, _ = run_job("j", "r1", source, warehouse)
    assert first.ranks == 4
    fs, day = filesystem(join(source, DATE))
    fs.rm(f"{day}/j/j.3.et")  # the job shrinks to 3 ranks: rank 3's old trace must not linger
    second, files = run_job("j", "r2", source, warehouse)
    accounted(second, files)
    assert second.ranks == 3 and {r["status"] for r in second.ingest} == {"processed"}
    assert warehouse_files(warehouse) == [f"traces/date={DATE}/job=j/{n}" for n in
                                          ("_manifest.json", "j.0.et", "j.1.et", "j.2.et")]
    published = [r["path"] for r in second.traces]
    assert published == [join(traces_dir(warehouse, DATE, "j"), f"j.{r}.et") for r in range(3)]
    assert second.prefix == join(traces_dir(warehouse, DATE, "j"), "j")


def test_a_rerun_that_rejects_a_job_removes_its_earlier_publication(memfs):
    chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)})
    assert run_job("j", "r1")[0].ranks == 4 and warehouse_files()
    chakra_job(SOURCE, "j", {"extra.1.et": 1})  # the drop changed: now two files claim rank 1
    outcome, files = run_job("j", "r2")
    assert_job_rejected(outcome, files, "j/j.1.et", "j/extra.1.et", "rank 1")


def test_staging_is_cleaned_and_the_manifest_written_last(memfs, monkeypatch):
    chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)})
    staging = staging_dir(WAREHOUSE, DATE, "j", "r1")
    write_table(GENERATED.tables[0], join(staging, "j.7.et"))  # left by a dead attempt of the same run

    def refuse(staging, final):
        raise OSError(f"{final}: connection reset (injected)")

    monkeypatch.setattr(jobs_module, "publish", refuse)
    outcome, _ = run_job("j")
    assert not outcome.ingest and warehouse_files() == []  # staging removed, nothing published, no manifest
    monkeypatch.undo()

    real_write_manifest, seen = jobs_module._write_manifest, []

    def check_then_write(*args):
        seen.append(warehouse_files())
        real_write_manifest(*args)

    monkeypatch.setattr(jobs_module, "_write_manifest", check_then_write)
    outcome, _ = run_job("j")
    assert outcome.ranks == 4 and {r["status"] for r in outcome.ingest} == {"processed"}
    assert seen == [[f"traces/date={DATE}/job=j/j.{r}.et" for r in range(4)]]  # published, staging gone
    again, _ = run_job("j", "r2")
    assert {r["status"] for r in again.ingest} == {"unchanged"}
    assert [r["path"] for r in again.traces] == [r["path"] for r in outcome.traces]


@pytest.mark.slow
def test_staging_and_publication_on_s3(s3):
    s3.mkdir("chakra-accounting")
    source, warehouse = "s3://chakra-accounting/drops", "s3://chakra-accounting/wh"
    chakra_job(source, "j", {f"j.{r}.et": r for r in range(4)})
    chakra_job(source, "bad", {"bad.0.et": 0, "bad.1.et": 1}, truncate="bad.1.et")
    assert run_job("j", "r1", source, warehouse)[0].ranks == 4
    s3.rm(f"chakra-accounting/drops/{DATE}/j/j.3.et")
    assert run_job("j", "r2", source, warehouse)[0].ranks == 3
    bad, _ = run_job("bad", "r2", source, warehouse)
    assert not bad.ingest and len(bad.rejects) == 2
    s3.invalidate_cache()
    assert warehouse_files(warehouse) == [f"traces/date={DATE}/job=j/{n}" for n in
                                          ("_manifest.json", "j.0.et", "j.1.et", "j.2.et")]


@pytest.mark.slow
def test_a_hostile_day_is_accounted_for_file_by_file(tmp_path):
    """The whole day on Ray: every file in exactly one of ingest_log and rejects, and only the
    good job's ranks in the warehouse."""
    import ray
    from pipeline.cluster import start_ray
    from pipeline.nightly.run import run_day
    from pipeline.simulation import load_sweep

    source, warehouse = (tmp_path / "drops").as_uri(), (tmp_path / "wh").as_uri()
    chakra_job(source, "good", {f"good.{r}.et": r for r in range(4)})
    chakra_job(source, "twice", {"twice.0.et": 0, "twice.1.et": 1, "copy.1.et": 1})
    chakra_job(source, "cut", {"cut.0.et": 0, "cut.1.et": 1}, truncate="cut.1.et")
    gloo_job(source, "plain-and-gz", {"rank1.et.json": gzip.decompress((GLOO / "rank1.et.json.gz").read_bytes())})
    (tmp_path / "drops" / DATE / "stray.txt").write_text("outside any job folder")
    (tmp_path / "wh" / ".staging" / "traces" / f"date={DATE}" / "job=old-run").mkdir(parents=True)
    files = sorted(str(p.relative_to(tmp_path / "drops" / DATE)) for p in (tmp_path / "drops" / DATE).rglob("*")
                   if p.is_file())
    os.symlink("/nonexistent", tmp_path / "drops" / DATE / "good" / "dangling")  # neither fails the night
    os.symlink("/dev/zero", tmp_path / "drops" / DATE / "good" / "zero")  # nor hangs it in hashing
    os.mkfifo(tmp_path / "drops" / DATE / "loose-fifo")
    files = sorted([*files, "good/dangling", "good/zero", "loose-fifo"])
    ray.shutdown()
    start_ray(num_cpus=2)
    try:
        day = run_day(DATE, source, warehouse, load_sweep()[:1], synthetic_jobs=0)
    finally:
        ray.shutdown()
    night = night_tables(day, warehouse)
    ingest, rejects = night["ingest_log"].to_pylist(), night["rejects"].to_pylist()
    assert sorted([r["file"] for r in ingest] + [r["file"] for r in rejects]) == files
    assert {r["job_id"] for r in ingest} == {"good"} and day.jobs_converted == 1
    assert {r["file"]: r["reason"] for r in rejects if r["file"] in ("good/zero", "loose-fifo")} == {
        "good/zero": f"zero: a symbolic link out of the drop; {REGULAR_FILES_ONLY}",
        "loose-fifo": f"loose-fifo: a FIFO; {REGULAR_FILES_ONLY}"}
    assert warehouse_files(warehouse) == [f"traces/date={DATE}/job=good/{n}" for n in
                                          ("_manifest.json", *(f"good.{r}.et" for r in range(4)))]
    assert json.loads((tmp_path / "wh" / "traces" / f"date={DATE}" / "job=good" / "_manifest.json").read_text())[
        "et_files"] == [r["path"] for r in night["traces"].to_pylist()]


def _odd_entries(folder: Path, secret: Path) -> list[str]:
    """Links of every kind, a FIFO and a socket-free device link in a job folder: each must be
    rejected alone, unopened; returns their names."""
    (folder / "sub").mkdir()
    (folder / "sub" / "real.txt").write_text("a regular file in a subfolder")
    links = {"dangling": "/nonexistent/target", "to-folder": str(folder / "sub"), "to-zero": "/dev/zero",
             "out-of-drop": str(secret), "inside": str(folder / "sub" / "real.txt")}
    for name, target in links.items():
        os.symlink(target, folder / name)
    os.mkfifo(folder / "rank5.timing.json")
    return [*links, "rank5.timing.json"]


def test_links_fifos_and_devices_in_a_drop_are_rejected_alone_unopened(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-BYTES")
    source, warehouse = (tmp_path / "drops").as_uri(), (tmp_path / "wh").as_uri()
    gloo_job(source, "j")
    odd = _odd_entries(tmp_path / "drops" / DATE / "j", secret)
    started = time.monotonic()
    outcome, files = run_job("j", "r1", source, warehouse)
    assert time.monotonic() - started < 60  # /dev/zero and the FIFO were never read
    reasons = accounted(outcome, files)
    assert outcome.ranks == 2 and sorted(reasons) == sorted(["j/sub/real.txt", *(f"j/{n}" for n in odd)])
    expected = {"dangling": "a symbolic link to nothing", "to-folder": "a symbolic link to a folder",
                "to-zero": "a symbolic link out of the drop", "out-of-drop": "a symbolic link out of the drop",
                "inside": "a symbolic link to a regular file", "rank5.timing.json": "a FIFO"}
    for name, words in expected.items():
        assert reasons[f"j/{name}"] == f"{name}: {words}; a drop holds regular files only; not read"
    assert not any("SECRET" in r or "/dev/zero" in r or "nonexistent" in r for r in reasons.values())
    assert all(r["sha256"] is None for r in outcome.rejects if r["file"] != "j/sub/real.txt")


def test_a_job_twice_in_case_and_names_with_control_characters_are_rejected(tmp_path):
    source, warehouse = (tmp_path / "drops").as_uri(), (tmp_path / "wh").as_uri()
    for job in ("job7", "JOB7", "bad\nname"):
        gloo_job(source, job)
    gloo_job(source, "ok", {"rank0\x01.kineto.json": b"{}"})
    jobs, _ = list_day(source, DATE)
    by_id = {j.job_id: j for j in jobs}
    assert sorted(by_id) == ["JOB7", "bad\\nname", "job7", "ok"]
    assert "the same job as JOB7, its name differing only in case" in by_id["job7"].problem
    assert by_id["bad\\nname"].problem.startswith("bad\\nname: the name holds a control character")
    for job_id in ("job7", "bad\\nname"):
        outcome = process_job(by_id[job_id], DATE, warehouse, "r1")
        assert not outcome.ingest and outcome.prefix is None and len(outcome.rejects) == len(by_id[job_id].files)
        assert all("\n" not in r["reason"] and "\n" not in r["file"] for r in outcome.rejects)
    ok = process_job(by_id["ok"], DATE, warehouse, "r1")
    assert ok.ranks == 2 and [r["file"] for r in ok.rejects] == ["ok/rank0\\x01.kineto.json"]


def test_a_timing_file_in_another_format_is_set_aside_and_the_job_converts(memfs):
    gloo_job(SOURCE, "j", {"rank0.timing.json": b"step,ns\n1,5\n", "rank1.timing.json": b'{"steps_ns": [5]}'})
    outcome, files = run_job("j")
    reasons = accounted(outcome, files)
    assert outcome.ranks == 2 and list(reasons) == ["j/rank0.timing.json"]
    assert "rank0.timing.json" in reasons["j/rank0.timing.json"] and "\n" not in reasons["j/rank0.timing.json"]
    assert [r["stage"] for r in outcome.rejects] == ["convert"]
    again, _ = run_job("j", "r2")  # reused from the manifest: set aside again, not logged as processed
    assert [r["file"] for r in again.rejects] == ["j/rank0.timing.json"]


def _groups(source: str, job: str, name: str, groups: dict) -> None:
    fs, path = filesystem(join(source, DATE, job, name))
    fs.pipe_file(path, json.dumps(groups).encode())


def test_a_chakra_jobs_communicator_groups_are_published_with_it(memfs):
    chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)})
    _groups(SOURCE, "j", "j.comm_groups.json", {"1": [0, 1], "2": [2, 3]})
    outcome, files = run_job("j")
    assert accounted(outcome, files) == {}
    assert {r["file"]: r["kind"] for r in outcome.ingest}["j/j.comm_groups.json"] == "comm_groups"
    fs, path = filesystem(outcome.comm_groups)
    assert outcome.comm_groups.endswith("/j.comm_groups.json")
    assert json.loads(fs.cat_file(path)) == {"1": [0, 1], "2": [2, 3]}


def test_communicator_groups_of_another_name_or_beside_pytorch_traces_are_rejected_alone(memfs):
    chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)})
    _groups(SOURCE, "j", "other.comm_groups.json", {"1": [0, 1]})
    gloo_job(SOURCE, "g", files={"g.comm_groups.json": b'{"1": [0, 1]}'})
    outcome, files = run_job("j")
    assert "job 'other'" in accounted(outcome, files)["j/other.comm_groups.json"]
    assert outcome.prefix is not None and outcome.comm_groups is None
    outcome, files = run_job("g")
    assert "beside PyTorch traces" in accounted(outcome, files)["g/g.comm_groups.json"]
    assert outcome.prefix is not None


def test_communicator_groups_naming_a_rank_the_job_lacks_reject_the_job(memfs):
    chakra_job(SOURCE, "j", {f"j.{r}.et": r for r in range(4)})
    _groups(SOURCE, "j", "j.comm_groups.json", {"1": [0, 7]})
    outcome, files = run_job("j")
    assert_job_rejected(outcome, files, "j/j.comm_groups.json", "NPU 7", "4 ranks")
