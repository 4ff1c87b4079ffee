"""Kineto traces alone of NCCL jobs recorded with 2023's PyTorch (issue 36, docs/gpu.md 'NCCL
kernels and older PyTorch'): collectives named by the host ops where they name one, sized from
the nccl:* events where the c10d op's tensor lists lack shapes, named after their NCCL kernels
where the host names none; every assumption in the report, per op kind."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest
from datapaths import KINETO_NCCL, REFERENCE_CONFIGS

from chakra_core.cli import main
from chakra_core.convert.kineto.nccl import parse_kernel
from chakra_core.convert.sources import convert_source
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.etfile import read_table
from chakra_core.format.nodetypes import COMM_NODE_TYPES
from chakra_core.replay.plan import recorded_ns
from chakra_core.sim.files import simulate_files

W16 = KINETO_NCCL / "recsys-w16-rank0"
W128 = KINETO_NCCL / "recsys-w128-sampled"
# the nccl:* events' names -> the collective the ET must hold; bytes per element of "Input type"
KIND_OF_ANNOTATION = {"all_reduce": "ALL_REDUCE", "all_to_all": "ALL_TO_ALL", "_all_gather_base": "ALL_GATHER",
                      "_reduce_scatter_base": "REDUCE_SCATTER"}
ITEM_BYTES = {"float": 4, "long": 8, "int": 4, "unsigned char": 1, "signed char": 1, "c10::Half": 2}


def _events(trace: Path) -> list[dict]:
    return json.load(gzip.open(trace))["traceEvents"]


def _implied(trace: Path) -> Counter:
    """(kind, bytes) of each collective as the trace's nccl:* events record it (the buffer each
    rank passes in), worked out here from the JSON independently of the converter."""
    return Counter((KIND_OF_ANNOTATION[e["name"][5:]], math.prod(e["args"]["Input Dims"][0]) *
                    ITEM_BYTES[e["args"]["Input type"][0]])
                   for e in _events(trace) if e.get("cat") == "user_annotation" and e["name"].startswith("nccl:"))


def _collectives(et: str) -> Counter:
    rows = read_table(et).select(["type", "comm_type", "comm_size"]).to_pylist()
    return Counter((COMM_TYPES[r["comm_type"]], r["comm_size"]) for r in rows if r["type"] in COMM_NODE_TYPES)


def _without(trace: Path, folder: Path, names: tuple[str, ...]) -> Path:
    """The trace with the host events of the given names (prefixes) taken out: the host side of a
    recording that names no collective, as the NCCL kernels alone must then tell them."""
    document = json.load(gzip.open(trace))
    document["traceEvents"] = [e for e in document["traceEvents"] if not e.get("name", "").startswith(names)]
    folder.mkdir(parents=True)
    with gzip.open(folder / "rank0.kineto.json.gz", "wt") as f:
        json.dump(document, f)
    return folder


def _notes(result) -> str:
    return "\n".join(result.reports[0]["notes"])


@pytest.mark.parametrize(("name", "func", "algorithm", "protocol", "dtype"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "AllReduce", "RING", "LL", "float"),  # 2.10-2.11
    ("ncclKernel_AllReduce_TREE_LL128_Sum___nv_bfloat16(ncclDevComm*, unsigned long, ncclWork*)",
     "AllReduce", "TREE", "LL128", "c10::BFloat16"),
    ("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_half(ncclDevComm*, unsigned long, ncclWork*)",
     "ReduceScatter", "RING", "SIMPLE", "c10::Half"),
    ("ncclKernel_Reduce_RING_LL_Max_double(ncclDevComm*, unsigned long, ncclWork*)", "Reduce", "RING", "LL", "double"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "SendRecv", "RING", "SIMPLE", None),  # moves bytes: int8_t is no dtype
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "AllGather", "RING", "LL", None),
    ("ncclKernel_AllReduce_COLLNET_SIMPLE_Sum_float(ncclWorkElem)", "AllReduce", "COLLNET", "SIMPLE", "float"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather", "RING", "LL", None),  # 2.19 on
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "ReduceScatter", "RING", "LL", "float"),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_TREE_SIMPLE(ncclDevKernelArgsStorage<4096ul>)",
     "AllReduce", "NVLS_TREE", "SIMPLE", "c10::BFloat16"),
    ("ncclDevKernel_AllReduce_MinMax_f16_COLLNET_DIRECT_SIMPLE", "AllReduce", "COLLNET_DIRECT", "SIMPLE", "c10::Half"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Broadcast", "RING", "LL", None),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv", None, None, None),
])
def test_nccl_kernel_names_of_every_generation_say_their_collective(name, func, algorithm, protocol, dtype):
    kernel = parse_kernel(name)
    assert (kernel.func, kernel.algorithm, kernel.protocol, kernel.dtype) == (func, algorithm, protocol, dtype)


@pytest.mark.parametrize("name", ["ncclDevKernel_Generic", "void ncclKernelFoo<float>()", "ampere_sgemm_128x64_nn"])
def test_a_kernel_name_of_no_known_collective_names_none(name):
    assert parse_kernel(name) is None


@pytest.fixture(scope="module")
def w16(tmp_path_factory):
    root = tmp_path_factory.mktemp("w16")
    return root, convert_source(str(W16), str(root / "out"), "j")


def test_an_older_nccl_rank_converts_with_the_collectives_its_nccl_events_record(w16):
    _, result = w16
    got = _collectives(result.et_files[0])
    assert got == _implied(W16 / "rank0.kineto.json.gz")
    kinds = Counter()
    for (kind, _), n in got.items():
        kinds[kind] += n
    assert kinds == {"ALL_TO_ALL": 55, "ALL_REDUCE": 10, "ALL_GATHER": 10, "REDUCE_SCATTER": 10}
    assert all(size > 0 for kind, size in got if kind != "ALL_TO_ALL")  # tensor lists sized from nccl:all_reduce


def test_the_report_lists_the_groups_assumed_and_the_kernels_of_another_collective(w16):
    notes = _notes(w16[1])
    assert "assumed the world group (all_gather 10, all_reduce 10, all_to_all 55, reduce_scatter 10)" in notes
    # HTA's files name every NCCL kernel SendRecv: the host op's kind is kept, and said
    assert "all_reduce launched SendRecv 10" in notes and "reduce_scatter launched SendRecv 10" in notes
    assert "dtype not recorded" not in notes  # every size came with its element type


def test_stats_and_simulate_run_on_an_older_nccl_rank(w16, tmp_path, capsys):
    root, result = w16
    assert main(["stats", result.et_files[0]]) == 0
    assert "collectives" in capsys.readouterr().out
    ring = tmp_path / "ring1.yml"
    ring.write_text("topology: [ Ring ]\nnpus_count: [ 1 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    system = str(REFERENCE_CONFIGS / "Ring_4chunks.json")
    assert main(["simulate", "--workload", str(root / "out" / "j"), "--network", str(ring), "--system", system]) == 0
    simulated, _ = simulate_files(str(root / "out" / "j"), str(ring), system)
    # one rank of sixteen: its collectives have no peers to wait for here, so the 1,232 ms it
    # recorded (communication-bound) simulate shorter: 1,074 ms, -12.8% (docs/gpu.md)
    assert 0.8 < simulated.finish_ns / recorded_ns(read_table(result.et_files[0])) < 1.0


def test_two_sampled_ranks_convert_each_as_recorded_and_their_mismatch_is_reported(tmp_path):
    result = convert_source(str(W128), str(tmp_path / "out"), "j")
    assert result.ranks == [0, 1]
    for rank, et in enumerate(result.et_files):
        assert _collectives(et) == _implied(W128 / f"rank{rank}.kineto.json.gz")
    assert result.mismatches  # HTA kept a different sample of each rank's events


def test_a_lone_rank_other_than_0_keeps_its_file(tmp_path):
    (tmp_path / "in").mkdir()
    shutil.copy(W128 / "rank1.kineto.json.gz", tmp_path / "in" / "rank1.kineto.json.gz")
    result = convert_source(str(tmp_path / "in"), str(tmp_path / "out"), "j")
    assert result.ranks == [1] and Path(result.et_files[0]).name == "j.1.et" and Path(result.et_files[0]).exists()


def test_record_param_comms_without_a_collective_name_is_named_after_its_nccl_kernel(tmp_path):
    """The 2023 trace without its c10d::* and nccl:* events: what names the collectives is each
    record_param_comms' kernel (all SendRecv here, so all_to_all, as the report says), and what
    sizes them its own "Input Dims"; an all-gather, which had no record_param_comms, gets a node
    of its own around its kernel's launch."""
    result = convert_source(str(_without(W16 / "rank0.kineto.json.gz", tmp_path / "in", ("c10d::", "nccl:"))),
                            str(tmp_path / "out"), "j")
    got = _collectives(result.et_files[0])
    kernels_launched = 75  # of the 80 SendRecv kernels, 5 were launched before the trace's CPU events
    assert sum(got.values()) == kernels_launched and {kind for kind, _ in got} == {"ALL_TO_ALL"}
    implied = _implied(W16 / "rank0.kineto.json.gz")
    sized = Counter({size: n for (kind, size), n in implied.items() if kind in ("ALL_TO_ALL", "REDUCE_SCATTER")})
    assert Counter({size: n for (_, size), n in got.items() if size}) == sized - Counter({0: sized[0]})
    notes = _notes(result)
    assert "NCCL kernels naming the collective of the op that launched them (the host names none): SendRecv 75; " \
           "10 launched inside no communication op" in notes
    assert "all_to_all (from NCCL kernels SendRecv): the host names no collective: assumed all_to_all" in notes
    assert "all_to_all (from NCCL kernels SendRecv): size not recorded (no In msg nelems, no Input Dims): 0 bytes, for 20" in notes


