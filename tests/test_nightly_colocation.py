"""The nightly's placement what-if (pipeline/nightly/colocation.py, `--colocate`): the day's jobs
placed together on a cluster network, the `colocation` table and the day page's section. With
the real parts: Ray local, the small gloo drop of test_pipeline.py, the committed warehouse."""

from __future__ import annotations

import html
import json

import pytest
from test_pipeline import DATE, make_small_drop, ray_local  # noqa: F401  (the fixture)

from chakra_core.generate.workloads import generate
from chakra_core.viz.report import write_report
from pipeline.nightly.colocation import ColocationPlan, colocation_rows
from pipeline.nightly.run import run_day
from pipeline.simulation import load_sweep
from table_rows import night_tables

RING8 = "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"


@pytest.mark.slow
def test_a_night_places_its_jobs_together_into_the_table_and_the_page(tmp_path, ray_local):  # noqa: F811
    make_small_drop(tmp_path / "source")
    network = tmp_path / "cluster.yml"
    network.write_text(RING8)
    warehouse = (tmp_path / "wh").as_uri()
    plan = ColocationPlan(str(network), "interleaved", ("mlp", "coll"))
    day = run_day(DATE, (tmp_path / "source").as_uri(), warehouse, load_sweep()[:1], synthetic_jobs=0,
                  colocation=plan)
    rows = night_tables(day, warehouse)["colocation"].to_pylist()
    assert [(r["job_id"], r["ranks"], json.loads(r["npus"]), r["status"]) for r in rows] == \
        [("mlp", 2, [0, 2], "ok"), ("coll", 2, [1, 3], "ok")]
    for r in rows:
        assert r["slowdown"] == pytest.approx(r["finish_ns"] / r["alone_finish_ns"]) and r["slowdown"] >= 1.0
        assert (r["placement"], r["mode"], r["run_id"]) == ("interleaved", "aware", day.run_id)
    page = html.unescape(open(write_report(warehouse, str(tmp_path / "report"), DATE)).read())
    section = page.split('id="colocation"', 1)[1].split("<h2", 1)[0]
    assert "2 job(s) placed interleaved on" in section and "mlp" in section and "coll" in section


def test_rows_say_why_jobs_were_not_placed(tmp_path):
    generate("mlp", 4, layers=1).write(str(tmp_path / "a"), "a")
    network = tmp_path / "ring4.yml"
    network.write_text(RING8.replace("8", "4"))
    converted = {"a": (str(tmp_path / "a" / "a"), 4, None), "b": (str(tmp_path / "a" / "a"), 4, None)}
    plan = ColocationPlan(str(network), "packed")
    assert {r["status"] for r in colocation_rows(plan, converted, ["a", "gone"], "r")} == \
        {"not placed: gone did not convert today"}
    too_big = colocation_rows(plan, converted, ["a", "b"], "r")
    assert {r["status"] for r in too_big} == {"not placed: placement packed: the jobs have 8 ranks in all, "
                                              "the network 4 NPUs"}
    alone = colocation_rows(plan, converted, ["a"], "r")
    assert (alone[0]["slowdown"], alone[0]["status"]) == (1.0, "ok")  # alone: as alone, behind none but itself
    assert {b["job"] for b in json.loads(alone[0]["behind"])} <= {"a"}
