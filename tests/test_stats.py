"""Statistics (chakra_core.analysis.stats, chakra stats) against hand-computed expectations."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from datapaths import PYTORCH_ET

from chakra_core.analysis.stats import (
    collective_rows,
    critical_path,
    job_stats,
    op_class,
    trace_row,
)
from chakra_core.cli import main
from chakra_core.format.etfile import write_table

COMP, COLL, SEND = 4, 7, 5
DATA = PYTORCH_ET


def _table(nodes: list[dict]) -> pa.Table:
    columns = {k: [n.get(k) for n in nodes] for k in ("id", "name", "type", "duration_micros", "comm_type",
                                                       "comm_size", "is_cpu_op")}
    columns["ctrl_deps"] = [n.get("ctrl", []) for n in nodes]
    columns["data_deps"] = [n.get("data", []) for n in nodes]
    return pa.table({
        "id": pa.array(columns["id"], pa.uint64()), "name": columns["name"], "type": pa.array(columns["type"], pa.int32()),
        "ctrl_deps": pa.array(columns["ctrl_deps"], pa.list_(pa.uint64())),
        "data_deps": pa.array(columns["data_deps"], pa.list_(pa.uint64())),
        "duration_micros": pa.array([d or 0 for d in columns["duration_micros"]], pa.uint64()),
        "comm_type": pa.array(columns["comm_type"], pa.int64()), "comm_size": pa.array(columns["comm_size"], pa.int64()),
        "is_cpu_op": pa.array([bool(c) for c in columns["is_cpu_op"]]),
    })


def diamond(comm_micros: int) -> pa.Table:
    #      1 (10)
    #     /      \\
    #  2 (50)   3 (comm, comm_micros)
    #     \\      /
    #      4 (5)
    return _table([
        {"id": 1, "name": "aten::mm", "type": COMP, "duration_micros": 10},
        {"id": 2, "name": "aten::relu", "type": COMP, "duration_micros": 50, "data": [1]},
        {"id": 3, "name": "all_reduce", "type": COLL, "duration_micros": comm_micros, "comm_type": 0,
         "comm_size": 1024, "ctrl": [1]},
        {"id": 4, "name": "aten::add", "type": COMP, "duration_micros": 5, "data": [2, 3]},
    ])


def test_critical_path_of_a_diamond():
    path = critical_path(diamond(20))
    assert path["nodes"] == [1, 2, 4] and path["micros"] == 65
    assert path["compute_share"] == 1.0 and path["comm_share"] == 0.0
    assert path["depth"] == 3 and path["width"] == 2
    path = critical_path(diamond(100))
    assert path["nodes"] == [1, 3, 4] and path["micros"] == 115
    assert path["comm_share"] == pytest.approx(100 / 115) and path["compute_share"] == pytest.approx(15 / 115)


def test_trace_row_counts_classes_and_quantiles():
    row = trace_row(diamond(20))
    assert row["nodes"] == 4 and row["comp_nodes"] == 3 and row["collective_nodes"] == 1
    assert row["compute_micros"] == 65 and row["collective_bytes"] == 1024 and row["message_max"] == 1024
    assert json.loads(row["compute_by_class"]) == {"gemm": [1, 10], "elementwise": [2, 55]}
    assert json.loads(row["comm_by_kind"]) == {"all_reduce": [1, 1024]}
    assert json.loads(row["node_types"]) == {"COMP_NODE": 3, "COMM_COLL_NODE": 1}
    assert op_class("volta_sgemm_128x64_nn") == "gemm" and op_class("aten::convolution") == "convolution"


def test_an_empty_trace_has_zero_statistics():
    row = trace_row(_table([]))
    assert (row["nodes"], row["critical_path_micros"], row["missing_parents"], row["cycle_edges_set_aside"]) == (0,) * 4


def test_a_cycle_is_set_aside_and_counted():
    table = _table([{"id": 1, "name": "a", "type": COMP, "data": [2]}, {"id": 2, "name": "b", "type": COMP, "data": [1]}])
    path = critical_path(table)  # 1 -> 2 is kept (forward in the file), 2 -> 1 closes the cycle
    assert (path["nodes"], path["cycle_edges_set_aside"], path["cycle_edge_examples"]) == ([1, 2], 1, ["2 -> 1"])


def test_imbalance_of_a_skewed_job():
    rows, collectives = {}, {}
    for rank, (size, compute) in enumerate([(1000, 100), (1000, 100), (4000, 150)]):  # rank 2 sends 4x, computes 1.5x
        table = _table([{"id": 1, "name": "aten::mm", "type": COMP, "duration_micros": compute},
                        {"id": 2, "name": "all_to_all", "type": COLL, "comm_type": 6, "comm_size": size, "data": [1]}])
        rows[rank], collectives[rank] = trace_row(table), collective_rows(table)
    stats = job_stats(rows, collectives)
    assert stats["bytes_imbalance"]["max_over_mean"] == pytest.approx(4000 / 2000)
    assert stats["bytes_imbalance"]["max_over_min"] == pytest.approx(4.0) and stats["bytes_imbalance"]["max_rank"] == 2
    assert stats["count_imbalance"]["max_over_mean"] == 1.0
    assert stats["compute_median_micros"] == 100 and stats["compute_by_rank"] == {0: 100, 1: 100, 2: 150}


def test_real_resnet_trace_and_the_cli(tmp_path, capsys):
    from chakra_core.convert.pytorch.job import convert_job

    result = convert_job(str(DATA / "resnet_ddp.rank0.et.json.gz"), str(tmp_path / "out"), "r")
    assert main(["stats", result.et_files[0], "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["traces"][0]
    assert json.loads(row["comm_by_kind"]) == {"all_reduce": [15, row["collective_bytes"] - 638712],
                                               "broadcast": [6, 638712]}
    assert row["critical_path_nodes"] == row["depth"] > 10_000  # no durations: the longest chain by nodes
    assert main(["stats", result.et_files[0], "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("path,nodes,")


def test_cli_job_statistics_for_rank_files(tmp_path, capsys):
    for rank, size in enumerate([100, 300]):
        write_table(_table([{"id": 1, "name": "x", "type": COLL, "comm_type": 0, "comm_size": size}]),
                    str(tmp_path / f"job.{rank}.et"))
    assert main(["stats", str(tmp_path / "job.0.et"), str(tmp_path / "job.1.et"), "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["jobs"][0]
    assert job["ranks"] == 2 and job["bytes_imbalance"]["max_over_min"] == 3.0
