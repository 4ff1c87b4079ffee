"""Whether a trace's recorded steps repeat one another (chakra_core.analysis.step_work): hand-built
tables with known answers, random ones against a plain count, and the DDP recordings whose first
recorded step holds the bucket rebuild (chakra stats, chakra calibrate)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pyarrow as pa
import pytest
from datapaths import DATASETS

from chakra_core.analysis import step_work
from chakra_core.analysis.facade import JobAnalysis
from chakra_core.cli import main
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.convert.sources import convert_source

COMP, COLL = 4, 7


def _table(nodes: list[tuple]) -> pa.Table:
    """(name, start_us, duration_us[, is_cpu_op[, type]]) per node, ids in order."""
    rows = [{"id": i, "name": n[0], "start_time_micros": n[1], "duration_micros": n[2],
             "is_cpu_op": n[3] if len(n) > 3 else True, "type": n[4] if len(n) > 4 else COMP}
            for i, n in enumerate(nodes)]
    return pa.Table.from_pylist(rows)


def test_a_step_holding_work_the_others_do_not():
    table = _table([
        ("setup", 50, 5),                                  # before the first step: in none
        ("ProfilerStep#1", 100, 90), ("a", 101, 3), ("a", 110, 3), ("a", 120, 3), ("b", 130, 4),
        ("c", 140, 1), ("c", 150, 1), ("kernel", 151, 9, False), ("allreduce", 160, 9, True, COLL),
        ("host after step 1", 180, 20),                    # a JAX profile's host gaps: no operators
        ("ProfilerStep#2", 200, 90), ("launch a", 200, 1), ("a", 201, 3), ("a", 210, 3), ("b", 230, 4), ("d", 240, 2),
        ("untimed", 0, 7),
    ])
    steps = step_work.step_table(table)
    assert steps.schema == step_work.STEP_SCHEMA
    assert steps.to_pylist() == [
        {"step": "ProfilerStep#1", "operators": 6, "host_us": 15, "one_time_operators": 3,
         "one_time": [{"name": "c", "count": 2}, {"name": "a", "count": 1}]},
        {"step": "ProfilerStep#2", "operators": 4, "host_us": 12, "one_time_operators": 1,
         "one_time": [{"name": "d", "count": 1}]}]
    note = step_work.note("t.0.et", steps)
    assert note.startswith("t.0.et: the recorded steps are not one step repeated: ProfilerStep#1 holds 3 operator(s) "
                           "beyond every other (c ×2, a ×1; +25% recorded host time against the others); "
                           "ProfilerStep#2 holds 1 operator(s) beyond every other (d ×1; -20% ")
    assert "a predicted step time counts it in every step" in note


def test_alike_steps_one_step_and_no_steps_say_nothing():
    alike = _table([("ProfilerStep#1", 100, 50), ("a", 101, 3), ("b", 102, 3),
                    ("ProfilerStep#2", 200, 50), ("b", 201, 4), ("a", 202, 4)])
    assert [r["one_time_operators"] for r in step_work.step_table(alike).to_pylist()] == [0, 0]
    assert step_work.note("t", step_work.step_table(alike)) is None
    one = step_work.step_table(_table([("ProfilerStep#7", 100, 50), ("a", 101, 3)]))
    assert one.to_pylist() == [{"step": "ProfilerStep#7", "operators": 1, "host_us": 3, "one_time_operators": 0,
                                "one_time": []}]
    none = step_work.step_table(_table([("a", 101, 3)]))
    assert none.num_rows == 0 and none.schema == step_work.STEP_SCHEMA and step_work.note("t", none) is None


def test_a_note_names_at_most_three_steps():
    nodes = [n for k in range(5) for n in ((f"ProfilerStep#{k}", 100 * (k + 1), 50), (f"only{k}", 100 * (k + 1) + 1, 2))]
    note = step_work.note("t", step_work.step_table(_table(nodes)))
    assert note.count("beyond every other") == 3 and "ProfilerStep#2 holds 1 operator(s)" in note
    assert "; and 2 other step(s). " in note


@pytest.mark.parametrize("seed", range(20))
def test_work_beyond_every_other_step_matches_a_plain_count(seed):
    rng = random.Random(seed)
    steps = rng.randint(1, 6)
    nodes = [(f"ProfilerStep#{k}", 1000 * (k + 1), 10) for k in range(steps)]
    nodes += [(f"op{rng.randint(0, 8)}", 1000 * rng.randint(1, steps) + rng.randint(1, 999), 1)
              for _ in range(rng.randint(0, 80))]
    rng.shuffle(nodes)  # file order is not time order
    counts = [Counter(name for name, start, _ in nodes if not name.startswith("Profiler") and start // 1000 == k + 1)
              for k in range(steps)]
    expected = []
    for k, own in enumerate(counts):
        others = Counter()
        for j, c in enumerate(counts):
            if j != k:
                others |= c  # per name, the largest count of any other step
        expected.append(dict(own - others) if steps > 1 else {})
    found = step_work.step_table(_table(nodes)).to_pylist()
    assert [{x["name"]: x["count"] for x in row["one_time"]} for row in found] == expected
    assert [row["operators"] for row in found] == [sum(c.values()) for c in counts]
    for row in found:
        assert [x["count"] for x in row["one_time"]] == sorted((x["count"] for x in row["one_time"]), reverse=True)


def test_a_jax_profiles_steps_are_alike(tmp_path):
    """Its host nodes are gaps between the device's ops (which a step holds depends on timing)."""
    convert_source(str(DATASETS / "jax-cpu" / "mlp_dp"), str(tmp_path), "job")
    steps = JobAnalysis.from_files(str(tmp_path / "job"), prediction_file=None).recorded_steps()
    assert steps.num_rows == 8 and set(steps.column("step").to_pylist()) == {"ProfilerStep#0", "ProfilerStep#1"}
    assert sum(steps.column("one_time_operators").to_pylist()) == 0


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory) -> str:
    """The H200 DDP run recorded from DDP's second iteration, when it rebuilds its buckets."""
    out = tmp_path_factory.mktemp("ddp")
    convert_job(str(DATASETS / "gpu-h200-heldout" / "mlp_ddp-cuda-w1"), str(out), "job")
    return str(out / "job")


