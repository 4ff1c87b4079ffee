"""FlexFlow task graphs to Chakra (issue 30): per device the compute tasks, sends and receives the
graph describes, their dependencies, times in microseconds from FlexFlow's milliseconds, jobs
that simulate to their end, hostile graphs refused on one line, a 2 MB graph in seconds."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flexflow_graphs import ALEXNET, FLEXFLOW, expected_per_device, tiled_graph

from chakra_core.cli import main
from chakra_core.convert.flexflow.graph import convert_graph
from chakra_core.convert.sources import detect_format
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COMP, RECV, SEND
from chakra_core.sim.config import NetworkConfig, NetworkDim, load_system
from chakra_core.sim.engine import simulate

GRAPHS = sorted(FLEXFLOW.glob("*.graph"))
SYSTEM = Path(__file__).resolve().parents[1] / "pipeline" / "sweeps" / "ring_system.json"
CHAKRA = str(Path(sys.executable).parent / "chakra")


def ring(npus: int) -> NetworkConfig:
    return NetworkConfig(dims=(NetworkDim(topology="Ring", npus=npus, bandwidth_gbps=50.0, latency_ns=500.0),))


def rows(table) -> list[dict]:
    return table.select(["id", "name", "type", "data_deps", "duration_micros", "comm_src", "comm_dst", "comm_tag",
                         "comm_size"]).to_pylist()


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.name)
def test_each_device_has_the_tasks_sends_and_receives_of_the_graph(graph):
    job = convert_graph(str(graph)).job
    expected = expected_per_device(graph)
    assert job.npus == max(expected) + 1
    for npu, table in enumerate(job.tables):
        types = table.column("type").to_pylist()
        want = expected.get(npu, {})
        assert (types.count(COMP), types.count(SEND), types.count(RECV)) == \
            (want.get("compute", 0), want.get("sends", 0), want.get("recvs", 0)), npu


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.name)
def test_durations_are_the_graphs_milliseconds_in_microseconds(graph):
    job = convert_graph(str(graph)).job
    for npu, want in expected_per_device(graph).items():
        computes = [r for r in rows(job.tables[npu]) if r["type"] == COMP]
        total = sum(r["duration_micros"] for r in computes)
        assert abs(total - want["ms"] * 1000) <= 0.5 * len(computes), npu  # rounded to whole microseconds


def test_a_time_unit_scales_every_duration():
    in_ms, in_us = (convert_graph(str(ALEXNET), unit).job.tables[0] for unit in ("ms", "us"))
    ms = [r["duration_micros"] for r in rows(in_ms) if r["type"] == COMP]
    us = [r["duration_micros"] for r in rows(in_us) if r["type"] == COMP]
    assert max(ms) == 1125 and max(us) == 1  # AlexNet's longest task, 1.12458 ms
    assert sum(ms) > 900 * sum(us)


def test_each_transfer_is_a_send_and_a_receive_with_one_tag_and_its_size():
    text = ALEXNET.read_text()
    transfers = {m[0]: (int(m[1]), int(m[2]), int(m[3])) for m in re.findall(
        r"(node\d+) \[label=\"\{[^}]*src_device_id=(\d+)\|dst_device_id=(\d+)\|comm_size=(\d+)", text)}
    job = convert_graph(str(ALEXNET)).job
    sends = {r["name"].rsplit("(", 1)[1][:-1]: r for t in job.tables for r in rows(t) if r["type"] == SEND}
    recvs = {r["name"].rsplit("(", 1)[1][:-1]: r for t in job.tables for r in rows(t) if r["type"] == RECV}
    assert set(sends) == set(recvs) == set(transfers)
    for name, (src, dst, size) in transfers.items():
        send, recv = sends[name], recvs[name]
        assert (send["comm_src"], send["comm_dst"], send["comm_size"]) == (src, dst, size)
        assert (recv["comm_src"], recv["comm_dst"], recv["comm_size"]) == (src, dst, size)
        assert send["comm_tag"] == recv["comm_tag"]


def test_dependencies_follow_the_edges_on_each_device():
    """Dense_100's forward on device 0 feeds its backward there; device 0's Updates wait for the
    gradients the other devices' Barriers send (receives from 1, 2 and 3); device 3 sends after its Barrier."""
    job = convert_graph(str(FLEXFLOW / "mnist_mlp.4.graph")).job
    by_id = {r["id"]: r for r in rows(job.tables[0])}
    backward = next(r for r in by_id.values() if r["name"] == "Dense_100 Backward")
    assert "Dense_100 Forward" in {by_id[d]["name"] for d in backward["data_deps"]}
    updates = [r for r in by_id.values() if r["name"] == "Update Update"]
    senders = {by_id[d]["comm_src"] for u in updates for d in u["data_deps"] if by_id[d]["type"] == RECV}
    assert senders == {1, 2, 3}
    on_3 = {r["id"]: r for r in rows(job.tables[3])}
    assert all(on_3[d]["name"] == "Barrier Barrier" for r in on_3.values() if r["type"] == SEND for d in r["data_deps"])


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.name)
def test_every_converted_graph_simulates_to_its_end_on_a_ring(graph):
    job = convert_graph(str(graph)).job
    result = simulate(Job(job.tables, job.comm_groups), ring(job.npus), load_system(SYSTEM))
    computes = [sum(r["duration_micros"] for r in rows(t) if r["type"] == COMP) * 1000 for t in job.tables]
    assert [npu.nodes for npu in result.npus] == [t.num_rows for t in job.tables]  # every node ran
    assert all(npu.finish_ns >= c for npu, c in zip(result.npus, computes))
    assert result.finish_ns >= max(computes) > 0


