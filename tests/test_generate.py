"""The test-case generator: the builder API (chakra_core.generate.builder), the canned workloads
(chakra_core.generate.workloads) and `chakra generate`; workloads are checked by simulating them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from chakra_core.analysis.validate import validate_table
from chakra_core.format.etfile import read_metadata, read_table
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COLL, RECV, SEND
from chakra_core.generate.builder import (
    NODE_COLUMNS,
    JobBuilder,
    RankGraph,
    check_send_recv,
    node_table,
)
from chakra_core.generate.workloads import WORKLOADS, generate
from chakra_core.format.job import read_comm_groups
from chakra_core.sim.config import NetworkConfig, load_system
from chakra_core.sim.engine import SimResult, simulate

REPO = Path(__file__).resolve().parents[1]
SYSTEM = load_system(str(REPO / "pipeline" / "sweeps" / "ring_system.json"))
CHAKRA = str(Path(sys.executable).parent / "chakra")


def ring(*dims: int) -> NetworkConfig:
    return NetworkConfig.model_validate(
        {"dims": [{"topology": "Ring", "npus": n, "bandwidth_gbps": 50, "latency_ns": 500} for n in dims]})


def run(job: JobBuilder, dims: tuple[int, ...] | None = None, system=SYSTEM) -> SimResult:
    """Simulates the job on a Ring of its NPUs (or of `dims`), as `chakra simulate` would with its files."""
    return simulate(job.tables(), ring(*(dims or (job.npus,))), system, comm_groups=job.comm_groups)


def compute_ns(result: SimResult) -> int:
    return max(n.compute_ns for n in result.npus)


def comm_ns(result: SimResult) -> int:
    """Communication time of the busiest NPU (collectives, summed by type)."""
    return max(sum(n.comm_ns.values()) for n in result.npus)


def comm_bytes(result: SimResult) -> int:
    return sum(sum(n.comm_bytes.values()) for n in result.npus)


def collective_count(job: JobBuilder) -> int:
    return sum(pa.compute.sum(pa.compute.equal(t["type"], COLL)).as_py() for t in job.tables())


# ------------------------------------------------------------------ builder


def test_rank_graph_nodes_ids_and_attributes():
    g = RankGraph(1, npus=4, flops_per_s=1e12)
    load = g.memory("load", tensor_size=4096)
    x = g.compute("matmul", [load], num_ops=3e9, tensor_size=1 << 20)  # 3 ms at 1 TFLOP/s
    cpu = g.compute("dataloader", duration_us=40, is_cpu=True, ctrl_deps=[load])
    ar = g.collective("grads", "all_reduce", 1 << 20, [x, x, None], pg_name="2")
    a2a = g.collective("tokens", 6, 4096, [ar])
    s = g.send("act", 2, 512, 7, [a2a])
    r = g.recv("grad", 0, 512, 8)
    g.memory("store", [r], tensor_size=4096, store=True)
    assert [load, x, cpu, ar, a2a, s, r] == list(range(7)) and len(g) == 8
    t = g.table()
    assert t.schema.names == list(NODE_COLUMNS) and [f.type for f in t.schema] == list(NODE_COLUMNS.values())
    rows = t.to_pylist()
    assert [row["type"] for row in rows] == [2, 4, 4, 7, 7, 5, 6, 3]
    assert rows[1]["duration_micros"] == 3000 and rows[1]["num_ops"] == 3_000_000_000
    assert rows[2]["is_cpu_op"] and rows[2]["ctrl_deps"] == [0] and rows[2]["duration_micros"] == 40
    assert rows[3]["data_deps"] == [1] and rows[3]["comm_type"] == 0 and rows[3]["pg_name"] == "2"
    assert rows[4]["comm_type"] == 6 and rows[4]["pg_name"] == "0"
    assert (rows[5]["comm_src"], rows[5]["comm_dst"], rows[5]["comm_tag"]) == (1, 2, 7)
    assert (rows[6]["comm_src"], rows[6]["comm_dst"], rows[6]["comm_size"]) == (0, 1, 512)
    assert rows[7]["tensor_size"] == 4096
    assert [f for f in validate_table(t) if f.severity != "info"] == []


@pytest.mark.parametrize("call, fragment", [
    (lambda g: g.compute("late", [5]), "node 2 ('late'): data dep 5 is not an earlier node"),
    (lambda g: g.compute("self", [2]), "data dep 2"),
    (lambda g: g.compute("neg", ctrl_deps=[-1]), "ctrl dep -1"),
    (lambda g: g.collective("c", "ALLREDUCE", 8), "comm_type 'ALLREDUCE'"),
    (lambda g: g.collective("c", 42, 8), "comm_type 42"),
    (lambda g: g.collective("c", "ALL_REDUCE", -8), "size must be >= 0"),
    (lambda g: g.collective("c", "ALL_REDUCE", 8, pg_name="tp"), "pg_name 'tp'"),
    (lambda g: g.send("s", 0, 8, 1), "dst 0 is not another rank"),
    (lambda g: g.recv("r", 4, 8, 1), "src 4 is not another rank of 0..3"),
])
def test_rank_graph_refuses_bad_nodes(call, fragment):
    g = RankGraph(0, npus=4)
    g.compute("a")
    g.compute("b", [0])
    with pytest.raises(ValueError) as err:
        call(g)
    assert fragment in str(err.value)
    assert len(g) == 2  # nothing half-added


def test_node_table_from_numpy_is_fast_and_typed():
    n = 100_000
    columns = {"type": np.full(n, 4, np.int32), "duration_micros": np.arange(n), "num_ops": np.arange(n) * 2,
               "name": pa.array([f"n{i}" for i in range(n)])}
    node_table(columns)  # warm-up
    started = time.perf_counter()
    table = node_table(columns)
    assert time.perf_counter() - started < 0.25
    assert table.schema.names == list(NODE_COLUMNS) and table.num_rows == n
    assert table["id"].to_pylist()[:3] == [0, 1, 2] and table["duration_micros"].type == pa.uint64()
    assert table["comm_type"].null_count == n and table["data_deps"].to_pylist()[:2] == [[], []]
    assert validate_table(table.slice(0, 1000)) == []
    with pytest.raises(ValueError, match="different lengths"):
        node_table({"id": [0, 1], "name": ["a"]})
    with pytest.raises(ValueError, match="unknown column"):
        node_table({"id": [0], "op": ["x"]})
    with pytest.raises(ValueError, match="'duration_micros' does not convert"):
        node_table({"duration_micros": [-1]})


def test_job_groups():
    job = JobBuilder(8)
    assert job.group([3, 1]) == "1" and job.group((1, 3)) == "1"
    assert job.group(range(8)) == "0"
    assert job.group([0, 4]) == "2"
    assert job.comm_groups == {1: (1, 3), 2: (0, 4)}
    for bad, fragment in (([], "no ranks"), ([1, 8], "outside 0..7")):
        with pytest.raises(ValueError, match=fragment):
            job.group(bad)
    with pytest.raises(ValueError, match="rank 8"):
        job.rank(8)
    with pytest.raises(ValueError, match="npus"):
        JobBuilder(0)


def test_write_and_read_back(tmp_path):
    job = JobBuilder(4, flops_per_s=1e12)
    pair = [job.group([0, 1]), job.group([2, 3])]
    for r in range(4):
        g = job.rank(r)
        x = g.compute("fwd", num_ops=1e9, tensor_size=1 << 16)
        g.collective("ar", "ALL_REDUCE", 1 << 16, [x], pg_name=pair[r // 2])
    out = tmp_path / "not" / "yet"
    files = job.write(str(out), "toy")
    assert files == [f"{out}/toy.{r}.et" for r in range(4)] + [f"{out}/toy.comm_groups.json"]
    for r in range(4):
        back = read_table(files[r])
        assert read_metadata(files[r]).version == "0.0.4"
        assert back.select(list(NODE_COLUMNS)).to_pylist() == job.rank(r).table().to_pylist()
    assert json.loads(Path(files[-1]).read_text()) == {"1": [0, 1], "2": [2, 3]}
    assert read_comm_groups(files[-1]) == job.comm_groups
    # no sub-groups: no group file; any fsspec URL
    assert Job([job.rank(0).table()], name="x").write("memory://gen/one") == ["memory://gen/one/x.0.et"]
    with pytest.raises(ValueError, match="no tables"):
        Job([], name="x").write(str(tmp_path))


# ------------------------------------------------------------------ workloads: valid and simulated


# On a one-dimensional Ring the simulator times sub-groups spread evenly around it: pairs, or
# strided groups spanning the ring; so the hybrids put a degree-2 axis innermost here.
CASES = {
    "mlp-dp": ("mlp", lambda n: {"parallelism": "dp"}),
    "mlp-mp": ("mlp", lambda n: {"parallelism": "mp"}),
    "mlp-dp-mp": ("mlp", lambda n: {"parallelism": "dp-mp", "mp": n // 2}),
    "mlp-mp-dp": ("mlp", lambda n: {"parallelism": "mp-dp", "mp": 2}),
    "dlrm": ("dlrm", lambda n: {"tables": 2 * n}),
    "transformer": ("transformer", lambda n: {"tp": 2, "pp": 2, "layers": 4, "seq": 256}),
}


@pytest.mark.parametrize("npus", [4, 16, 64])
@pytest.mark.parametrize("case", list(CASES))
def test_workload_validates_and_simulates(case, npus):
    workload, options = CASES[case]
    job = generate(workload, npus, **options(npus))
    tables = job.tables()
    assert len(tables) == npus
    for rank in {0, npus // 2 + 1, npus - 1}:  # ranks of different groups and pipeline stages
        assert [str(f) for f in validate_table(tables[rank]) if f.severity == "error"] == []
    assert check_send_recv(tables) == []
    result = run(job)
    assert [n.nodes for n in result.npus] == [t.num_rows for t in tables]  # every node ran on every NPU
    assert result.finish_ns > 0 and compute_ns(result) > 0 and comm_ns(result) > 0


def test_roofline_mode_times_generated_compute():
    job = generate("transformer", 4, tp=2, layers=2, seq=256)
    replay = run(job)
    roofline = run(job, system=SYSTEM.model_copy(update={"roofline_enabled": True, "peak_perf_tflops": 900}))
    assert 0 < compute_ns(roofline) < compute_ns(replay)  # 900 TFLOP/s peak beats the 150 TFLOP/s durations


def test_hybrid_layouts():
    dp_mp = generate("mlp", 8, parallelism="dp-mp", mp=4)  # DP inner (contiguous), MP outer (strided)
    assert set(dp_mp.comm_groups.values()) == {(0, 1), (2, 3), (4, 5), (6, 7), (0, 2, 4, 6), (1, 3, 5, 7)}
    mp_dp = generate("mlp", 8, parallelism="mp-dp", mp=4)
    assert set(mp_dp.comm_groups.values()) == {(0, 1, 2, 3), (4, 5, 6, 7), (0, 4), (1, 5), (2, 6), (3, 7)}
    # which group carries which traffic: MP the activations, DP the weight gradients
    rows = dp_mp.rank(0).table().to_pylist()
    gathers = {r["pg_name"] for r in rows if r["comm_type"] == 2}
    input_grads = {r["pg_name"] for r in rows if r["name"].endswith("/input_grad/all_reduce")}
    grads = {r["pg_name"] for r in rows if r["name"].endswith("/grad/all_reduce")}
    assert [dp_mp.comm_groups[int(g)] for g in gathers | input_grads] == [(0, 2, 4, 6)]
    assert [dp_mp.comm_groups[int(g)] for g in grads] == [(0, 1)]
    # contiguous MP groups of 4 run on a network shaped like the layout: Ring [mp, dp]
    two_dims = SYSTEM.model_copy(update={k: getattr(SYSTEM, k) * 2
                                         for k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")})
    assert run(mp_dp, dims=(4, 2), system=two_dims).finish_ns > 0


def test_transformer_layout_and_pipeline_pairs():
    job = generate("transformer", 16, tp=2, pp=2, layers=3, seq=128)  # dp 4; stages of 2 and 1 layers
    groups = set(job.comm_groups.values())
    assert (0, 1) in groups and (0, 4, 8, 12) in groups  # tp inner; dp strided by tp x pp
    rows = {r: job.rank(r).table().to_pylist() for r in (0, 2)}  # stage 0 and stage 1 of the same replica
    sends = [x for x in rows[0] if x["type"] == SEND]
    recvs = [x for x in rows[2] if x["type"] == RECV]
    assert {(x["comm_dst"], x["comm_tag"], x["comm_size"]) for x in sends} == \
        {(2, x["comm_tag"], x["comm_size"]) for x in recvs}
    assert len(sends) == 4  # one per micro-batch
    layers = {r: {x["name"].split("/")[3] for x in rows[r] if x["name"].startswith("step0/fwd/mb0/layer")}
              for r in rows}
    assert layers == {0: {"layer0", "layer1"}, 2: {"layer2"}}


# ------------------------------------------------------------------ workloads: directions


@pytest.mark.parametrize("workload, options", [
    ("mlp", {"parallelism": "dp"}),
    ("mlp", {"parallelism": "mp-dp", "mp": 2}),
    ("dlrm", {}),
    ("transformer", {"tp": 2, "seq": 256}),
])
def test_more_npus_shrink_per_npu_compute(workload, options):
    small, big = (run(generate(workload, n, **options)) for n in (4, 16))
    assert compute_ns(big) < compute_ns(small) / 2


@pytest.mark.parametrize("workload, options", [
    ("mlp", {"parallelism": "mp-dp", "mp": 2}),
    ("transformer", {"tp": 2, "seq": 256}),
    ("dlrm", {}),
])
def test_bigger_model_grows_compute_and_communication(workload, options):
    key = "embedding_dim" if workload == "dlrm" else "hidden"
    base = WORKLOADS[workload].options[key].default
    small, big = (run(generate(workload, 8, **options, **{key: size})) for size in (base // 2, base))
    assert compute_ns(big) > compute_ns(small)
    assert comm_bytes(big) > comm_bytes(small) and comm_ns(big) > comm_ns(small)


@pytest.mark.parametrize("workload, options", [("mlp", {"parallelism": "mp-dp", "mp": 2}),
                                               ("transformer", {"tp": 2, "seq": 256})])
def test_more_layers_more_collectives(workload, options):
    jobs = [generate(workload, 8, layers=n, **options) for n in (2, 4)]
    assert collective_count(jobs[1]) > collective_count(jobs[0])
    few, many = (run(j) for j in jobs)
    assert comm_ns(many) > comm_ns(few) and compute_ns(many) > compute_ns(few)


def test_higher_tp_moves_time_from_compute_to_communication():
    tp2, tp4 = (run(generate("transformer", 4, tp=tp, seq=256)) for tp in (2, 4))
    assert abs(compute_ns(tp4) - compute_ns(tp2)) <= 0.02 * compute_ns(tp2)  # the same work per NPU
    assert comm_ns(tp4) > comm_ns(tp2)
    share = [(r.npus[0].exposed_comm_ns / r.finish_ns) for r in (tp2, tp4)]
    assert share[1] > share[0]


def test_pipeline_stages_add_send_recv():
    flat, piped = (generate("transformer", 8, tp=2, pp=pp, seq=256) for pp in (1, 2))
    flat_run, piped_run = run(flat), run(piped)
    assert all("send" not in n.comm_bytes for n in flat_run.npus)
    sent = sum(n.comm_bytes.get("send", 0) for n in piped_run.npus)  # the simulator counts the sending side
    p2p = [r for t in piped.tables() for r in t.to_pylist() if r["type"] in (SEND, RECV)]
    assert sent == sum(r["comm_size"] for r in p2p if r["type"] == SEND) > 0
    assert sum(r["type"] == SEND for r in p2p) == sum(r["type"] == RECV for r in p2p)
    assert check_send_recv(piped.tables()) == []
    assert compute_ns(piped_run) < compute_ns(flat_run)  # each stage holds half the layers


@pytest.mark.parametrize("workload, npus, options, fragment", [
    ("gpt", 4, {}, "workload 'gpt'"),
    ("transformer", 16, {"tp": 3}, "tp=3 does not divide the 16 NPUs"),
    ("transformer", 16, {"tp": 4, "pp": 8}, "tp x pp=32 does not divide"),
    ("transformer", 8, {"pp": 8, "layers": 4}, "layers=4: fewer layers than the 8 pipeline stages"),
    ("transformer", 8, {"batch": 12}, "batch=12 is not divisible"),
    ("mlp", 8, {"parallelism": "dp", "mp": 2}, "mp=2"),
    ("mlp", 8, {"parallelism": "tp"}, "option parallelism='tp'"),
    ("mlp", 8, {"tp": 2}, "tp do not apply to workload mlp"),
    ("mlp", 8, {"hidden": 0}, "option hidden=0"),
    ("dlrm", 8, {"bottom_mlp": "512,x"}, "option bottom_mlp"),
    ("dlrm", 8, {"batch": 100}, "batch=100"),
])
def test_generate_refuses_bad_parameters(workload, npus, options, fragment):
    with pytest.raises(ValueError) as err:
        generate(workload, npus, **options)
    assert fragment in str(err.value)


# ------------------------------------------------------------------ the command


def chakra(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHAKRA, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_cli_generate_writes_the_promised_files(tmp_path):
    out = tmp_path / "job"
    result = chakra("generate", "transformer", "--npus", 8, "--tp", 2, "--pp", 2, "--seq", 256, "-o", out,
                    "--name", "gpt")
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"gpt.{r}.et" for r in range(8)] + ["gpt.comm_groups.json"])
    assert "8 NPUs" in result.stdout and "ALL_REDUCE" in result.stdout and "COMM_SEND_NODE" in result.stdout
    groups = read_comm_groups(str(out / "gpt.comm_groups.json"))
    assert (0, 1) in groups.values() and (0, 4) in groups.values()
    assert read_table(str(out / "gpt.3.et")).num_rows > 0

    result = chakra("generate", "dlrm", "--npus", 4, "--tables", 8, "-o", out / "d", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["files"] == [f"{out / 'd'}/dlrm.{r}.et" for r in range(4)]  # no sub-groups: no group file
    assert summary["communication"]["ALL_TO_ALL"]["count"] == 8 and summary["comm_groups"] == {}


@pytest.mark.parametrize("args, fragment", [
    (["mlp", "--npus", 6, "--parallelism", "mp-dp", "--mp", 4], "--mp 4 does not divide the 6 NPUs"),
    (["mlp", "--npus", 8, "--tp", 2], "tp do not apply to workload mlp"),
    (["dlrm", "--npus", 8, "--top-mlp", "big"], "--top-mlp 'big'"),
    # issue 49: a list where one number goes was `ValueError: option hidden=...`
    (["transformer", "--npus", 8, "--hidden", "4096,4096"], "--hidden '4096,4096': expected an integer >= 1, one "
                                                             "number; chakra generate --help lists"),
    (["dlrm", "--npus", 8, "--embedding-dim", "4,4"], "lists such as 512,256 are for --bottom-mlp and --top-mlp"),
])
def test_cli_generate_bad_options_exit_2(tmp_path, args, fragment):
    result = chakra("generate", *args, "-o", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "Error:" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0]


def test_cli_generate_help_documents_every_option():
    text = chakra("generate", "--help").stdout
    for workload in WORKLOADS.values():
        assert workload.name in text
        for name in workload.options:
            assert f"--{name.replace('_', '-')}" in text
    assert "dp-mp" in text and "mp-dp" in text


# ------------------------------------------------------------------ families (the drops' generator)


def test_families_draw_valid_reproducible_jobs():
    from chakra_core.generate.families import FAMILIES, generate_family

    for family in FAMILIES:
        info, tables = generate_family(family, 4, seed=1)
        assert len(tables) == 4 and info["model"] and info["parallelism"], family
        assert check_send_recv(tables) == []
        for table in tables:
            assert [f for f in validate_table(table, family) if f.severity == "error"] == [], family
        again = generate_family(family, 4, seed=1)[1]
        assert [t.to_pylist() for t in again] == [t.to_pylist() for t in tables], family
    assert generate_family("moe", 4, seed=2)[1][0].to_pylist() != generate_family("moe", 4, seed=1)[1][0].to_pylist()
    with pytest.raises(ValueError, match="expected one of data_parallel"):
        generate_family("resnet", 4)
    with pytest.raises(ValueError, match="npus"):
        generate_family("moe", 0)


def test_transformer_ranks_derived_from_their_stage_write_the_node_by_node_bytes(tmp_path):
    # the ranks of a stage are its first rank's graph relabelled (generate/relabel.py); the
    # files are the bytes the generator wrote when it built every rank node by node (hash
    # recorded before the change), and writing the relabelled tables one by one gives them too
    import hashlib

    built = generate("transformer", 64, tp=2, pp=4, layers=8, batch=64)
    digests = []
    for folder, write in ((tmp_path / "derived", built.write), (tmp_path / "tables", built.job("transformer").write)):
        write(str(folder), "transformer")
        h = hashlib.sha256()
        for name in [f"transformer.{rank}.et" for rank in range(64)] + ["transformer.comm_groups.json"]:
            h.update((folder / name).read_bytes())
        digests.append(h.hexdigest())
    assert digests == ["4426f8659d1714aa844777112e879c32e9ea16d04e8048b3e8b2e2bc3145d87d"] * 2
    assert check_send_recv(built.tables()) == []
