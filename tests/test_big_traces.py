"""Big traces read in batches, only the columns a question reads, give the figures a whole-file
reading gives: `chakra stats` (statistics and the device analysis, its prediction included) and
`chakra simulate`, on the shipped gpt run repeated into a longer trace (tests/repeated_trace.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from chakra_core.analysis.facade import JobAnalysis, read_columns, read_trace
from chakra_core.analysis.predicted import PREDICTION_SYSTEM, prediction_system
from chakra_core.cli import main
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.format.etfile import read_table
from chakra_core.format.job import Job
from chakra_core.sim.config import load_network, load_system
from chakra_core.sim.engine import simulate
from chakra_core.sim.files import simulate_files
from repeated_trace import repeat_trace

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
SYSTEM = str(DATASETS / "astra-sim-reference" / "configs" / "Ring_4chunks.json")
COPIES = 2


@pytest.fixture(scope="module")
def repeated(tmp_path_factory) -> str:
    """The gpt run converted and repeated COPIES times: the prefix of its one rank file."""
    out = tmp_path_factory.mktemp("big")
    convert_job(str(DATASETS / "gpu-h200" / "gpt"), str(out), "gpt")
    nodes = repeat_trace(str(out / "gpt.0.et"), str(out / "big.0.et"), COPIES)
    assert nodes == COPIES * read_table(str(out / "gpt.0.et")).num_rows
    assert len(set(read_table(str(out / "big.0.et")).column("id").to_pylist())) == nodes  # no id twice
    (out / "ring_1npu.yml").write_text("topology: [ Ring ]\nnpus_count: [ 1 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return str(out / "big")


def _figures(table, system: str | None = PREDICTION_SYSTEM) -> dict:
    analysis = JobAnalysis(Job([table], {}, "big"), "big", system)
    return {"traces": analysis.trace_rows(), "collectives": analysis.collectives().to_pylist(),
            "summary": analysis.summary_figures(), "gpu": analysis.gpu(),
            "steps": analysis.device_steps("predicted").to_pylist()}


def test_the_repeated_trace_is_one_consistent_longer_run(repeated):
    figures = _figures(read_table(f"{repeated}.0.et"))
    gpu = figures["gpu"][0]
    assert figures["traces"][0]["missing_parents"] == 0 and figures["traces"][0]["cycle_edges_set_aside"] == 0
    assert len(gpu["steps"]) == len(set(gpu["steps"])) and len(gpu["steps"]) % COPIES == 0  # steps renumbered
    assert gpu["predicted"] is not None


@pytest.mark.parametrize("system", [PREDICTION_SYSTEM, SYSTEM])
def test_stats_of_the_columns_read_in_batches_equal_the_whole_file(repeated, system):
    whole = read_table(f"{repeated}.0.et")
    columns = read_columns(prediction_system(system)[0])
    projected = read_trace(f"{repeated}.0.et", prediction_system(system)[0])
    assert projected.column_names == list(columns) and len(columns) < len(whole.column_names)
    assert projected.column("inputs").null_count > 0.9 * projected.num_rows  # kept for metadata nodes only
    assert pa.types.is_dictionary(projected.schema.field("name").type)  # a position per node, not a string
    assert projected.column("name").nbytes < whole.column("name").nbytes / 4
    assert _figures(projected, system) == _figures(whole, system)


def test_chakra_stats_prints_what_the_whole_file_gives(repeated, capsys):
    assert main(["stats", "--json", f"{repeated}.0.et"]) == 0
    printed = json.loads(capsys.readouterr().out)["traces"][0]
    whole = _figures(read_table(f"{repeated}.0.et"))
    row = {k: v for k, v in whole["traces"][0].items() if k != "rank"}
    assert {k: printed[k] for k in row} == row
    assert json.loads(json.dumps(whole["gpu"][0])) == printed["gpu"]


def test_simulate_reading_its_columns_equals_the_whole_file(repeated):
    network, system = load_network(str(Path(repeated).parent / "ring_1npu.yml")), load_system(SYSTEM)
    whole = simulate(Job([read_table(f"{repeated}.0.et")]), network, system)
    files, _ = simulate_files(repeated, str(Path(repeated).parent / "ring_1npu.yml"), SYSTEM)
    assert [n.to_dict() for n in files.npus] == [n.to_dict() for n in whole.npus]
    assert [n.critical_path for n in files.npus] == [n.critical_path for n in whole.npus]
    assert files.npus[0].critical_path  # a GPU job: the walk over the completions ran
