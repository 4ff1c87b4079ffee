"""Issue 50: the critical path across ranks and the stragglers with cause and cost, on the held-out
real four-rank gloo DDP recordings of datasets/pytorch-stragglers (`chakra stragglers`), and on a
hand-built job whose arithmetic is known."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys

import pyarrow as pa
import pytest

from chakra_core.analysis.stragglers import FLOOR_SHARE, job_report
from chakra_core.cli import main as chakra
from chakra_core.format.etfile import read_table
from datapaths import DATASETS

RUNS = DATASETS / "pytorch-stragglers"
HOST_STALL_NS = 30_000_000  # tools/record_stragglers.py HOST_STALL_S


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """run -> the prefix of its converted job."""
    out = {}
    for run in ("balanced", "compute", "host"):
        folder = tmp_path_factory.mktemp(run)
        assert chakra(["convert", str(RUNS / f"{run}-w4"), "-o", str(folder)]) == 0
        out[run] = str(folder / "trace")
    return out


def _report(prefix: str) -> dict:
    return job_report([read_table(f"{prefix}.{rank}.et") for rank in range(4)])


def _kineto_ns(run: str, rank: int, names: tuple[str, ...]) -> float:
    with gzip.open(RUNS / f"{run}-w4" / f"rank{rank}.kineto.json.gz") as f:
        events = json.load(f)["traceEvents"]
    return 1000 * sum(e.get("dur", 0) for e in events if e.get("name") in names)


def test_balanced_job_has_no_straggler_above_ten_percent(converted):
    report = _report(converted["balanced"])
    assert report["replay"]["replayed_step_ns"] == pytest.approx(report["replay"]["recorded_step_ns"], rel=0.02)
    assert all(row["cost_ns"] <= 0.10 * report["step_ns"] for row in report["stragglers"])


def test_extra_forward_compute_is_the_first_straggler_at_its_cost(converted):
    report = _report(converted["compute"])
    first = report["stragglers"][0]
    assert (first["rank"], first["cause"], first["family"], first["operator"]) == (2, "compute", "gemm", "aten::mm")
    # the extra time, from the raw Kineto traces: rank 2's matrix products and tanh beyond its peers'
    ops = ("aten::mm", "aten::tanh")
    extra = _kineto_ns("compute", 2, ops) - statistics.median(_kineto_ns("compute", r, ops) for r in (0, 1, 3))
    steps = len(report["steps"])
    assert 0.5 * extra / steps <= first["cost_ns"] <= 1.5 * extra / steps


def test_host_stall_is_the_first_straggler_at_its_cost(converted):
    report = _report(converted["host"])
    first = report["stragglers"][0]
    assert (first["rank"], first["cause"]) == (1, "host")
    assert 0.5 * HOST_STALL_NS <= first["cost_ns"] <= 1.5 * HOST_STALL_NS
    # the path crosses to rank 1 and most of its joins are closed by rank 1
    assert sum(step["closers"].get("1", 0) for step in report["steps"]) >= len(report["steps"]) - 1


def test_cli_json_and_bad_prefix(converted, tmp_path):
    done = subprocess.run([sys.executable, "-m", "chakra_core.cli", "stragglers", converted["host"], "--json"],
                          capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    assert {"step_ns", "stragglers", "critical_path"} <= set(report)
    costs = [row["cost_ns"] for row in report["stragglers"]]
    assert costs == sorted(costs, reverse=True) and all({"rank", "cause", "cost_ns"} <= set(r) for r in report["stragglers"])
    bad = subprocess.run([sys.executable, "-m", "chakra_core.cli", "stragglers", str(tmp_path / "none")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def _rank(ops: list[tuple[str, int, int]], collectives: list[tuple[int, int]]) -> pa.Table:
    """A rank of one step: host ops (name, start us, duration us) and all-reduces (start, duration)."""
    rows = [("ProfilerStep#1", 4, 1, 1, None)] + [(n, 4, s, d, None) for n, s, d in ops]
    rows += [("c10d::allreduce_", 7, s, d, "0") for s, d in collectives]
    return pa.table({"id": pa.array(range(len(rows)), pa.uint64()), "name": [r[0] for r in rows],
                     "type": pa.array([r[1] for r in rows], pa.int32()),
                     "start_time_micros": pa.array([r[2] for r in rows], pa.uint64()),
                     "duration_micros": pa.array([r[3] for r in rows], pa.uint64()),
                     "is_cpu_op": [r[1] == 4 for r in rows], "pg_name": [r[4] for r in rows]})


def test_hand_built_job_path_wait_split_and_cost():
    """Two ranks: forward, an all-reduce, then the host waits for it and steps. Rank 1's forward
    (aten::mm) is 400 us longer: rank 0 waits 400 us for it, the path crosses to rank 1, and the
    replay without rank 1's excess saves those 400 us."""
    fast = _rank([("aten::mm", 1, 100), ("aten::add", 700, 50)], [(101, 599)])
    slow = _rank([("aten::mm", 1, 500), ("aten::add", 700, 50)], [(501, 199)])
    report = job_report([fast, slow])
    assert report["step_ns"] == 749_000
    assert report["waits"]["0"]["waited_for"] == {1: 400_000}
    assert report["waits"]["1"]["wait_ns"] == 0 and report["waits"]["1"]["transfer_ns"] == 199_000
    parts = {(p["rank"], p["kind"]): p["ns"] for p in report["critical_path"]["parts"]}
    assert parts[(1, "compute:gemm")] == 500_000 and parts[(0, "communication")] == 199_000  # ends on rank 0 (a tie)
    assert report["steps"][0]["closers"] == {"1": 1}
    (row,) = report["stragglers"]
    assert (row["rank"], row["cause"], row["cost_ns"]) == (1, "compute", 400_000)
    assert row["share"] >= FLOOR_SHARE


