"""The fleet's memory: a job's figures (analysis/history.py), the comparison engine
(analysis/changes.py), make_drop's drift (tools/drift.py), and three nights on Ray where the
second repeats the first and the third carries two injected changes (pipeline/nightly/history.py,
`chakra diff`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from nights import run_nights

from chakra_core.analysis import changes
from chakra_core.analysis.history import figures, fingerprint, shown, unit
from chakra_core.analysis.kernels import family
from chakra_core.cli import main as chakra
from chakra_core.format.job import Job
from tools import drift
from tools import make_drop as md

REPO = Path(__file__).resolve().parents[1]
GPT = REPO / "datasets" / "gpu-h200" / "gpt"


# ------------------------------------------------------------------ the engine


def test_nothing_changed_nothing_flagged():
    same = {"step_ns": 1e8, "family_ns:gemm": 4e7, "comm_bytes:all_reduce": 1e9, "ranks": 2.0}
    assert changes.flagged(changes.compare(same, dict(same))) == []


def test_a_slower_family_is_flagged_and_explains_the_step():
    before = {"step_ns": 100e6, "family_ns:gemm": 40e6, "family_ns:elementwise": 20e6, "idle_ns:host_launch": 40e6}
    after = {**before, "step_ns": 116e6, "family_ns:gemm": 56e6}
    found = {c.metric: c for c in changes.flagged(changes.compare(before, after))}
    assert set(found) == {"step_ns", "family_ns:gemm"}
    assert found["step_ns"].cause == "family:gemm" and found["step_ns"].explained == pytest.approx(1.0)
    assert found["family_ns:gemm"].change == pytest.approx(0.4) and found["family_ns:gemm"].kind == "regression"


def test_the_floor_holds_without_history_and_the_jobs_own_noise_with_it():
    before, after = {"step_ns": 100.0}, {"step_ns": 108.0}
    assert changes.flagged(changes.compare(before, after))  # +8% > the 5% floor
    noisy = [{"step_ns": v} for v in (100.0, 104.0, 99.0, 103.0, 100.0)]  # about 4% a day
    found = changes.compare(before, after, noisy)
    assert not changes.flagged(found) and found[0].noise == pytest.approx(0.04, abs=0.01)
    assert changes.flagged(changes.compare(before, {"step_ns": 130.0}, noisy))  # beyond 4 x the noise


def test_improvements_are_recorded_as_such_and_busy_share_is_never_news():
    found = changes.flagged(changes.compare({"step_ns": 100.0, "busy_share": 0.5},
                                            {"step_ns": 80.0, "busy_share": 0.9}))
    assert [(c.metric, c.kind) for c in found] == [("step_ns", "improvement")]


def test_a_tiny_part_doubling_is_no_news_but_a_host_bound_jobs_gemm_is():
    before = {"step_ns": 100e6, "family_ns:gemm": 60e6, "family_ns:memset": 0.5e6}
    after = {**before, "family_ns:memset": 1.0e6}
    assert changes.flagged(changes.compare(before, after)) == []
    # the device works 1 ms of a 30 ms step: its GEMMs 40% slower are news all the same
    host_bound = {"step_ns": 30e6, "family_ns:gemm": 0.5e6, "family_ns:elementwise": 0.5e6}
    found = changes.flagged(changes.compare(host_bound, {**host_bound, "family_ns:gemm": 0.7e6}))
    assert [c.cause for c in found] == ["family:gemm"]


def test_doubled_bytes_name_communication_bytes():
    before = {"sim_finish_ns": 10e6, "sim_compute_ns": 7e6, "sim_exposed_comm_ns": 3e6, "comm_bytes:all_reduce": 1e9,
              "comm_bytes:broadcast": 1e3}
    after = {**before, "sim_finish_ns": 14e6, "sim_exposed_comm_ns": 7e6, "comm_bytes:all_reduce": 2e9}
    found = {c.metric: c for c in changes.flagged(changes.compare(before, after))}
    assert set(found) == {"sim_finish_ns", "comm_bytes:all_reduce"}
    assert found["sim_finish_ns"].cause == "comm_bytes:all_reduce"
    again = {c.metric: c for c in changes.compare(before, after, program_changed=True)}
    assert again["sim_finish_ns"].cause == "program"


def test_units_and_how_values_are_shown():
    assert [unit(m) for m in ("step_ns", "comm_bytes:x", "busy_share", "ranks")] == ["ns", "bytes", "share", "count"]
    assert shown("step_ns", 12_345_678) == "12.346 ms" and shown("busy_share", 0.25) == "25.0%"
    assert shown("comm_bytes:all_reduce", 2**21) == "2.00 MiB"


def test_figures_are_per_step_and_per_rank_means():
    verdicts = [{"rank": r, "variant": "recorded", "steps": 2, "span_ns": 200, "busy_share": 0.5,
                 **{f"idle_{c}_ns": 40 for c in ("host_launch", "synchronisation", "communication", "other")}}
                for r in (0, 1)]
    times = [{"rank": r, "variant": "recorded", "family": "gemm", "ns": 100} for r in (0, 1)]
    traces = [{"nodes": 5, "compute_micros": 3, "npu_compute_micros": 1, "compute_by_class": {"gemm": [1, 2]}}] * 2
    got = figures(traces, pa.table({"kind": ["all_reduce"] * 3, "comm_size": [1, 2, 3]}), times, verdicts, None)
    # idle by cause is per rank and step, so no cause can exceed the step it is part of
    assert got["step_ns"] == 100 and got["idle_ns:communication"] == 20 and got["family_ns:gemm"] == 50
    assert got["comm_bytes:all_reduce"] == 6 and got["comm_count:all_reduce"] == 3
    assert got["ranks"] == 2 and got["nodes"] == 10 and got["host_ns"] == 2000


def test_the_fingerprint_follows_the_program_not_its_times():
    job = md.generate_job(0)
    slower = drift.drifted_tables(job.tables, 1.3)
    assert fingerprint(job.tables) == fingerprint(slower)
    other = md.generate_job(1)
    assert fingerprint(job.tables) != fingerprint(other.tables)
    steps = pa.table({"type": [4, 4], "name": ["ProfilerStep#3", "aten::mm"]})
    assert fingerprint([steps]) == fingerprint([steps.set_column(1, "name", pa.array(["ProfilerStep#9",
                                                                                         "aten::mm"]))])


# ------------------------------------------------------------------ the drift of make_drop's days


def test_days_drift_within_noise_and_a_wednesday_injects_the_regression(tmp_path):
    assert drift.is_regression_day("2026-11-25") and not drift.is_regression_day("2026-11-24")
    assert drift.demo_days("2026-11-27") == ("2026-11-24", "2026-11-25")
    assert all(abs(drift.factor(f"2026-11-{d:02d}", "gpu-gpt") - 1) <= drift.DRIFT for d in range(1, 29))
    kineto = (GPT / "rank0.kineto.json.gz").read_bytes()
    events = orjson.loads(gzip.decompress(kineto))["traceEvents"]
    slower = orjson.loads(gzip.decompress(drift.drifted_kineto(kineto, 1.0, 1.4)))["traceEvents"]
    gemm = [(a["dur"], b["dur"]) for a, b in zip(events, slower)
            if a.get("cat") == "kernel" and family(a["name"]) == "gemm"]
    rest = [(a.get("dur"), b.get("dur")) for a, b in zip(events, slower)
            if not (a.get("cat") == "kernel" and family(a["name"]) == "gemm")]
    assert gemm and all(b == pytest.approx(a * 1.4, abs=1e-3) for a, b in gemm)
    assert all(a == b or a == pytest.approx(b, abs=1e-3) for a, b in rest)
    md.make_drop(str(tmp_path), "2026-11-24", generated_jobs=1, copies_of_real=0, corrupt=False)
    md.make_drop(str(tmp_path), "2026-11-25", generated_jobs=1, copies_of_real=0, corrupt=False)
    days = [Job.read(str(tmp_path / d / "gen-dp-000-n8" / "gen-dp-000-n8")) for d in ("2026-11-24", "2026-11-25")]
    sizes = [sum(t.column("comm_size").fill_null(0).to_numpy().sum() for t in j.tables) for j in days]
    assert sizes[1] > 1.9 * sizes[0] and fingerprint(days[0].tables) == fingerprint(days[1].tables)


# ------------------------------------------------------------------ three nights on Ray


def _drop_day(root: Path, date: str, inject: bool) -> None:
    """gpu-gpt and gen-dp-000-n8, as recorded (no drift); `inject`: the two changes."""
    md.make_drop(str(root), date, generated_jobs=1, copies_of_real=0, corrupt=False, drift=False)
    job = root / date / "gpu-gpt"
    job.mkdir()
    for f in GPT.iterdir():
        data = f.read_bytes()
        if inject and f.name.endswith(".kineto.json.gz"):
            data = drift.drifted_kineto(data, 1.0, 1.4)
        (job / f.name).write_bytes(data)
    if inject:
        folder = root / date / "gen-dp-000-n8"
        original = Job.read(str(folder / "gen-dp-000-n8"))
        Job(drift.drifted_tables(original.tables, 1.0, 2), name="gen-dp-000-n8").write(str(folder))


@pytest.fixture(scope="module")
def three_nights(tmp_path_factory):
    days = {"2026-11-23": False, "2026-11-24": False, "2026-11-25": True}
    return run_nights(tmp_path_factory.mktemp("history"), days, _drop_day)


@pytest.mark.slow
def test_a_repeated_day_flags_nothing_and_the_injected_one_exactly_its_two_jobs(three_nights):
    from pipeline import tables

    warehouse, _, nights = three_nights
    assert nights["2026-11-23"].tables["regressions"].num_rows == 0
    assert nights["2026-11-24"].tables["regressions"].num_rows == 0
    flagged = nights["2026-11-25"].tables["regressions"].to_pylist()
    assert {r["job_id"] for r in flagged} == {"gpu-gpt", "gen-dp-000-n8"}
    causes = {(r["job_id"], r["cause"]) for r in flagged}
    assert ("gpu-gpt", "family:gemm") in causes and ("gen-dp-000-n8", "comm_bytes:all_reduce") in causes
    # one change, one cause: the GEMMs are not also an operator class "other" (issue 49's phantom)
    assert not [r for r in flagged if r["job_id"] == "gpu-gpt" and r["cause"] != "family:gemm"], flagged
    gemm = next(r for r in flagged if r["metric"] == "family_ns:gemm")
    assert gemm["change"] == pytest.approx(0.4, abs=0.02) and gemm["kind"] == "regression"
    assert all(str(r["baseline_date"]) == "2026-11-24" and r["history_days"] == 2 for r in flagged)
    history = nights["2026-11-25"].tables["job_history"].to_pylist()
    assert {r["job_id"] for r in history} == {"gpu-gpt", "gen-dp-000-n8"}
    kernels = tables.read_day(warehouse.as_uri(), "kernels", "2026-11-25").to_pylist()
    assert kernels and all(r["job_id"] == "gpu-gpt" and r["count"] > 0 for r in kernels)


@pytest.mark.slow
def test_chakra_diff_of_two_versions_names_the_gemm_family(three_nights, capsys):
    warehouse, _, _ = three_nights
    traces = warehouse / "traces"
    prefixes = [str(traces / f"date={d}" / "job=gpu-gpt" / "gpu-gpt") for d in ("2026-11-24", "2026-11-25")]
    assert chakra(["diff", *prefixes, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    top = result["changes"][0]
    assert top["metric"] == "family_ns:gemm" and top["flagged"] and top["change"] == pytest.approx(0.4, abs=0.02)
    assert not result["program_changed"]
    assert {k["family"] for k in result["kernels"] if k["status"] == "changed"} >= {"gemm"}
    assert chakra(["diff", "--warehouse", str(warehouse), "--job", "gen-dp-000-n8", "--date", "2026-11-25",
                   "--against", "2026-11-24"]) == 0
    out = capsys.readouterr().out
    assert "comm_bytes:all_reduce" in out and "+100.0%" in out
    assert chakra(["diff", "--warehouse", str(warehouse), "--job", "nope", "--date", "2026-11-25",
                   "--against", "2026-11-24"]) == 2
    assert "no job 'nope' in the warehouse (its jobs: gen-dp-000-n8, gpu-gpt)" in capsys.readouterr().err


def test_chakra_diff_needs_two_sides(capsys):
    assert chakra(["diff", "only-one"]) == 2
    assert "two job prefixes" in capsys.readouterr().err



@pytest.mark.slow
def test_each_flagged_change_says_what_it_costs_the_step(three_nights):
    """Issue 49: gpu-gpt is host-bound, so its GEMMs 40% slower cost its predicted step nothing,
    and the row says so; gen-dp-000-n8's doubled all-reduce bytes lengthen its simulated finish."""
    _, _, nights = three_nights
    flagged = nights["2026-11-25"].tables["regressions"].to_pylist()
    gemm = next(r for r in flagged if r["metric"] == "family_ns:gemm")
    assert gemm["impact_basis"] == "predicted_step_ns" and abs(gemm["step_impact"]) < 0.01
    assert gemm["impact_note"].startswith("no effect on the step")
    doubled = next(r for r in flagged if r["metric"] == "comm_bytes:all_reduce")
    assert doubled["impact_basis"] == "sim_finish_ns" and 0.02 < doubled["step_impact"] <= 1.0
    assert doubled["step_impact_ns"] > 0 and doubled["impact_note"] == f"{doubled['step_impact']:+.1%} of the step"
    for job in ("gpu-gpt", "gen-dp-000-n8"):  # each job's rows by impact, largest first
        impacts = [abs(r["step_impact"] or 0) for r in flagged if r["job_id"] == job]
        assert impacts == sorted(impacts, reverse=True)


def test_a_figure_beyond_its_threshold_that_is_not_flagged_says_why():
    """Issue 49: the busy share was labelled 'improvement' when slower kernels raised it, and
    sim_compute_ns +12.9% against a 5% threshold was shown unflagged with no reason."""
    found = {c.metric: c for c in changes.compare(
        {"sim_finish_ns": 100.0, "sim_compute_ns": 50.0, "busy_share": 0.5, "family_ns:gemm": 10.0,
         "family_ns:other": 1000.0, "class_ns:gemm": 10.0},
        {"sim_finish_ns": 113.0, "sim_compute_ns": 63.0, "busy_share": 0.6, "family_ns:gemm": 19.0,
         "family_ns:other": 1000.0, "class_ns:gemm": 19.0})}
    assert found["busy_share"].kind == "changed" and not found["busy_share"].flagged
    assert found["sim_compute_ns"].why_not == "it only explains other figures (never news alone)"
    assert found["family_ns:gemm"].why_not == "it moved less than 2% of what it is part of"
