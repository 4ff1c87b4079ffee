"""The fleet pipeline with its real parts: Ray local (2 CPUs), Prefect's ephemeral API, local files.

(S3 is in test_pipeline_s3.py.) A small day's drop: two recorded gloo jobs, a truncated trace,
an unknown file and a file outside any job folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest

import ray
import prefect  # noqa: F401  (needed: a missing dependency fails, not skips)

from pipeline import tables  # noqa: E402
from pipeline.cluster import start_ray  # noqa: E402
from pipeline.nightly.run import FAULT_KILL_ONCE, run_day  # noqa: E402
from pipeline.simulation import load_sweep  # noqa: E402
from table_rows import night_tables  # noqa: E402

GLOO = Path(__file__).resolve().parents[1] / "datasets" / "pytorch-gloo"
DATE = "2026-11-20"
pytestmark = pytest.mark.slow


def make_small_drop(root: Path, date: str = DATE) -> set[str]:
    """The drop's files, relative to the day folder."""
    day = root / date
    for job, run in (("mlp", "mlp_ddp-w2"), ("coll", "collectives-w2")):
        (day / job).mkdir(parents=True)
        for f in (GLOO / run).glob("rank*.json.gz"):
            shutil.copy(f, day / job / f.name)
        shutil.copy(GLOO / run / "job.json", day / job / "job.json")
    (day / "broken").mkdir()
    data = (GLOO / "mlp_ddp-w2" / "rank0.et.json.gz").read_bytes()
    (day / "broken" / "rank0.et.json.gz").write_bytes(data[: len(data) // 2])
    (day / "mlp" / "notes.txt").write_text("not a trace")
    (day / "stray.bin").write_bytes(b"\x00" * 10)
    return {str(p.relative_to(day)) for p in day.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def ray_local():
    ray.shutdown()
    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def _count(warehouse: Path, table: str) -> int:
    """The table's rows in the current snapshot."""
    from chakra_core.warehouse.query import open_warehouse

    return open_warehouse(str(warehouse))[0].execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_nightly_flow_is_complete_and_idempotent(tmp_path, ray_local, capsys):
    from flows.nightly import _print_summary, nightly

    files = make_small_drop(tmp_path / "source")
    warehouse = tmp_path / "warehouse"
    summary = nightly(DATE, (tmp_path / "source").as_uri(), warehouse.as_uri())
    assert summary["jobs"] == 3 and summary["jobs_converted"] == 2 and summary["ranks"] == 4
    # every input file in exactly one of ingest_log and rejects
    ingest = tables.read_day(warehouse.as_uri(), "ingest_log", DATE).to_pylist()
    rejects = tables.read_day(warehouse.as_uri(), "rejects", DATE).to_pylist()
    logged = [r["file"] for r in ingest] + [r["file"] for r in rejects]
    assert sorted(logged) == sorted(files)
    reasons = {r["file"]: r["reason"] for r in rejects}
    assert "ends early" in reasons["broken/rank0.et.json.gz"] or "cannot read" in reasons["broken/rank0.et.json.gz"]
    assert "unknown file type" in reasons["mlp/notes.txt"] and "not inside a job folder" in reasons["stray.bin"]
    assert set(summary["tables"]) == {"ingest_log", "rejects", "traces", "collectives", "sim_results",
                                      "representatives", "synthetic_traces", "fidelity", "device_time",
                                      "device_verdicts", "job_history", "kernels", "stragglers", "regressions", "nights",
                                      "colocation"}
    assert summary["report"].endswith(f"/reports/date={DATE}/index.html")
    assert "Fleet report" in (warehouse / "reports" / f"date={DATE}" / "index.html").read_text()
    counts = {t: _count(warehouse, t) for t in summary["tables"]}
    assert counts["traces"] == 4 and counts["sim_results"] == 2 * len(load_sweep())
    assert counts["collectives"] > 50
    # every converted job is simulated at least once (on a ring of its own size)
    sims = tables.read_day(warehouse.as_uri(), "sim_results", DATE).to_pylist()
    assert {r["job_id"] for r in sims if r["status"] == "ok"} == {"mlp", "coll"}
    assert set(summary["best_system"]) == {"mlp", "coll"}
    # two jobs, two clusters: each job represents itself and the estimate is exact
    chosen = tables.read_day(warehouse.as_uri(), "representatives", DATE).to_pylist()
    assert {r["job_id"] for r in chosen} == {"mlp", "coll"}
    assert all(r["status"] == "ok" and r["representative"] and r["k"] == 2 and r["weight"] == pytest.approx(1.0)
               and r["estimate_error"] == pytest.approx(0.0, abs=1e-6) for r in chosen)
    estimates = json.loads(chosen[0]["estimates"])
    assert {e["group"] for e in estimates} == {"jobs", "time", "exposed_comm", "time_by_family", "bytes_by_kind"}
    assert all(e["estimate"] == pytest.approx(e["actual"], rel=1e-6) for e in estimates)
    assert summary["synthetic"]["selection_errors"] == json.loads(chosen[0]["estimate_errors"])
    # the synthesizer learnt the day's two jobs (2 ranks each) and sampled jobs at 2 and 4 NPUs
    assert summary["synthetic"]["training_jobs"] == 2 and summary["synthetic"]["training_skipped"] == 0
    synthetic = tables.read_day(warehouse.as_uri(), "synthetic_traces", DATE).to_pylist()
    # 4 per NPU count, more at 2 NPUs when a compared cluster needs more for its verdict
    assert sum(r["npus"] == 4 for r in synthetic) == 4 and sum(r["npus"] == 2 for r in synthetic) >= 4
    assert all(r["status"] == "ok" and r["finish_ns"] > 0 for r in synthetic)
    assert fsspec.filesystem("file").exists(synthetic[0]["path"] + ".0.et")
    fidelity = tables.read_day(warehouse.as_uri(), "fidelity", DATE).to_pylist()
    assert fidelity and {r["npus"] for r in fidelity} == {2}  # real jobs exist at 2 NPUs only
    assert all(r["real_jobs"] >= 1 and r["synthetic_jobs"] >= 1 for r in fidelity)
    assert all(r["samples_needed"] >= 3 and (r["synthetic_jobs"] >= r["samples_needed"]
                                             or r["verdict"].startswith("too few samples")) for r in fidelity)
    assert sorted(summary["synthetic"]["verdicts"].values()) == sorted(r["verdict"] for r in fidelity)
    # the terminal counts files as files (of how many jobs), failed simulations, and says an unjudged
    # comparison in words (issue 49)
    assert (summary["rejects"], summary["rejected_jobs"], summary["files_outside_jobs"]) == (3, 2, 1)
    capsys.readouterr()
    _print_summary(summary)
    printed = capsys.readouterr().out
    assert "3 files rejected (2 in 2 job(s), 1 outside any job's folder: chakra query" in printed
    failed = sum(r["status"] != "ok" for r in sims)
    assert f"; {len(sims)} simulations, {failed} failed" in printed.split("\n")[0] and "too few samples" not in printed
    short = [g for g, v in summary["synthetic"]["verdicts"].items() if v.startswith("too few samples")]
    assert set(summary["synthetic"]["short"]) == set(short)
    assert all(f"  {group}: not judged: the real jobs' iteration times spread too widely for " in printed
               for group in short)

    assert {r["status"] for r in ingest} == {"processed"}
    again = nightly(DATE, (tmp_path / "source").as_uri(), warehouse.as_uri())
    assert again["run_id"] != summary["run_id"]
    # the second run found the same files already converted and reused the rank traces
    assert {r["status"] for r in tables.read_day(warehouse.as_uri(), "ingest_log", DATE).to_pylist()} == {"unchanged"}
    assert {t: _count(warehouse, t) for t in summary["tables"]} == counts  # replaced, not appended
    from chakra_core.warehouse.query import open_warehouse

    committed = open_warehouse(str(warehouse))[1]  # each night's files compacted to one a table
    assert all(len(committed[t]) <= 1 for t in summary["tables"]) and len(committed["traces"]) == 1
    # the first night is still there to read, as it was
    first = open_warehouse(str(warehouse), as_of=summary["run_id"])[0]
    assert first.execute("SELECT count(*) FROM traces").fetchone()[0] == 4
    assert first.execute("SELECT DISTINCT status FROM ingest_log").fetchall() == [("processed",)]


def test_a_gpu_run_gives_device_rows_through_chakra_query(tmp_path, ray_local, capsys):
    from chakra_core.cli import main

    job = tmp_path / "source" / DATE / "gpu-tiny"
    shutil.copytree(GLOO.parent / "gpu-h200" / "mlp_tiny", job)
    warehouse = tmp_path / "wh"
    day = run_day(DATE, (tmp_path / "source").as_uri(), warehouse.as_uri(), load_sweep()[:1], synthetic_jobs=0)
    tables.commit_night(warehouse.as_uri(), DATE, day.files, day.run_id)
    sql = ("SELECT variant, sum(ns)::BIGINT ns FROM device_time WHERE job_id = 'gpu-tiny' GROUP BY variant ORDER BY variant;"
           " SELECT variant, bound FROM device_verdicts ORDER BY variant")
    assert main(["query", "--warehouse", str(warehouse), "--json", sql.split(";")[0]]) == 0
    times = json.loads(capsys.readouterr().out)
    # the prediction keeps every kernel as recorded: to the µs the simulator times it in (recorded: to the ns)
    assert [r["variant"] for r in times] == ["predicted", "recorded"] and times[1]["ns"] > 10**6
    assert times[0]["ns"] == pytest.approx(times[1]["ns"], rel=0.02)
    assert main(["query", "--warehouse", str(warehouse), "--json", sql.split(";")[1]]) == 0
    assert json.loads(capsys.readouterr().out) == [{"variant": "predicted", "bound": "host"},
                                                   {"variant": "recorded", "bound": "host"}]


def test_a_jax_job_converts_beside_pytorch_jobs_in_the_nightly_flow(tmp_path, ray_local):
    make_small_drop(tmp_path / "source")
    shutil.copytree(GLOO.parent / "jax-cpu" / "mlp_dp", tmp_path / "source" / DATE / "jax-dp")
    day_folder = tmp_path / "source" / DATE
    files = {str(p.relative_to(day_folder)) for p in day_folder.rglob("*") if p.is_file()}
    warehouse = tmp_path / "wh"
    day = run_day(DATE, (tmp_path / "source").as_uri(), warehouse.as_uri(), load_sweep()[:1], synthetic_jobs=0)
    night = night_tables(day, warehouse.as_uri())
    ingest, rejects = night["ingest_log"].to_pylist(), night["rejects"].to_pylist()
    assert sorted(r["file"] for r in ingest + rejects) == sorted(files)  # every file once
    traces = night["traces"].to_pylist()
    assert {r["job_id"]: r["source_format"] for r in traces} == {"mlp": "pytorch_et", "coll": "pytorch_et",
                                                                 "jax-dp": "jax_profile"}
    assert sum(r["job_id"] == "jax-dp" for r in traces) == 4
    one_time = {}
    for r in traces:  # DDP's bucket rebuild in the first recorded step of the gloo MLP's ranks
        one_time[r["job_id"]] = one_time.get(r["job_id"], 0) + r["one_time_operators"]
    assert one_time == {"mlp": 2 * 18, "coll": 0, "jax-dp": 0}
    sims = day.tables["sim_results"].to_pylist()
    assert {r["job_id"] for r in sims if r["status"] == "ok"} == {"mlp", "coll", "jax-dp"}
    families = {r["family"] for r in night["device_time"].to_pylist() if r["job_id"] == "jax-dp"}
    assert {"gemm", "fusion", "communication"} <= families


def test_big_jobs_convert_a_task_per_rank_into_the_same_tables(tmp_path, ray_local, monkeypatch):
    """With the per-rank threshold lowered to one byte, the drop's two 2-rank PyTorch jobs convert
    a Ray task per rank (each declaring its memory), saying how far each rank got; every table
    equals the per-job path's."""
    from pipeline.nightly import bigjobs
    from pipeline.nightly.bigjobs import converts_by_rank, job_memory, memory_for, rank_bytes
    from pipeline.nightly.drop import list_day

    make_small_drop(tmp_path / "source")
    jobs = {job.job_id: job for job in list_day((tmp_path / "source").as_uri(), DATE)[0]}
    assert sorted(rank_bytes(jobs["mlp"])) == [0, 1] and not converts_by_rank(jobs["mlp"])
    assert converts_by_rank(jobs["mlp"], per_rank_bytes=1) and not converts_by_rank(jobs["broken"], per_rank_bytes=1)
    read = sum(f.bytes * (25 if f.name.endswith(".gz") else 1) for f in jobs["mlp"].files)  # gzip expands 25x
    assert any(not f.name.endswith(".gz") for f in jobs["mlp"].files) and job_memory(jobs["mlp"]) == memory_for(read)
    days, lines = {}, []
    monkeypatch.setattr(bigjobs, "PROGRESS_EVERY_S", 0)  # every bytes-read report makes a line
    for threshold in (None, 1):
        options = {} if threshold is None else {"per_rank_bytes": threshold}
        days[threshold] = run_day(DATE, (tmp_path / "source").as_uri(), (tmp_path / f"wh{threshold}").as_uri(),
                                  load_sweep()[:1], synthetic_jobs=0, log=lines.append, **options)
        assert bool(lines) == (threshold == 1)  # progress lines only where a job converts a task per rank
    assert days[None].jobs_by_rank == 0 and days[1].jobs_by_rank == 2 and days[1].jobs_converted == 2
    for job in ("mlp", "coll"):
        mine = [line for line in lines if line.startswith(job + " ") or line.startswith(job + ":")]
        assert [line for line in mine if " ranks" in line] == [
            f"{job}: converting 2 ranks, a Ray task each", f"{job}: 1 of 2 ranks converted",
            f"{job}: 2 of 2 ranks converted"]
        for rank in (0, 1):
            size = r"[0-9.]+ (Bytes|KiB|MiB)"
            started = [line for line in mine if re.fullmatch(rf"{job} rank {rank}: converting {size} of trace files",
                                                             line)]
            read = [line for line in mine if re.fullmatch(rf"{job} rank {rank}: read {size} of {size}", line)]
            ended = [line for line in mine if re.fullmatch(
                rf"{job} rank {rank}: converted {size}, [1-9][0-9,]* host nodes, [0-9,]+ device events, in [0-9.]+ s",
                line)]
            assert len(started) == len(ended) == 1 and read, mine
            assert mine.index(started[0]) < mine.index(read[0]) < mine.index(ended[0])

    nights = {threshold: night_tables(day, (tmp_path / f"wh{threshold}").as_uri()) for threshold, day in days.items()}

    def rows(night, name):
        return sorted((json.dumps({k: v for k, v in r.items() if k not in ("run_id", "path")}, sort_keys=True,
                                  default=str) for r in night[name].to_pylist()))
    for name in ("ingest_log", "rejects", "traces", "collectives", "sim_results", "device_time", "device_verdicts",
                 "job_history", "kernels", "stragglers"):
        assert rows(nights[1], name) == rows(nights[None], name), name


def test_the_nightly_logs_how_far_jobs_converted_a_task_per_rank_got(tmp_path, ray_local, caplog):
    """The progress lines reach the flow's own log (what the Prefect server keeps of the run),
    in the conversion stage's."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    from flows.nightly import nightly

    make_small_drop(tmp_path / "source")
    with caplog.at_level(logging.INFO, logger="prefect.task_runs"):  # (the tests' Prefect logs warnings only)
        state = nightly(DATE, (tmp_path / "source").as_uri(), (tmp_path / "wh").as_uri(), synthetic_jobs=0,
                        per_rank_bytes=1, return_state=True)
    assert state.result()["jobs_converted"] == 2  # mlp and coll; the drop's third job is broken
    APILogHandler().flush()  # (logs go to the server in batches)
    run = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run])))
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run])))
    tasks = {t.id: t.name for t in runs}
    stage = [log.message for log in logs if tasks.get(log.task_run_id, "").startswith("ingest, convert and statistics")]
    for job in ("mlp", "coll"):
        assert f"{job}: 2 of 2 ranks converted" in stage
        assert any(line.startswith(f"{job} rank 1: converted ") for line in stage)


def test_a_killed_worker_is_retried_and_the_day_completes(tmp_path, ray_local):
    make_small_drop(tmp_path / "source")
    marker = tmp_path / "killed-once"
    ray.shutdown()
    os.environ[FAULT_KILL_ONCE] = str(marker)  # the first job task kills its worker process
    try:
        start_ray(num_cpus=2)
        day = run_day(DATE, (tmp_path / "source").as_uri(), (tmp_path / "wh").as_uri(), load_sweep()[:1],
                      synthetic_jobs=0)
    finally:
        del os.environ[FAULT_KILL_ONCE]
        ray.shutdown()
        start_ray(num_cpus=2)
    assert marker.exists()  # a worker did die
    assert day.jobs_converted == 2 and day.ranks == 4 and len(day.files["traces"]) == 2
    assert day.tables["sim_results"].num_rows == 2


def test_a_transient_storage_error_is_retried(tmp_path, ray_local, monkeypatch):
    from flows import nightly as nightly_module

    make_small_drop(tmp_path / "source")
    real_commit, failures = tables.commit_night, []

    def flaky_commit(warehouse, date, files, run_id, committed):
        if not failures:
            failures.append(date)
            raise ConnectionResetError("connection reset by peer (injected)")
        return real_commit(warehouse, date, files, run_id, committed)

    monkeypatch.setattr(nightly_module.tables, "commit_night", flaky_commit)
    monkeypatch.setattr(nightly_module.commit_tables, "retry_delay_seconds", [0])
    summary = nightly_module.nightly(DATE, (tmp_path / "source").as_uri(), (tmp_path / "wh").as_uri())
    assert failures == [DATE]
    assert tables.read_day((tmp_path / "wh").as_uri(), "traces", DATE).num_rows == summary["ranks"] == 4


def test_an_interrupted_commit_leaves_the_previous_day_intact(tmp_path, monkeypatch):
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = (tmp_path / "wh").as_uri()
    first = tables.from_rows("rejects", [{"job_id": "a", "file": "a/x", "bytes": 1, "sha256": "0", "stage": "ingest",
                                          "reason": "r", "run_id": "1"}])
    tables.write_day(warehouse, "rejects", DATE, first)

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt("killed while committing the table")

    monkeypatch.setattr(SqlCatalog, "commit_table", interrupted)
    second = tables.from_rows("rejects", [])
    with pytest.raises(KeyboardInterrupt):
        tables.write_day(warehouse, "rejects", DATE, second)
    monkeypatch.undo()
    assert tables.read_day(warehouse, "rejects", DATE).to_pylist() == first.to_pylist()
    day_dir = tmp_path / "wh" / "tables" / "rejects" / "data" / f"date={DATE}"
    assert len(list(day_dir.iterdir())) == 1  # no temporary left; the file a commit would name
    assert pq.read_table(next(day_dir.iterdir())).num_rows == 1


def test_an_ad_hoc_sweep_over_a_processed_day(tmp_path, ray_local):
    from flows.sweep import sweep

    make_small_drop(tmp_path / "source")
    warehouse = (tmp_path / "wh").as_uri()
    day = run_day(DATE, (tmp_path / "source").as_uri(), warehouse, load_sweep()[:1], synthetic_jobs=0)
    tables.commit_night(warehouse, DATE, day.files, day.run_id)
    sweep_file = tmp_path / "mine.yaml"
    sweep_file.write_text("systems:\n  - {name: fc-native, network: native-ring, system: %s}\n"
                          % (Path(__file__).resolve().parents[1] / "pipeline" / "sweeps" / "ring_system.json"))
    result = sweep(DATE, str(sweep_file), warehouse=warehouse)
    assert result["rows"] == 2 and result["ok"] == 2
    assert f"tables/sweep_results/sweep=mine/date={DATE}/part-0-" in result["table"]
    rows = pq.read_table(result["table"].removeprefix("file://")).to_pylist()  # the run's one part
    assert {r["job_id"] for r in rows} == {"mlp", "coll"} and all(r["finish_ns"] > 0 for r in rows)


def test_a_sweep_without_a_native_ring_still_gets_reference_simulations(tmp_path, ray_local):
    make_small_drop(tmp_path / "source")
    ring8 = [spec for spec in load_sweep() if spec.name == "ring-8"]
    stages = []

    def recorded(name, step, counts):
        value = step()
        stages.append((name, counts(value)))
        return value

    day = run_day(DATE, (tmp_path / "source").as_uri(), (tmp_path / "wh").as_uri(), ring8, representatives=1,
                  synthetic_jobs=0, stage=recorded)
    systems = sorted({(r["job_id"], r["system"]) for r in day.tables["sim_results"].to_pylist()})
    assert systems == [("coll", "reference"), ("coll", "ring-8"), ("mlp", "reference"), ("mlp", "ring-8")]
    assert [r["job_id"] for r in day.tables["sim_results"].to_pylist()] == ["coll", "coll", "mlp", "mlp"]
    # no barrier: each job's simulations were submitted in the conversion stage, as the job converted
    assert [name for name, _ in stages] == ["list day", "ingest, convert and statistics (Ray)", "simulate (Ray)",
                                            "compare with history", "what each change costs the step (Ray)",
                                            "select representatives", "synthesis (Ray)"]
    assert "2 of 3 jobs converted" in stages[1][1] and "4 of their simulations started meanwhile" in stages[1][1]
    assert stages[2][1].startswith("4 simulations, ") and "finished in this stage" in stages[2][1]
    assert stages[3][1] == "0 flagged change(s) in 0 job(s)"  # a first night: nothing to compare with
    assert stages[4][1] == "0 of 0 flagged change(s) priced by simulating their job again"
    traces = night_tables(day, (tmp_path / "wh").as_uri())["traces"]
    assert [r["job_id"] for r in traces.to_pylist()] == ["coll", "coll", "mlp", "mlp"]  # job order
    chosen = day.tables["representatives"].to_pylist()
    assert [r["k"] for r in chosen] == [1, 1] and sum(r["representative"] for r in chosen) == 1
    assert all((r["weight"] > 0) == r["representative"] and r["coverage"] == pytest.approx(1 - r["estimate_error"])
               and 0.0 <= r["coverage"] < 1.0 for r in chosen)


def test_a_damaged_rank_is_rejected_with_the_same_reason_a_task_per_rank(tmp_path, ray_local):
    """Issue 47: a damaged rank's reason in `rejects` was `UnserializableException: Failed to
    deserialize exception` (or a RayTaskError with ANSI codes and source paths) when its job
    converted a Ray task per rank; it is the per-job path's reason, word for word."""
    from pipeline.nightly.drop import list_day
    from pipeline.nightly.jobs import process_job

    make_small_drop(tmp_path / "source")
    rank1 = tmp_path / "source" / DATE / "mlp" / "rank1.et.json.gz"
    gzip_bytes = rank1.read_bytes()
    import gzip as gz

    whole = gz.decompress(gzip_bytes)
    rank1.write_bytes(gz.compress(whole[: len(whole) * 2 // 3]))  # the ET cut mid-node
    job = next(j for j in list_day((tmp_path / "source").as_uri(), DATE)[0] if j.job_id == "mlp")
    reasons = {}
    for threshold in (None, 1):
        options = {} if threshold is None else {"per_rank_bytes": threshold}
        outcome = process_job(job, DATE, (tmp_path / f"wh{threshold}").as_uri(), "r", **options)
        assert outcome.by_rank == (threshold == 1) and outcome.prefix is None
        reasons[threshold] = sorted((r["file"], r["reason"]) for r in outcome.rejects)
    assert reasons[1] == reasons[None]
    culprit = dict(reasons[1])["mlp/rank1.et.json.gz"]
    assert "rank1.et.json.gz" in culprit and "\x1b" not in culprit and "Unserializable" not in culprit
