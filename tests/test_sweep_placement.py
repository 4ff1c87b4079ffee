"""A sweep over placements (docs/sweeps.md, 'Placements'): the grid keys `placement` and
`copies` place copies of each job together on the point's network (sim/colocation.py); the
row gets the copy slowed most. Simulated as a sweep's Ray task does (simulate_batch), without Ray."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from chakra_core.generate.workloads import generate
from pipeline.simulation import simulate_batch
from pipeline.sweep.file import SweepError, load_sweep_file
from pipeline.sweep.jobs import SweepJob
from pipeline.sweep.table import schema

REPO = Path(__file__).resolve().parents[1]
RING_SYSTEM = REPO / "pipeline" / "sweeps" / "ring_system.json"


def _sweep(tmp_path: Path, grid: str):
    path = tmp_path / "placements.yaml"
    path.write_text(f"system: {RING_SYSTEM}\ngrid:\n{grid}")
    return load_sweep_file(str(path))


def test_placement_and_copies_are_grid_keys(tmp_path):
    sweep = _sweep(tmp_path, "  topology: [Ring]\n  npus_count: [8]\n  placement: [packed, interleaved, 'random:3']\n"
                             "  copies: [2]\n  mode: [aware]\n")
    assert [(p.placement, p.copies) for p in sweep.points] == [("packed", 2), ("interleaved", 2), ("random:3", 2)]
    assert sweep.columns == ["topology_0", "npus_count_0"]  # placement and copies are columns of every sweep
    assert len({p.key for p in sweep.points}) == 3
    alone = _sweep(tmp_path, "  topology: [Ring]\n  npus_count: [8]\n")
    assert alone.points[0].placement is None and alone.points[0].copies == 1


@pytest.mark.parametrize("values, message", [
    ("placement: [diagonal]", "grid.placement: 'diagonal': expected packed, interleaved, spread, random:SEED"),
    ("placement: [place.json]", "grid.placement: 'place.json'"),
    ("copies: [0]", "grid.copies: 0: expected a whole number of copies"),
])
def test_a_bad_placement_names_the_key(tmp_path, values, message):
    with pytest.raises(SweepError, match=message.replace("[", r"\[")):
        _sweep(tmp_path, f"  npus_count: [8]\n  {values}\n")


def test_copies_placed_apart_and_interleaved(tmp_path):
    # two copies of a 4-rank data-parallel job on Ring 8: packed, each ring stays on its own
    # half's links (slowdown exactly 1); interleaved, their rings cross the same links
    root = tmp_path / "mlp4"
    generate("mlp", 4, layers=1).write(str(root), "mlp4")
    job = SweepJob("mlp4", str(root), 4, tuple(str(root / f"mlp4.{r}.et") for r in range(4)), sha256="x")
    sweep = _sweep(tmp_path, "  topology: [Ring]\n  npus_count: [8]\n  placement: [packed, interleaved]\n"
                             "  mode: [aware]\n  active-chunks-per-dimension: [8]\n  preferred-dataset-splits: [16]\n")
    packed, interleaved = simulate_batch(job, sweep.points, {})
    assert (packed["status"], packed["slowdown"], packed["copies"]) == ("ok", 1.0, 2)
    assert packed["finish_ns"] == packed["alone_finish_ns"]
    assert interleaved["slowdown"] > 1.2 and interleaved["finish_ns"] > interleaved["alone_finish_ns"]
    table = pa.Table.from_pylist([packed, interleaved], schema=schema(sweep.columns, sweep.points))
    assert table.column("placement").to_pylist() == ["packed", "interleaved"]
    too_many = _sweep(tmp_path, "  topology: [Ring]\n  npus_count: [8]\n  copies: [3]\n")
    row = simulate_batch(job, too_many.points, {})[0]
    assert row["status"] == "not simulated" and "12 ranks in all, the network 8 NPUs" in row["error"]