def test_the_cli_detects_a_graph_and_writes_the_job(tmp_path, capsys):
    assert detect_format(str(ALEXNET)) == "flexflow"
    assert main(["convert", str(ALEXNET), "-o", str(tmp_path), "--prefix", "alexnet"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"alexnet.{r}.et" for r in range(4)] + ["alexnet.comm_groups.json", "alexnet.report.json"]
    report = json.loads((tmp_path / "alexnet.report.json").read_text())
    assert report["source"]["time_unit"] == "ms" and report["source"]["transfers"] == 112
    assert [r["sends"] for r in report["ranks_report"]] == [52, 20, 20, 20]
    assert json.loads((tmp_path / "alexnet.comm_groups.json").read_text()) == {}


def _refused(capsys, tmp_path, text: str, *words: str) -> None:
    path = tmp_path / "bad.graph"
    path.write_text(text)
    assert main(["convert", str(path), "-o", str(tmp_path / "out"), "--from", "flexflow"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for word in (str(path), *words):
        assert word in err, (word, err)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


COMP_LINE = '  node{n} [label="{{device_id={d}|Op_{n}|Forward|COMP_NODE|simulated_run_time={t}}}",shape=record];\n'
XFER_LINE = ('  node{n} [label="{{device_id=9|Comm|Comm|COMM_SEND_RECV_NODE|src_device_id={s}|dst_device_id={r}|'
        'comm_size={b}|run_time=0.1}}",shape=record];\n')


@pytest.mark.parametrize("body,words", [
    (COMP_LINE.format(n=0, d=0, t="0.1") + "  node0 -> node7;\n", ["line 3", "node7", "never declares"]),
    (COMP_LINE.format(n=0, d=0, t="0.1") + COMP_LINE.format(n=1, d=0, t="0.1") + "node0 -> node1;\nnode1 -> node0;\n",
     ["node node0", "cycle"]),
    (COMP_LINE.format(n=0, d=0, t="-1"), ["line 2", "node node0", "simulated_run_time"]),
    (COMP_LINE.format(n=0, d=0, t="nan"), ["node node0", "simulated_run_time"]),
    (COMP_LINE.format(n=0, d=99999999, t="1"), ["CHAKRA_MAX_NPUS"]),
    (COMP_LINE.format(n=0, d=0, t="1") + XFER_LINE.format(n=1, s=0, r=1, b="1.5"),
     ["line 3", "node node1", "comm_size"]),
    (COMP_LINE.format(n=0, d=0, t="1") + '  node1 [label="{device_id=0|x|y|z}"];\n', ["node node1", "COMP_NODE"]),
    (COMP_LINE.format(n=0, d=0, t="1") + '  node1 [label="plain"];\n', ["node node1", "record label"]),
    (COMP_LINE.format(n=0, d=0, t="1") + COMP_LINE.format(n=0, d=1, t="1"), ["line 3", "node node0", "twice"]),
    (COMP_LINE.format(n=0, d=0, t="1") + "  %%% ;\n", ["line 3", "cannot read"]),
])
def test_hostile_graphs_are_refused_on_one_line_naming_the_file_and_where(capsys, tmp_path, body, words):
    _refused(capsys, tmp_path, "digraph taskgraph {\n" + body + "}\n", *words)


def test_a_cut_graph_and_a_graph_without_compute_are_refused(capsys, tmp_path):
    whole = ALEXNET.read_text()
    _refused(capsys, tmp_path, whole[:len(whole) // 2], "line")
    _refused(capsys, tmp_path, "digraph g {\n}\n", "no compute task")
    _refused(capsys, tmp_path, "graph g { a -- b }", "line 1", "digraph")


def test_a_two_megabyte_graph_of_64_devices_converts_in_seconds_whole_process(tmp_path):
    """`chakra convert` as a fresh process: its CPU time (user + system, what the machine's other
    work does not inflate) under 5 s; the benchmark (bench_convert_sources.py) reports wall time."""
    graph = tmp_path / "big.graph"
    graph.write_text(tiled_graph(ALEXNET, 48, 64))
    assert graph.stat().st_size > 2_000_000
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run([CHAKRA, "convert", str(graph), "-o", str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=60)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert run.returncode == 0, run.stderr
    assert len(list((tmp_path / "out").glob("trace.*.et"))) == 64
    assert cpu < 5, (cpu, wall)
