"""Issue 49's "done when" for impact: held-out fleet days with injected changes. Each injected
change is flagged once, with one cause, and with a step_impact between +2% and the change
itself; a day that repeats the day before flags nothing.

The jobs are held out from the demo (./run.sh drops gpu-gpt and gen-dp-000-n8): an H200 ResNet-50
run at batch 128 (device-bound enough that slower convolutions cost the step) whose convolution
kernels run 40% longer, and a 16-rank data-parallel job generated from another seed whose
all-reduces move twice the bytes.
"""

from __future__ import annotations

import shutil

import pytest
from datapaths import DATASETS
from nights import run_nights

from chakra_core.format.job import Job
from tools import drift
from tools.make_drop import generate_job

RESNET = DATASETS / "gpu-h200-more" / "resnet50-b128"
DAYS = {"2026-10-05": False, "2026-10-06": False, "2026-10-07": True}
INJECTED = {"gpu-resnet50": ("family_ns:convolution", "family:convolution", 0.4),
            "gen-dp-held-out": ("comm_bytes:all_reduce", "comm_bytes:all_reduce", 1.0)}


def _drop_day(root, date: str, inject: bool) -> None:
    day = root / date
    resnet = day / "gpu-resnet50"
    resnet.mkdir(parents=True)
    for f in RESNET.iterdir():
        data = f.read_bytes()
        if inject and f.name.endswith(".kineto.json.gz"):
            data = drift.drifted_kineto(data, 1.0, 1.4, slowed="convolution")
        (resnet / f.name).write_bytes(data)
    job = generate_job(5, seed=7)  # data parallel, 16 ranks, another seed than the demo's
    tables = drift.drifted_tables(job.tables, 1.0, 2) if inject else job.tables
    Job(tables, name="gen-dp-held-out").write(str(day / "gen-dp-held-out"))


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """date -> the night's regressions rows."""
    _, source, done = run_nights(tmp_path_factory.mktemp("impact"), DAYS, _drop_day)
    shutil.rmtree(source, ignore_errors=True)
    return {date: day.tables["regressions"].to_pylist() for date, day in done.items()}


@pytest.mark.slow
def test_a_repeated_day_flags_nothing(nights):
    assert nights["2026-10-06"] == []


@pytest.mark.slow
@pytest.mark.parametrize("job", sorted(INJECTED))
def test_each_injected_change_is_flagged_once_with_one_cause_and_its_cost(nights, job):
    metric, cause, size = INJECTED[job]
    rows = [r for r in nights["2026-10-07"] if r["job_id"] == job]
    assert {r["cause"] for r in rows} == {cause}, rows  # one cause, no phantom beside it
    assert [r["metric"] for r in rows].count(metric) == 1
    part = next(r for r in rows if r["metric"] == metric)
    assert part["change"] == pytest.approx(size, rel=0.1)
    for row in rows:  # the headline it explains carries the same cost
        assert 0.02 <= row["step_impact"] <= part["change"], row
        assert row["step_impact_ns"] > 0 and row["impact_note"] == f"{row['step_impact']:+.1%} of the step"


def test_setting_a_part_back_scales_only_its_nodes_and_keeps_nulls():
    import pyarrow as pa

    from chakra_core.analysis.impact import reverted
    from chakra_core.format.nodetypes import COMP

    table = pa.table({"id": pa.array([1, 2, 3], pa.uint64()), "name": ["ampere_sgemm_128x64", "elementwise_kernel",
                                                                       "ampere_sgemm_64x64"],
                      "type": pa.array([COMP] * 3, pa.int32()), "is_cpu_op": [False] * 3,
                      "stream": pa.array([7, 7, 7], pa.int64()),
                      "duration_micros": pa.array([14, 10, 7], pa.uint64()),
                      "duration_ns": pa.array([14_000, None, None], pa.int64())})
    back = reverted([table], "family_ns:gemm", 0.5)[0]
    assert back.column("duration_micros").to_pylist() == [7, 10, 4]  # (3.5 rounds to even)
    assert back.column("duration_ns").to_pylist() == [7_000, None, None]