SOURCES = {  # dataset run -> what it exercises
    "pytorch-gloo/collectives-w2": "ET + Kineto, gloo: every collective and p2p call, a subgroup",
    "pytorch-pipeline/pipeline_isend-w2": "ET + Kineto, sends and receives matched by pair and tag",
    "gpu-h200/mlp_gloo2": "ET + Kineto of a GPU run, device kernels in the rank's lane",
    "kineto-nccl/recsys-w128-sampled": "Kineto alone, NCCL, two sampled ranks of 128",
    "jax-cpu/mlp_dp": "a JAX profile, one trace per device",
}


@pytest.mark.parametrize("run", sorted(SOURCES))
def test_every_source_replays_its_recording_and_its_path_adds_up(run, tmp_path):
    # the Kineto-only job converts with exit 1: its two sampled ranks' buckets differ (a finding)
    assert chakra(["convert", str(DATASETS / run), "-o", str(tmp_path)]) in (0, 1)
    ranks = sorted(tmp_path.glob("trace.*.et"))
    report = job_report([read_table(str(p)) for p in sorted(ranks, key=lambda p: int(p.name.split(".")[1]))])
    assert report["steps"]
    assert report["replay"]["replayed_step_ns"] == pytest.approx(report["replay"]["recorded_step_ns"], rel=0.02)
    for step in report["steps"]:
        assert sum(part["ns"] for part in step["parts"]) == step["length_ns"] > 0
        assert all(0 <= join["closer"] < len(ranks) for join in step["joins"])


