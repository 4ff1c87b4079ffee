"""ASTRA-sim 1.0 text workloads to Chakra (issue 30): per NPU the collectives (type and size) each
policy issues, on its process groups, so that the two HYBRID orders differ; NONE is no
collective; compute cycles kept or turned into microseconds; every job simulates to its end on
a ring of its NPU count; hostile files refused on one line naming the file and the line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from flexflow_graphs import TEXT

from chakra_core.cli import main
from chakra_core.convert.sources import SourceOptions, detect_format
from chakra_core.convert.text.workload import convert_workload
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COLL, COMP
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.sim.config import NetworkConfig, NetworkDim, load_system
from chakra_core.sim.engine import simulate

SYSTEM = Path(__file__).resolve().parents[1] / "pipeline" / "sweeps" / "ring_system.json"
NAMES = {"ALLREDUCE": "ALL_REDUCE", "ALLGATHER": "ALL_GATHER", "REDUCESCATTER": "REDUCE_SCATTER",
         "ALLTOALL": "ALL_TO_ALL"}
MLP = (TEXT / "MLP_HybridParallel_Data_Model.txt").read_text()
TRANSFORMER = """HYBRID_TRANSFORMER model_parallel_NPU_group: 4
3
embed -1 300 ALLGATHER 8192 100 NONE 0 100 NONE 0 10
attn -1 3000 ALLREDUCE 4096 2000 ALLREDUCE 4096 2200 ALLREDUCE 65536 10
mlp -1 6000 NONE 0 4000 ALLREDUCE 8192 4400 ALLREDUCE 131072 10
"""
CUSTOMIZED = """HYBRID_CUSTOMIZED
4
a -1 100 ALLGATHER 1000 100 REDUCESCATTER 1000 100 ALLREDUCE 1000 1 HYBRID_DATA_MODEL
b -1 200 ALLGATHER 2000 200 ALLREDUCE 2000 200 ALLREDUCE 2000 1 HYBRID_MODEL_DATA
c -1 300 ALLGATHER 3000 300 ALLREDUCE 3000 300 ALLREDUCE 3000 1 DATA
d -1 400 ALLGATHER 4000 400 ALLREDUCE 4000 400 ALLREDUCE 4000 1 MODEL
"""
MODEL = MLP.replace("HYBRID_DATA_MODEL", "MODEL", 1)
MODEL_DATA = MLP.replace("HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", 1)


def ring(npus: int) -> NetworkConfig:
    return NetworkConfig(dims=(NetworkDim(topology="Ring", npus=npus, bandwidth_gbps=50.0, latency_ns=500.0),))


def write(tmp_path, text: str, name: str = "workload.txt") -> str:
    path = tmp_path / name
    path.write_bytes(text.replace("\n", "\r\n").encode())  # as the published files: CRLF
    return str(path)


def convert(path: str, npus: int = 8, passes: int = 1, **options) -> Job:
    return convert_workload(path, SourceOptions(npus=npus, passes=passes, **options)).job


def layers_of(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()[2:] if line.split()]


def issued(policy: str, layers: list[list[str]]) -> Counter:
    """The collectives ASTRA-sim 1.0 issues in one pass of `policy` (type, size), read from the
    layer fields: fwd 3-4, input gradient 6-7, weight gradient 9-10."""
    phases = {"DATA": ("wg",), "MICRO": ("wg",), "MODEL": ("fwd", "ig"), "HYBRID_DATA_MODEL": ("fwd", "ig", "wg"),
              "HYBRID_MODEL_DATA": ("fwd", "ig", "wg"), "HYBRID_TRANSFORMER": ("fwd", "ig", "wg")}
    found = Counter()
    for index, f in enumerate(layers):
        for phase, column in (("fwd", 3), ("ig", 6), ("wg", 9)):
            first_layer_ig = phase == "ig" and index == 0 and policy != "HYBRID_TRANSFORMER"
            if phase in phases[policy] and f[column] != "NONE" and not first_layer_ig:
                found[(NAMES[f[column]], int(f[column + 1]))] += 1
    return found


def collectives(table) -> Counter:
    rows = table.select(["type", "comm_type", "comm_size"]).to_pylist()
    names = {v: k for k, v in pb.CollectiveCommType.items()}
    return Counter((names[r["comm_type"]], r["comm_size"]) for r in rows if r["type"] == COLL)


def by_name(table) -> dict[str, dict]:
    return {r["name"]: r for r in table.select(["id", "name", "type", "data_deps", "duration_micros", "pg_name",
                                                 "comm_size"]).to_pylist()}


@pytest.mark.parametrize("name,policy", [("Resnet50_DataParallel.txt", "DATA"), ("microAllReduce.txt", "MICRO"),
                                         ("MLP_HybridParallel_Data_Model.txt", "HYBRID_DATA_MODEL")])
def test_each_npu_issues_the_collectives_the_policy_runs(name, policy):
    text = (TEXT / name).read_text()
    job = convert(str(TEXT / name), passes=2)
    want = Counter({k: 2 * v for k, v in issued(policy, layers_of(text)).items()})
    assert want and all(collectives(t) == want for t in job.tables)


@pytest.mark.parametrize("text,policy", [(MODEL, "MODEL"), (MODEL_DATA, "HYBRID_MODEL_DATA"),
                                         (TRANSFORMER, "HYBRID_TRANSFORMER")])
def test_other_policies_issue_their_collectives(tmp_path, text, policy):
    job = convert(write(tmp_path, text), passes=3)
    want = Counter({k: 3 * v for k, v in issued(policy, layers_of(text)).items()})
    assert all(collectives(t) == want for t in job.tables)


def test_none_is_no_collective_and_data_issues_only_weight_gradients():
    job = convert(str(TEXT / "Resnet50_DataParallel.txt"))
    rows = by_name(job.tables[0]).values()
    assert {r["comm_size"] for r in rows if r["type"] == COLL} and all(r["comm_size"] > 0 for r in rows
                                                                       if r["type"] == COLL)
    assert all(r["pg_name"] == "0" for r in rows if r["type"] == COLL)
    # 54 forward, 54 weight-gradient and 53 input-gradient computes (the first layer has none)
    assert sum(r["type"] == COMP for r in rows) == 54 * 3 - 1


def test_dlrm_exchanges_the_embeddings_all_to_all_at_the_last_bottom_layer():
    job = convert(str(TEXT / "DLRM_HybridParallel.txt"), passes=2)
    nodes = by_name(job.tables[5])
    assert collectives(job.tables[5]) == Counter({("ALL_TO_ALL", 98304): 4, ("ALL_REDUCE", 13312): 2,
                                                  ("ALL_REDUCE", 524288): 8, ("ALL_REDUCE", 16384): 2,
                                                  ("ALL_REDUCE", 1064960): 2})

    def deps(name: str) -> set[str]:
        return {n for n, r in nodes.items() if r["id"] in nodes[name]["data_deps"]}

    assert "Embedding fwd ALL_TO_ALL #0" in deps("MLP_Top_0 fwd #0")  # awaited after the last bottom layer (4)
    assert "Embedding fwd ALL_TO_ALL #0" not in deps("MLP_Bottom_3 fwd #0")
    assert deps("Embedding ig ALL_TO_ALL #0") == {"MLP_Top_0 ig #0"}  # issued after the first top layer's
    assert "Embedding ig ALL_TO_ALL #0" in deps("Embedding fwd #1")  # the pass ends when it has ended


def test_the_two_hybrid_orders_put_model_and_data_parallel_collectives_on_different_groups(tmp_path):
    data_model = convert(str(TEXT / "MLP_HybridParallel_Data_Model.txt"), first_dim_npus=2)
    model_data = convert(write(tmp_path, MODEL_DATA), first_dim_npus=2)
    for job, model_members, data_members in ((data_model, (0, 1), (0, 2, 4, 6)),
                                             (model_data, (0, 2, 4, 6), (0, 1))):
        nodes = by_name(job.tables[0])
        fwd_group = job.comm_groups[int(nodes["layer_64_2_mlp1 fwd ALL_GATHER"]["pg_name"])]
        wg_group = job.comm_groups[int(nodes["layer_64_2_mlp1 wg ALL_REDUCE"]["pg_name"])]
        assert (fwd_group, wg_group) == (model_members, data_members)
    assert collectives(data_model.tables[3]) == collectives(model_data.tables[3])


def test_hybrid_transformer_splits_on_its_model_parallel_group(tmp_path):
    job = convert(write(tmp_path, TRANSFORMER), npus=8)
    nodes = by_name(job.tables[5])
    assert job.comm_groups[int(nodes["attn fwd ALL_REDUCE"]["pg_name"])] == (4, 5, 6, 7)
    assert job.comm_groups[int(nodes["attn wg ALL_REDUCE"]["pg_name"])] == (1, 5)
    assert "embed ig" in nodes  # and the first layer's input gradient ...
    ig_comm = nodes["attn ig ALL_REDUCE"]  # ... whose collective holds the loop: the weight gradient waits
    assert ig_comm["id"] in nodes["attn wg"]["data_deps"]


def test_hybrid_transformer_without_its_group_takes_the_converters_split(tmp_path):
    text = TRANSFORMER.replace(" model_parallel_NPU_group: 4", "")
    converted = convert_workload(write(tmp_path, text), SourceOptions(npus=8, first_dim_npus=2))
    nodes = by_name(converted.job.tables[5])
    assert converted.job.comm_groups[int(nodes["attn fwd ALL_REDUCE"]["pg_name"])] == (4, 5)
    assert converted.source["first_dim_npus"]["from"] == "--first-dim-npus"


def test_fwd_in_bckwd_computes_the_forward_again_from_the_checkpoint(tmp_path):
    text = TRANSFORMER.replace("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", 1).replace(
        "group: 4", "group: 4 checkpoints: 1 0 checkpoint_initiates: 1 2", 1)
    job = convert(write(tmp_path, text), npus=8)
    names = job.tables[0].column("name").to_pylist()
    # the backward of mlp (layer 2) starts with embed and attn forward again, each with its collective
    assert names[names.index("mlp fwd") + 1:names.index("mlp ig")] == [
        "embed fwd again", "embed fwd ALL_GATHER", "attn fwd again", "attn fwd ALL_REDUCE"]
    assert collectives(job.tables[0])[("ALL_REDUCE", 4096)] == 3  # attn: forward twice, input gradient once
    result = simulate(job, ring(8), load_system(SYSTEM))
    assert [n.nodes for n in result.npus] == [t.num_rows for t in job.tables]


def test_hybrid_customized_takes_each_layers_policy(tmp_path):
    job = convert(write(tmp_path, CUSTOMIZED), npus=8, first_dim_npus=4)
    nodes = by_name(job.tables[1])
    groups = {name: job.comm_groups.get(int(r["pg_name"]), "world") for name, r in nodes.items() if r["type"] == COLL}
    assert groups["a fwd ALL_GATHER"] == (0, 1, 2, 3) and groups["a wg ALL_REDUCE"] == (1, 5)
    assert groups["b fwd ALL_GATHER"] == (1, 5) and groups["b wg ALL_REDUCE"] == (0, 1, 2, 3)
    assert groups["c wg ALL_REDUCE"] == "world" and "c fwd ALL_GATHER" not in groups
    assert groups["d fwd ALL_GATHER"] == "world" and "d wg ALL_REDUCE" not in groups
    assert "a ig REDUCE_SCATTER" not in groups  # the first layer issues no input-gradient collective


def test_a_passes_forward_waits_for_the_last_passes_weight_gradient_collective():
    nodes = by_name(convert(str(TEXT / "Resnet50_DataParallel.txt"), passes=2).tables[0])
    assert nodes["conv1 wg ALL_REDUCE #0"]["id"] in nodes["conv1 fwd #1"]["data_deps"]


def test_cycles_are_kept_or_turned_into_microseconds_in_proportion():
    text = (TEXT / "Resnet50_DataParallel.txt").read_text()
    cycles = {f"{f[0]} {p}": int(f[c]) for f in layers_of(text) for p, c in (("fwd", 2), ("ig", 5), ("wg", 8))}
    kept = by_name(convert(str(TEXT / "Resnet50_DataParallel.txt")).tables[0])
    scaled = by_name(convert(str(TEXT / "Resnet50_DataParallel.txt"), npu_frequency_mhz=100).tables[0])
    for name, row in kept.items():
        if row["type"] == COMP:
            assert row["duration_micros"] == cycles[name]
            assert scaled[name]["duration_micros"] == round(cycles[name] / 100)


@pytest.mark.parametrize("name", sorted(p.name for p in TEXT.glob("*.txt")))
def test_every_shipped_workload_simulates_to_its_end_on_a_ring(name):
    job = convert(str(TEXT / name), npus=8, passes=2)
    result = simulate(job, ring(8), load_system(SYSTEM))
    assert [n.nodes for n in result.npus] == [t.num_rows for t in job.tables]


@pytest.mark.parametrize("text,npus", [(MODEL_DATA, 4), (TRANSFORMER, 8), (CUSTOMIZED, 16)])
def test_every_policy_simulates_to_its_end_on_a_ring(tmp_path, text, npus):
    job = convert(write(tmp_path, text), npus=npus, passes=2, first_dim_npus=4 if "CUSTOM" in text else None)
    result = simulate(job, ring(npus), load_system(SYSTEM))
    assert [n.nodes for n in result.npus] == [t.num_rows for t in job.tables]
    assert result.finish_ns > 0


def test_the_cli_detects_a_workload_and_writes_groups_and_report(tmp_path, capsys):
    src = TEXT / "MLP_HybridParallel_Data_Model.txt"
    assert detect_format(str(src)) == "text"
    assert main(["convert", str(src), "-o", str(tmp_path), "--prefix", "mlp", "--npus", "8", "--passes", "2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        [f"mlp.{r}.et" for r in range(8)] + ["mlp.comm_groups.json", "mlp.report.json"]
    groups = json.loads((tmp_path / "mlp.comm_groups.json").read_text())
    assert sorted(map(tuple, groups.values())) == [(0, 1), (0, 2, 4, 6), (1, 3, 5, 7), (2, 3), (4, 5), (6, 7)]
    report = json.loads((tmp_path / "mlp.report.json").read_text())
    assert report["source"]["policy"] == "HYBRID_DATA_MODEL" and "as the reference" in report["source"]["time"]
    assert report["source"]["not_issued_by_policy"] == {"ig ALL_REDUCE": 2}


def _refused(capsys, argv: list[str], *words: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.parametrize("text,words", [
    ("", ["line 1", "empty"]),
    ("DATA_PARALLEL\n1\n", ["line 1", "unknown parallelism policy"]),
    ("DATA\nmany\n", ["line 2", "not an integer"]),
    ("DATA\n2\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["declares 2 layers"]),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8\n", ["line 3", "12 fields"]),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 BROADCAST 8 1\n", ["line 3", "BROADCAST"]),
    ("DATA\n1\nl -1 1.5 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 3", "'1.5'"]),
    ("DATA\n1\nl -1 -4 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 3", "forward compute time -4"]),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 99999999999999999999 1\n", ["line 3", "not an integer"]),
    ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\nm -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n",
     ["line 4", "beyond"]),
    ("HYBRID_DLRM 3\n2\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\nm -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n",
     ["line 1", "last bottom layer 3"]),
    ("HYBRID_DLRM\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 1", "last bottom layer"]),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: x\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n",
     ["line 1", "model_parallel_NPU_group 'x'"]),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 1 0\n1\n"
     "l -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 1", "checkpoint_initiates:"]),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 1 5 checkpoint_initiates: 0\n1\n"
     "l -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 1", "checkpoint layer 5"]),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 3\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n",
     ["line 1", "does not divide"]),
    ("HYBRID_CUSTOMIZED\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 3", "13 fields"]),
    ("HYBRID_CUSTOMIZED\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1 PIPELINE\n", ["line 3", "PIPELINE"]),
    ("DATA extra\n1\nl -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n", ["line 1", "'extra'"]),
])
def test_hostile_workloads_are_refused_on_one_line_naming_the_file_and_line(capsys, tmp_path, text, words):
    path = write(tmp_path, text)
    _refused(capsys, ["convert", path, "-o", str(tmp_path / "out"), "--from", "text", "--npus", "8"], path, *words)
    assert not (tmp_path / "out").exists()


def test_options_that_do_not_fit_are_refused(capsys, tmp_path, monkeypatch):
    src = str(TEXT / "Resnet50_DataParallel.txt")
    out = str(tmp_path / "out")
    _refused(capsys, ["convert", src, "-o", out], "--npus")
    _refused(capsys, ["convert", src, "-o", out, "--npus", "8", "--time-unit", "s"], "--time-unit", "text")
    _refused(capsys, ["convert", src, "-o", out, "--npus", "0"], src, "--npus")
    _refused(capsys, ["convert", src, "-o", out, "--npus", "8", "--npu-frequency", "-1"], "--npu-frequency")
    _refused(capsys, ["convert", str(TEXT / "MLP_HybridParallel_Data_Model.txt"), "-o", out, "--npus", "8",
                      "--first-dim-npus", "3"], "--first-dim-npus is 3")
    _refused(capsys, ["convert", src, "-o", out, "--npus", "100000"], "CHAKRA_MAX_NPUS")
    monkeypatch.setenv("CHAKRA_MAX_NODES", "10000")
    _refused(capsys, ["convert", src, "-o", out, "--npus", "8", "--passes", "1000000000"], "CHAKRA_MAX_NODES")
