"""A recording repeated K times (bigtrace.py, what benchmarks/bench_big_convert.py measures)
converts consistently: K times the nodes of one recording, less what a recording has once, and
the same .et whether the Kineto events are digested in C or parsed whole (the reading the
digest leaves odd events and invalid batches to)."""

from __future__ import annotations

import pytest

import bigtrace
from datapaths import DATASETS
from kineto_parsed import NoKinetoDigest

from chakra_core.convert.pytorch import kineto as kineto_module
from chakra_core.convert.sources import convert_source

RUN = DATASETS / "gpu-h200" / "mlp_gloo2"  # two ranks' worth of runs: rank 0's ET and Kineto


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    return {k: (root / f"k{k}", bigtrace.make(RUN, root / f"k{k}", k)) for k in (1, 2)}


def test_k_repeats_convert_to_k_times_the_nodes(repeated, tmp_path):
    nodes = {k: convert_source(str(src), str(tmp_path / f"k{k}"), "t").nodes for k, (src, _) in repeated.items()}
    made = repeated[2][1]
    assert made.once_out == 1 and nodes[1] > 500
    assert nodes[2] == made.expected_nodes(nodes[1])


@pytest.mark.parametrize("kineto_alone", [False, True])
def test_a_repeated_trace_converts_the_same_digested_or_parsed(repeated, tmp_path, monkeypatch, kineto_alone):
    src = repeated[2][0]
    if kineto_alone:
        bigtrace.kineto_only(src, tmp_path / "alone")
        src = tmp_path / "alone"
    outputs = []
    for name, module in (("digested", kineto_module._kinetodigest), ("parsed", NoKinetoDigest)):
        monkeypatch.setattr(kineto_module, "_kinetodigest", module)
        convert_source(str(src), str(tmp_path / name), "t")
        outputs.append((tmp_path / name / "t.0.et").read_bytes())
    assert outputs[0] == outputs[1]