def test_simulated_timeline_beside_the_recorded_one(converted, capsys):
    assert chakra(["stragglers", converted["host"], "--simulated", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    simulated = report["simulated"]
    assert simulated["steps"] and simulated["step_ns"] > 0
    for step in simulated["steps"]:
        assert sum(part["ns"] for part in step["parts"]) == step["length_ns"]


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    """The three recordings as one day's drop, processed job by job as the nightly does (without
    Ray), their rows written and the night committed: (warehouse, date, outcomes by job)."""
    import shutil

    from pipeline import tables
    from pipeline.nightly.drop import list_day
    from pipeline.nightly.job_digest import digest
    from pipeline.nightly.jobs import process_job

    date, root = "2026-12-01", tmp_path_factory.mktemp("night")
    for run in ("balanced", "compute", "host"):
        shutil.copytree(RUNS / f"{run}-w4", root / "drop" / date / run)
    listed, _ = list_day((root / "drop").as_uri(), date)
    warehouse = (root / "warehouse").as_uri()
    outcomes = {job.job_id: process_job(job, date, warehouse, "run") for job in listed}
    files: dict = {}
    for outcome in outcomes.values():
        for table, urls in digest(outcome, warehouse, date, "run").files.items():
            files.setdefault(table, []).extend(urls)
    tables.commit_night(warehouse, date, files, "run")
    return warehouse, date, outcomes


def test_nightly_stragglers_table_shows_what_the_command_does(night):
    from pipeline import tables

    warehouse, date, outcomes = night
    rows = tables.read_day(warehouse, "stragglers", date).to_pylist()
    by_job: dict = {}
    for row in rows:
        by_job.setdefault(row["job_id"], []).append(row)
    host, compute = by_job["host"], by_job["compute"]
    assert (host[0]["rank"], host[0]["cause"]) == (1, "host") and 0.5 <= host[0]["cost_ns"] / HOST_STALL_NS <= 1.5
    assert (compute[0]["rank"], compute[0]["cause"], compute[0]["operator"]) == (2, "compute", "aten::mm")
    assert all(row["share"] <= 0.10 for row in by_job.get("balanced", []))
    for job_id, outcome in outcomes.items():  # the same figures as the command on the warehouse's traces
        report = _report(outcome.prefix)
        mine = sorted(by_job.get(job_id, []), key=lambda r: -r["cost_ns"])
        assert [(r["rank"], r["cause"], r["cost_ns"]) for r in mine] == \
            [(r["rank"], r["cause"], r["cost_ns"]) for r in report["stragglers"]]


def test_job_page_draws_the_path_and_the_nightly_rows(night, tmp_path):
    from chakra_core.viz.report import write_report
    from chakra_core.viz.pages import page_of

    warehouse, date, _ = night
    write_report(warehouse, str(tmp_path / f"date={date}"), date)
    page = (tmp_path / f"date={date}" / page_of("host")).read_text()
    section = page[page.index('id="stragglers"'):page.index('id="views"')]
    assert "critical path of host across its ranks" in section and "data:image/png;base64," in section
    cells = section[section.index("<table>"):section.index("</table>")]
    row = cells.split("<tr>")[2]  # the first straggler: rank 1, host
    assert '<td class="n">1</td><td>host</td>' in row
    balanced = (tmp_path / f"date={date}" / page_of("balanced")).read_text()
    assert "critical path of balanced across its ranks" in balanced


def test_a_flagged_step_names_the_straggler_rank_as_its_cause(night):
    """The balanced job one day, the host-stalled one the next (as one job): the critical path's
    step is flagged, its cause the rank and the part (`rank:1:host`)."""
    from chakra_core.analysis.changes import compare
    from chakra_core.analysis.history import figures

    _, _, outcomes = night

    def of(job: str) -> dict:
        o = outcomes[job]
        return figures(o.traces, o.collectives, o.device_time, o.device_verdicts, None, o.path_step_ns, o.stragglers)

    before, after = of("balanced"), of("host")
    step = next(c for c in compare(before, after) if c.metric == "path_step_ns")
    assert step.flagged and step.kind == "regression" and step.cause == "rank:1:host"
    assert 0.3 <= step.explained <= 1.2


def test_an_untimed_job_says_so(tmp_path, capsys):
    assert chakra(["generate", "transformer", "--npus", "4", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    assert chakra(["stragglers", str(tmp_path / "transformer")]) == 0
    assert "no timed steps" in capsys.readouterr().out