def test_the_ddp_bucket_rebuild_shows_in_the_first_recorded_step(ddp_job):
    steps = JobAnalysis.from_files(ddp_job, prediction_file=None).recorded_steps().to_pylist()
    assert [(r["rank"], r["step"]) for r in steps] == [(0, "ProfilerStep#1"), (0, "ProfilerStep#2")]
    first, second = steps
    held = {x["name"]: x["count"] for x in first["one_time"]}
    assert held["record_param_comms"] == 2 and held["aten::as_strided"] == 8  # the broadcast, the new buckets' views
    assert first["operators"] == second["operators"] + first["one_time_operators"] and not second["one_time"]


def test_stats_and_calibrate_say_the_steps_are_not_alike(ddp_job, tmp_path, capsys):
    assert main(["stats", f"{ddp_job}.0.et", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["traces"][0]["recorded_steps"][0]["one_time_operators"] == 20
    assert f"{ddp_job}.0.et: the recorded steps are not one step repeated: ProfilerStep#1 holds 20 operator(s)" in err
    assert main(["calibrate", ddp_job, "--npus", "1", "-o", str(tmp_path / "cal"), "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert "ProfilerStep#1 holds 20 operator(s)" in fitted["host_overhead"]["jobs"][0]["steps_note"]
    assert main(["stats", str(DATASETS / "astra-sim-microbenchmarks" / "all_reduce" / "4npus_1MB" / "all_reduce.0.et")]) == 0
    assert "not one step repeated" not in capsys.readouterr().err