def test_nccl_kernels_launched_inside_no_communication_op_become_collectives(tmp_path):
    result = convert_source(str(_without(W16 / "rank0.kineto.json.gz", tmp_path / "in",
                                         ("c10d::", "nccl:", "record_param_comms"))), str(tmp_path / "out"), "j")
    assert _collectives(result.et_files[0]) == {("ALL_TO_ALL", 0): 75}
    notes = _notes(result)
    assert "75 launched inside no communication op, given a record_param_comms node spanning the launch" in notes
    assert "all_to_all (from NCCL kernels SendRecv): size not recorded (no In msg nelems, no Input Dims): 0 bytes, for 75" in notes


def test_a_reducing_kernel_names_its_collective_where_the_host_names_none(tmp_path):
    """HTA's traces name every NCCL kernel SendRecv; an unsampled 2022 trace names an all-reduce's
    kernel `ncclKernel_AllReduce_RING_LL_Sum_float(...)`. Given that name (on the kernels the
    all-reduces launched) and no c10d::* or nccl:* events, the all-reduces are named from it."""
    document = json.load(gzip.open(W16 / "rank0.kineto.json.gz"))
    events = document["traceEvents"]
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "nccl:all_reduce"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"
                and any(tid == e["tid"] and start <= e["ts"] <= end for tid, start, end in spans)}
    for e in events:
        if e.get("cat") == "kernel" and e["args"].get("correlation") in launched:
            e["name"] = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
    document["traceEvents"] = [e for e in events if not e.get("name", "").startswith(("c10d::", "nccl:"))]
    (tmp_path / "in").mkdir()
    with gzip.open(tmp_path / "in" / "rank0.kineto.json.gz", "wt") as f:
        json.dump(document, f)
    result = convert_source(str(tmp_path / "in"), str(tmp_path / "out"), "j")
    kinds = Counter()
    for (kind, _), n in _collectives(result.et_files[0]).items():
        kinds[kind] += n
    assert kinds == {"ALL_TO_ALL": 65, "ALL_REDUCE": 10}
    notes = _notes(result)
    assert "NCCL kernels naming the collective of the op that launched them (the host names none): AllReduce 10, " \
           "SendRecv 65" in notes
    # older record_param_comms write an all-reduce's tensor list without shapes: no size, said
    assert "all_reduce (from NCCL kernels AllReduce): size not recorded (no In msg nelems, no Input Dims): 0 bytes, " \
           "for 10" in notes
