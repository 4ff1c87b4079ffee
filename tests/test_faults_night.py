"""Issue 41, items 1 and 3 through the whole night on S3 (moto): job names holding `*?[]{}`
are names, not patterns; a job that converts but cannot be simulated, a rank file named almost
as a rank's and a file whose name is a pattern each cost their job at most, never the night."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
import ray

from chakra_core.format.etfile import write_table
from pipeline import tables
from pipeline.cluster import start_ray
from pipeline.layout import remove, traces_dir
from datapaths import DATASETS
from test_pipeline import DATE, GLOO
from tools import make_drop as md

pytestmark = pytest.mark.slow
ODD = ("a*b", "q?[x]{y}")
PIPELINE_RUNS = sorted((DATASETS / "pytorch-pipeline").glob("pipeline_*-w2"))


def _unsimulable_job() -> list[pa.Table]:
    """A job that converts and validates, but whose simulation fails (a node of 2**62 µs)."""
    job = md.generate_job(1)
    first = job.tables[0]
    i = first.schema.get_field_index("duration_micros")
    durations = first.column(i).to_pylist()
    durations[0] = 2**62
    return [first.set_column(i, first.field(i), pa.array(durations, first.field(i).type)), *job.tables[1:]]


def _put_drop(s3, root: str) -> None:
    for job, run in zip(ODD, ("mlp_ddp-w2", "collectives-w2")):
        for f in (GLOO / run).glob("rank*.json.gz"):
            s3.pipe_file(f"{root}/{job}/{f.name}", f.read_bytes())
    for rank, table in enumerate(_unsimulable_job()):
        write_table(table, f"s3://{root}/unsim/u.{rank}.et")
    for f in (GLOO / "collectives-w2").glob("rank*.et.json.gz"):
        s3.pipe_file(f"{root}/nl/{f.name}", f.read_bytes())
        s3.pipe_file(f"{root}/spaced/{f.name if f.name.startswith('rank0') else f.name + ' '}", f.read_bytes())
    s3.pipe_file(f"{root}/nl/notes[1]*.txt", b"a pattern in a name (moto refuses a newline in a key: a newline\n"
                                             b"in a name is test_faults_jobs.py's, on a local drop)")


def test_a_hostile_night_on_s3_loses_only_its_bad_jobs(s3):
    from flows.nightly import nightly

    for bucket in ("odd-drops", "odd-warehouse"):
        s3.mkdir(bucket)
    _put_drop(s3, f"odd-drops/fleet/{DATE}")
    ray.shutdown()  # workers inherit the environment that points s3:// at the test endpoint
    start_ray(num_cpus=2)
    try:
        summary = nightly(DATE, "s3://odd-drops/fleet", "s3://odd-warehouse/wh", synthetic_jobs=1)
    finally:
        ray.shutdown()
    assert summary["jobs"] == 5 and summary["jobs_converted"] == 4  # a*b, q?[x]{y}, unsim, nl
    for job in ODD:
        assert s3.ls(f"odd-warehouse/wh/traces/date={DATE}/job={job}")
    rejects = tables.read_day("s3://odd-warehouse/wh", "rejects", DATE).to_pylist()
    assert {r["job_id"] for r in rejects} == {"spaced", "nl"}
    assert [r["file"] for r in rejects if r["job_id"] == "nl"] == ["nl/notes[1]*.txt"]
    assert all("named like a rank file" in r["reason"] or "of this job was rejected" in r["reason"]
               for r in rejects if r["job_id"] == "spaced")
    sims = tables.read_day("s3://odd-warehouse/wh", "sim_results", DATE).to_pylist()
    assert {r["status"] for r in sims if r["job_id"] == "unsim"} == {"not simulated"}
    assert all("passes 2**63 ns" in r["error"] for r in sims if r["job_id"] == "unsim")
    chosen = {r["job_id"]: r for r in tables.read_day("s3://odd-warehouse/wh", "representatives", DATE).to_pylist()}
    assert chosen["unsim"]["status"].startswith("not selected: no reference simulation")
    assert set(chosen) == {*ODD, "unsim", "nl"}
    # at library level too, a pattern-like job name removes that job alone
    remove(traces_dir("s3://odd-warehouse/wh", DATE, "*"))
    remove(traces_dir("s3://odd-warehouse/wh", DATE, "a*b"))
    left = sorted(p.rsplit("=", 1)[1] for p in s3.ls(f"odd-warehouse/wh/traces/date={DATE}"))
    assert left == sorted(["q?[x]{y}", "unsim", "nl"])


@pytest.mark.parametrize("protocol", ["memory", "file"])
def test_removing_a_pattern_like_job_removes_that_job_alone(memfs, tmp_path, protocol):
    warehouse = "memory://wh" if protocol == "memory" else tmp_path.as_uri()
    for job in ("a", "b", "*", "[ab]"):
        write_table(md.generate_job(1).tables[0], traces_dir(warehouse, DATE, job) + f"/{job}.0.et")
    remove(traces_dir(warehouse, DATE, "*"))
    remove(traces_dir(warehouse, DATE, "[ab]"))
    from pipeline.layout import filesystem

    fs, day = filesystem(traces_dir(warehouse, DATE, "x").rsplit("/", 1)[0])
    assert sorted(p.rstrip("/").rsplit("=", 1)[1] for p in fs.ls(day, detail=False)) == ["a", "b"]


def _no_converted_job(day) -> None:
    """Days of issue 47 whose nights converted nothing: loose files only, or a job all of
    whose files are rejected (two truncated traces, the same rank twice)."""
    day.mkdir(parents=True)
    (day / "stray.bin").write_bytes(b"\x00" * 10)
    data = (GLOO / "mlp_ddp-w2" / "rank0.et.json.gz").read_bytes()
    (day / "dead").mkdir()
    for name in ("rank3.et.json.gz", "rank3.json.gz"):
        (day / "dead" / name).write_bytes(data[: len(data) // 3])


def test_a_night_that_converts_no_job_writes_its_tables_and_rejects(tmp_path):
    from flows.nightly import nightly

    source, warehouse = tmp_path / "source", (tmp_path / "warehouse").as_uri()
    _no_converted_job(source / DATE)
    (source / "2026-11-21").mkdir()  # an empty day
    for run in PIPELINE_RUNS:  # and a day of pipeline jobs whose receives gloo records inside sends
        shutil.copytree(run, source / "2026-11-22" / run.name)
    ray.shutdown()
    start_ray(num_cpus=2)
    try:
        for date in (DATE, "2026-11-21"):
            summary = nightly(date, source.as_uri(), warehouse, synthetic_jobs=1)
            assert summary["jobs_converted"] == 0
            assert set(summary["tables"]) == set(tables.TABLES)
        assert nightly("2026-11-22", source.as_uri(), warehouse, synthetic_jobs=0)["jobs_converted"] == 2
    finally:
        ray.shutdown()
    rejects = tables.read_day(warehouse, "rejects", DATE).to_pylist()
    assert sorted(r["file"] for r in rejects) == ["dead/rank3.et.json.gz", "dead/rank3.json.gz", "stray.bin"]
    assert tables.read_day(warehouse, "regressions", DATE).num_rows == 0
    assert tables.read_day(warehouse, "rejects", "2026-11-21").num_rows == 0
    assert tables.read_day(warehouse, "rejects", "2026-11-22").num_rows == 0
