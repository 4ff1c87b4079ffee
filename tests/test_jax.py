"""JAX runs into Chakra (issue 37): every shipped and held-out CPU run converts into one ET per
device that validates; per device and step, one collective node per HLO collective instruction,
of its kind, with the bytes the device passes in, over the groups replica_groups names, and one
send (and receive) per source-target pair of a collective-permute; the XPlane and the trace JSON
give the same job; without HLO the trace alone converts and the report says what is missing;
simulated as recorded, each run is within 15% of its recorded span."""

from __future__ import annotations

import json
import re
import shutil

import pyarrow as pa
import pytest

from datapaths import JAX_CPU, JAX_CPU_HELDOUT, JAX_GPU, REFERENCE_CONFIGS

from chakra_core.analysis.kernels import family
from chakra_core.analysis.validate import validate_table
from chakra_core.convert.jax.layout import is_jax_run
from chakra_core.convert.jax.run import convert_jax_run
from chakra_core.convert.sources import detect_format
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COLL, COMP, RECV, SEND
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.sim.reference import reference_network
from chakra_core.replay.plan import recorded_ns
from chakra_core.sim.config import load_system
from chakra_core.sim.engine import simulate

ALL = (0, 1, 2, 3)
RING = ((0, 1), (1, 2), (2, 3), (3, 0))
# per run, per step and device: the collectives (kind, bytes, the groups of its replica_groups)
# and collective-permutes (bytes, pairs), read off each run's step.hlo.txt by hand
EXPECTED = {
    JAX_CPU / "mlp_dp": ([("ALL_REDUCE", 4 * (512 * 1024 + 2 * 1024 * 1024 + 16 * 1024 + 1), (ALL,))], []),
    JAX_CPU / "tp_mlp": ([("ALL_REDUCE", 4 * 256 * 512, (ALL,))], []),
    JAX_CPU_HELDOUT / "dp_tp": ([("ALL_REDUCE", 4 * 128 * 512, ((0, 1), (2, 3))),
                                 ("ALL_REDUCE", 4 * (2 * 1024 * 512 + 1), ((0, 2), (1, 3)))], []),
    JAX_CPU_HELDOUT / "ring": ([("ALL_REDUCE", 4 * (4 * 256 * 256 + 1), (ALL,))], [(4 * 64 * 256, RING)] * 3),
}
RUNS = list(EXPECTED)
KIND = {v: k for k, v in pb.CollectiveCommType.items()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("jax")
    return {run: (convert_jax_run(str(run), str(out / run.name), "job"), Job.read(str(out / run.name / "job")))
            for run in RUNS}


def _steps(table: pa.Table) -> list[list[dict]]:
    """The table's rows cut at its ProfilerStep#N nodes."""
    steps: list[list[dict]] = []
    for row in table.to_pylist():
        if row["name"].startswith("ProfilerStep#"):
            steps.append([])
        steps[-1].append(row)
    return steps


def _hlo_collectives(run) -> int:
    """Collective instructions of the entry computation, counted by a plain search of the text."""
    entry = (run / "step.hlo.txt").read_text().split("\nENTRY ", 1)[1]
    return len(re.findall(r" (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)\(", entry))


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_each_device_and_step_has_the_hlo_collectives_with_their_bytes_and_groups(run, converted):
    result, job = converted[run]
    collectives, permutes = EXPECTED[run]
    assert job.npus == 4 and len(result.et_files) == 4 and result.mismatches == []
    assert result.source["steps"] == [0, 1] and result.source["reader"] == "xplane" and not result.source["missing"]
    assert len(collectives) + len(permutes) == _hlo_collectives(run)
    for device, table in enumerate(job.tables):
        steps = _steps(table)
        assert len(steps) == 2
        for rows in steps:
            found = [(KIND[r["comm_type"]], r["comm_size"],
                      ALL if r["pg_name"] == "0" else job.comm_groups[int(r["pg_name"])]) for r in rows
                     if r["type"] == COLL]
            assert found == [(kind, size, next(g for g in groups if device in g)) for kind, size, groups in collectives]
            sends = [(r["comm_dst"], r["comm_size"]) for r in rows if r["type"] == SEND]
            recvs = [(r["comm_src"], r["comm_size"]) for r in rows if r["type"] == RECV]
            assert sends == [(t, size) for size, pairs in permutes for s, t in pairs if s == device]
            assert recvs == [(s, size) for size, pairs in permutes for s, t in pairs if t == device]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_every_output_validates_and_ops_fall_into_xla_families(run, converted):
    result, job = converted[run]
    for url, table in zip(result.et_files, job.tables):
        assert [x.message for x in validate_table(table, url) if x.severity == "error"] == []
        device = [r["name"] for r in table.to_pylist() if r["type"] == COMP and not r["is_cpu_op"]]
        assert device and all(" xla:" in name for name in device)
        assert {family(name) for name in device} <= {"gemm", "fusion", "copy", "convolution", "communication", "other",
                                                     "reduction", "elementwise"}
        assert "gemm" in {family(name) for name in device}  # every model here multiplies matrices


def test_sends_meet_receives_with_matching_tags(converted):
    _, job = converted[JAX_CPU_HELDOUT / "ring"]
    sends, recvs = set(), set()
    for table in job.tables:
        for r in table.to_pylist():
            if r["type"] in (SEND, RECV):
                (sends if r["type"] == SEND else recvs).add((r["comm_src"], r["comm_dst"], r["comm_tag"], r["comm_size"]))
    assert sends == recvs and len({tag for _, _, tag, _ in sends}) == 3  # one tag per collective-permute


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_simulated_as_recorded_within_15_percent_of_the_recorded_span(run, converted):
    _, job = converted[run]
    recorded = recorded_ns(pa.concat_tables(job.tables))
    system = load_system(str(REFERENCE_CONFIGS / "Ring_4chunks.json"))
    simulated = simulate(job, reference_network(job.npus), system).finish_ns
    assert abs(simulated / recorded - 1) < 0.15, (simulated, recorded)


def test_the_trace_json_gives_the_same_job_as_the_xplane(tmp_path, converted):
    run = tmp_path / "run"
    shutil.copytree(JAX_CPU_HELDOUT / "dp_tp", run)
    for xplane in run.rglob("*.xplane.pb"):
        xplane.unlink()
    result = convert_jax_run(str(run), str(tmp_path / "out"), "job")
    assert result.source["reader"] == "trace-json"
    _, from_xplane = converted[JAX_CPU_HELDOUT / "dp_tp"]
    columns = ["name", "type", "comm_type", "comm_size", "pg_name", "data_deps", "ctrl_deps"]
    for mine, theirs in zip(Job.read(str(tmp_path / "out" / "job")).tables, from_xplane.tables):
        assert mine.select(columns).to_pylist() == theirs.select(columns).to_pylist()


def test_without_hlo_the_trace_alone_converts_and_the_report_says_what_is_missing(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(JAX_CPU_HELDOUT / "ring", run)
    shutil.rmtree(run / "hlo")
    (run / "step.hlo.txt").unlink()
    result = convert_jax_run(str(run), str(tmp_path / "out"), "job")
    report = json.loads((tmp_path / "out" / "job.report.json").read_text())
    assert any("sizes" in line and "groups" in line for line in report["source"]["missing"])
    job = Job.read(str(tmp_path / "out" / "job"))
    for table in job.tables:
        rows = table.to_pylist()
        assert [r["comm_size"] for r in rows if r["type"] == COLL] == [0, 0]  # the all-reduce of each step
        assert not [r for r in rows if r["type"] in (SEND, RECV)]  # permutes: peers unknown without HLO
    assert result.unprofiled_step_ns and len(result.unprofiled_step_ns) == 20


def test_a_run_folder_is_told_by_its_layout():
    for run in RUNS:
        assert is_jax_run(str(run)) and detect_format(str(run)) == "jax"
        assert is_jax_run(str(run / "trace"))  # the profiler's own directory is a run too
    assert not is_jax_run(str(JAX_CPU))  # a folder of runs is not one run
    assert detect_format(str(REFERENCE_CONFIGS)) == "pytorch"


def test_chakra_convert_and_stats_on_a_jax_run(tmp_path, capsys):
    from chakra_core.cli import main

    assert main(["convert", str(JAX_CPU / "tp_mlp"), "-o", str(tmp_path), "--prefix", "tp"]) == 0
    assert "made: collectives ALL_REDUCE 8" in capsys.readouterr().err
    assert main(["stats", *[str(tmp_path / f"tp.{d}.et") for d in range(4)]]) == 0
    out = capsys.readouterr().out
    assert "by family" in out and "gemm" in out and "communication" in out
    assert main(["validate", *[str(tmp_path / f"tp.{d}.et") for d in range(4)]]) == 0


def test_a_gpu_run_converts_from_its_stream_lines_and_simulates_as_recorded(tmp_path):
    """On a GPU the device plane holds the kernels on stream lines, each naming its instruction
    (here the command buffer XLA wrapped the step's ops in): one node per kernel, named by it."""
    result = convert_jax_run(str(JAX_GPU / "mlp2_dp"), str(tmp_path), "job")
    assert result.source["devices"] == 1 and result.source["steps"] == [0, 1]
    assert len(result.unprofiled_step_ns) == 20
    job = Job.read(str(tmp_path / "job"))
    kernels = [r["name"] for r in job.tables[0].to_pylist() if r["type"] == COMP and not r["is_cpu_op"]]
    assert len(kernels) == 26 and all(name.endswith("[command_buffer_1]") for name in kernels)
    assert {family(name) for name in kernels} >= {"gemm", "reduction"}
    recorded = recorded_ns(pa.concat_tables(job.tables))
    system = load_system(str(REFERENCE_CONFIGS / "Ring_4chunks.json"))
    assert abs(simulate(job, reference_network(1), system).finish_ns / recorded - 1) < 0.15
