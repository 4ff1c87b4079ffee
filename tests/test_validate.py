"""chakra_core.analysis.validate: every check on small hand-built graphs, the reference traces, speed."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import chakra_core
from chakra_core.analysis.validate import (
    CHECKS,
    ERROR,
    WARNING,
    Finding,
    validate_file,
    validate_table,
)
from chakra_core.format.columns import OTHER_ATTR_TYPE
from chakra_core.format.schema import et_def_pb2 as pb


def write(tmp_path: Path, columns: dict, name: str = "t.0.et", version: str = "0.0.4") -> str:
    path = str(tmp_path / name)
    chakra_core.write_table(pa.table(columns), path, metadata=pb.GlobalMetadata(version=version))
    return path


def check(tmp_path: Path, columns: dict, **kw) -> list[Finding]:
    """Writes the table, reads it back, validates; every finding names the file."""
    path = write(tmp_path, columns, **kw)
    found = validate_file(path)
    for f in found:
        assert f.path == path and f.message.startswith(path + ": ")
        assert f.severity in (ERROR, WARNING) and f.code in CHECKS
    return found


def codes(found: list[Finding], code: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.severity, f.node_ids) for f in found if f.code == code]


def comp(ids, **extra) -> dict:
    return {"id": ids, "name": [f"n{i}" for i in ids], "type": ["COMP_NODE"] * len(ids), **extra}


def attr(name: str, kind: str | None, **value) -> dict:
    return {"name": name, "kind": kind, **value}


def other_attrs(rows: list[list[dict]]) -> pa.Array:
    return pa.array(rows, pa.list_(OTHER_ATTR_TYPE))


# ---------------------------------------------------------------- clean inputs


def test_reference_traces_have_no_findings(microbenchmark_files):
    assert len(microbenchmark_files) >= 40
    for path in microbenchmark_files:
        assert validate_file(str(path)) == [], path


def test_a_complete_small_graph_is_clean(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3, 4, 5, 6],
        "name": ["load", "gemm", "ar", "send", "recv", "store"],
        "type": ["MEM_LOAD_NODE", "COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE",
                 "MEM_STORE_NODE"],
        "data_deps": [[], [1], [2], [2], [], [3, 4, 5]],
        "ctrl_deps": [[], [], [1], [], [1], []],
        "is_cpu_op": [None, False, False, False, None, None],
        "tensor_size": [64, None, None, None, None, 64],
        "comm_type": [None, None, 0, None, None, None],
        "comm_size": [None, None, 1024, 8, 8, None],
        "comm_src": [None, None, None, None, 1, None],
        "comm_dst": [None, None, None, 1, None, None],
        "comm_tag": [None, None, None, 7, 7, None],
        "involved_dim": [None, None, [True, True], None, None, None],
        "pg_name": [None, None, "0", None, None, None],
    })
    assert found == []


# ---------------------------------------------------------------- ids and dependencies


def test_duplicate_ids_one_finding_per_id(tmp_path):
    found = check(tmp_path, comp([1, 2, 2, 3, 3, 3]))
    assert codes(found, "duplicate-id") == [(ERROR, (2,)), (ERROR, (3,))]
    assert "appears 3 times" in found[-1].message


def test_self_dependency(tmp_path):
    found = check(tmp_path, comp([1, 2, 3], data_deps=[[], [2, 1], []], ctrl_deps=[[], [], [3]]))
    assert codes(found, "self-dependency") == [(ERROR, (2,)), (ERROR, (3,))]
    assert "data_deps" in found[0].message and "ctrl_deps" in found[1].message
    assert codes(found, "cycle") == []  # self-loops are reported on their own


def test_missing_dependencies_name_the_kind(tmp_path):
    found = check(tmp_path, comp([1, 2, 3, 4], data_deps=[[], [1, 9], [], [7]], ctrl_deps=[[], [], [8], [7, 6, 1]]))
    assert codes(found, "missing-dependency") == [(ERROR, (2, 9)), (ERROR, (3, 8)), (ERROR, (4, 6, 7))]
    two, three, four = [f.message for f in found if f.code == "missing-dependency"]
    assert "data_deps [9]" in two and "ctrl_deps" not in two
    assert "ctrl_deps [8]" in three and "data_deps" not in three
    assert "data_deps [7]" in four and "ctrl_deps [6, 7]" in four


def assert_real_cycle(ring: tuple[int, ...], deps: dict[int, set[int]]) -> None:
    """ring[k+1] depends on ring[k], and ring[0] on the last; no node twice."""
    assert len(ring) >= 2 and len(set(ring)) == len(ring)
    for a, b in zip(ring, ring[1:] + ring[:1]):
        assert a in deps[b], (a, b, ring)


def test_cycles_are_real_and_one_per_component(tmp_path):
    # 1 -> 2 root chain; cycle 3 -> 5 -> 7 -> 3 (data and ctrl edges mixed) with 6 after it;
    # a second component {10, 11, 12} with two cycles through 10; file order shuffled.
    deps = {1: set(), 2: {1}, 3: {7, 2}, 5: {3}, 7: {5}, 6: {7}, 10: {12, 11}, 11: {10}, 12: {11}, 20: {6}}
    ctrl = {5: [3], 10: [12]}
    ids = [7, 20, 1, 12, 5, 3, 11, 2, 10, 6]
    columns = comp(ids, data_deps=[sorted(deps[i] - set(ctrl.get(i, []))) for i in ids],
                   ctrl_deps=[ctrl.get(i, []) for i in ids])
    found = check(tmp_path, columns)
    cycles = [f for f in found if f.code == "cycle"]
    assert [f.severity for f in cycles] == [ERROR, ERROR]
    assert set(cycles[0].node_ids) == {3, 5, 7} and cycles[0].node_ids[0] == 3
    assert set(cycles[1].node_ids) <= {10, 11, 12} and cycles[1].node_ids[0] == 10
    for f in cycles:
        assert_real_cycle(f.node_ids, deps)
    assert "3 -> 5 -> 7 -> 3" in cycles[0].message
    assert codes(found, "no-root") == []  # node 1 is free


def test_random_graphs_cycles_match_networkx():
    import networkx as nx
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(2, 40))
        ids = rng.permutation(1000)[:n] + 1
        m = int(rng.integers(0, 3 * n))
        edges = {(int(ids[a]), int(ids[b])) for a, b in rng.integers(0, n, (m, 2)) if a != b}
        # mostly forward edges in id order, some backward ones
        edges = {(a, b) for a, b in edges if a < b or rng.random() < 0.15}
        deps = {int(i): set() for i in ids}
        for a, b in edges:
            deps[b].add(a)
        order = [int(i) for i in rng.permutation(ids)]
        start = rng.integers(0, 5, n).tolist()  # ties and backward edges in time order too
        table = pa.table(comp(order, data_deps=[sorted(deps[i]) for i in order], start_time_micros=start))
        found = validate_table(table)
        graph = nx.DiGraph(list(edges))
        graph.add_nodes_from(deps)
        sccs = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
        cycles = [f for f in found if f.code == "cycle"]
        assert len(cycles) == len(sccs), trial
        for f in cycles:
            assert_real_cycle(f.node_ids, deps)
            assert any(set(f.node_ids) <= c for c in sccs)


def test_start_time_order_spares_the_full_sort_and_still_sees_cycles():
    table, ids, vertex_of = chain_and_fan_out(100_000)
    # start times in dependency order (ids and file order stay shuffled)
    table = table.set_column(table.schema.get_field_index("start_time_micros"), "start_time_micros",
                             pa.array(vertex_of[table.column("id").to_numpy().astype(np.int64) - 1], pa.uint64()))
    assert [f.code for f in validate_table(table)] == ["empty-version"]
    # an edge against time order (vertex 10 now also depends on vertex 50_000) closes cycles
    deps = table.column("ctrl_deps").to_pylist()
    row = int(np.flatnonzero(table.column("id").to_numpy() == ids[10])[0])
    deps[row] = deps[row] + [int(ids[50_000])]
    table = table.set_column(table.schema.get_field_index("ctrl_deps"), "ctrl_deps",
                             pa.array(deps, pa.list_(pa.uint64())))
    cycles = [f for f in validate_table(table) if f.code == "cycle"]
    assert len(cycles) == 1 and int(ids[10]) in cycles[0].node_ids and int(ids[50_000]) in cycles[0].node_ids


def test_no_dependency_free_node(tmp_path):
    found = check(tmp_path, comp([1, 2], data_deps=[[2], [1]]))
    assert codes(found, "no-root") == [(ERROR, ())]
    assert [f.code for f in found] == ["cycle", "no-root"]
    found = check(tmp_path, comp([1], ctrl_deps=[[5]]), name="missing.0.et")
    assert [f.code for f in found] == ["missing-dependency", "no-root"]


# ---------------------------------------------------------------- node types and attributes


def test_node_types(tmp_path):
    found = check(tmp_path, {"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"], "type": [4, 0, 42, 42]})
    assert codes(found, "unknown-node-type") == [(ERROR, (3, 4))]
    assert codes(found, "invalid-node-type") == [(WARNING, (2,))]


def test_collectives_need_comm_type_and_comm_size(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3, 4], "name": list("abcd"), "type": ["COMM_COLL_NODE"] * 4,
        "comm_type": [0, None, None, 2], "comm_size": [None, 8, None, 8],
    })
    assert [(f.code, f.severity, f.node_ids) for f in found] == [
        ("missing-attribute", ERROR, (2, 3)), ("missing-attribute", ERROR, (1, 3))]
    assert "comm_type" in found[0].message and "comm_size" in found[1].message


def test_comm_type_values(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3, 4, 5, 6], "name": list("abcdef"), "type": ["COMM_COLL_NODE"] * 5 + ["COMM_SEND_NODE"],
        "comm_type": [0, 1, 9, 42, 5, 42], "comm_size": [8] * 6, "comm_dst": [None] * 5 + [1],
        "comm_tag": [None] * 5 + [1],
    })
    assert codes(found, "unsupported-comm-type") == [(WARNING, (2,)), (WARNING, (3,))]
    assert codes(found, "unknown-comm-type") == [(ERROR, (4,))]  # node 6 is a send: comm_type not checked
    assert "REDUCE" in [f for f in found if f.node_ids == (2,)][0].message


def test_send_and_recv_attributes(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3, 4], "name": list("abcd"),
        "type": ["COMM_SEND_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_RECV_NODE"],
        "comm_src": [None, None, None, 0], "comm_dst": [None, 1, 1, None],
        "comm_size": [8, 8, 8, None], "comm_tag": [None, 3, 3, 3],
    })
    missing = [(f.node_ids, re.search(r" lacks? attribute (\w+)", f.message).group(1)) for f in found]
    assert [f.code for f in found] == ["missing-attribute"] * 4
    assert missing == [((1,), "comm_dst"), ((1,), "comm_tag"), ((3,), "comm_src"), ((4,), "comm_size")]


def test_comm_nodes_must_not_be_on_cpu(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3], "name": list("abc"), "type": ["COMM_COLL_NODE", "COMM_COLL_NODE", "COMP_NODE"],
        "is_cpu_op": [True, False, True], "comm_type": [0, 0, None], "comm_size": [8, 8, None],
    })
    assert codes(found, "comm-on-cpu") == [(ERROR, (1,))]
    assert len(found) == 1


def test_memory_nodes_need_tensor_size(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3], "name": list("abc"), "type": ["MEM_LOAD_NODE", "MEM_STORE_NODE", "MEM_STORE_NODE"],
        "tensor_size": [None, None, 4],
    })
    assert codes(found, "missing-attribute") == [(ERROR, (1,)), (ERROR, (2,))]


def test_well_known_attributes_in_other_attrs(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3, 4, 5], "name": list("abcde"),
        "type": ["COMM_COLL_NODE", "COMM_COLL_NODE", "COMP_NODE", "MEM_LOAD_NODE", "COMM_COLL_NODE"],
        "comm_type": [0, 0, None, None, 0], "comm_size": [None, 8, None, None, 8],
        "tensor_size": [None, None, None, 4, None],
        "other_attrs": other_attrs([
            [attr("comm_size", "double_val", double=8.0)],  # float -> integer: bad_cast
            [attr("comm_size", "int64_val", int=16)],  # a second comm_size
            [attr("num_ops", "double_val", double=1.0)],  # only read in roofline mode
            [attr("tensor_size", "uint64_val", uint=4, doc_string="bytes")],  # a doc_string
            [attr("pg_name", "int64_val", int=1)],  # stoi needs a string: bad_cast
        ]),
    })
    # an unreadable attribute is one error; a merely unusual one a warning
    assert [(f.code, f.severity, f.node_ids) for f in found] == [
        ("unreadable-attribute", ERROR, (1,)),
        ("unreadable-attribute", ERROR, (5,)),
        ("nonstandard-attribute", WARNING, (2,)),
        ("nonstandard-attribute", WARNING, (3,)),
        ("nonstandard-attribute", WARNING, (4,)),
    ]
    messages = [f.message for f in found]
    assert "comm_size" in messages[0] and "double_val" in messages[0] and "bad_cast" in messages[0]
    assert "pg_name" in messages[1] and "int64_val" in messages[1]
    assert "more than once" in messages[2] and "int64_val" in messages[2]
    assert "num_ops as double_val" in messages[3] and "int64_val" in messages[3]
    assert "tensor_size (uint64_val) with a doc_string" in messages[4]


def test_readable_kind_in_other_attrs_counts_as_present(tmp_path):
    # comm_size with a doc_string lands in other_attrs but feeder_v3 reads it: not missing
    found = check(tmp_path, {
        "id": [1], "name": ["a"], "type": ["COMM_COLL_NODE"], "comm_type": [0],
        "other_attrs": other_attrs([[attr("comm_size", "int64_val", int=8, doc_string="bytes"),
                                     attr("is_cpu_op", "int32_val", int=1)]]),
    })
    assert [(f.code, f.node_ids) for f in found] == [
        ("comm-on-cpu", (1,)), ("nonstandard-attribute", (1,)), ("nonstandard-attribute", (1,))]
    assert "is_cpu_op as int32_val; the portable kind" in found[2].message


def test_attribute_without_value(tmp_path):
    found = check(tmp_path, comp([1, 2, 3], other_attrs=other_attrs(
        [[attr("foo", None)], [], [attr("foo", None), attr("comm_size", None)]])))
    assert [(f.code, f.severity, f.node_ids) for f in found] == [
        ("attribute-without-value", ERROR, (3,)), ("attribute-without-value", ERROR, (1, 3))]
    assert "'comm_size'" in found[0].message and "'foo'" in found[1].message


def test_empty_involved_dim(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2], "name": ["a", "b"], "type": ["COMM_COLL_NODE"] * 2, "comm_type": [0, 0],
        "comm_size": [8, 8], "involved_dim": [[], [True]],
    })
    assert codes(found, "empty-involved-dim") == [(WARNING, (1,))]
    assert len(found) == 1


def test_zero_length_node(tmp_path):
    table = pa.table({"id": [0, 1], "name": ["", "a"], "type": [0, 4]})
    found = validate_table(table)
    assert codes(found, "zero-length-node") == [(WARNING, (0,))]
    assert codes(found, "invalid-node-type") == [(WARNING, (0,))]
    assert all(f.path == "<table>" and f.message.startswith("<table>: ") for f in found)
    # an id 0 node with any field set encodes to some bytes
    assert codes(validate_table(pa.table({"id": [0], "name": ["x"], "type": [0]})), "zero-length-node") == []


def test_metadata_findings(tmp_path):
    found = check(tmp_path, comp([1]), version="")
    assert [(f.code, f.severity) for f in found] == [("empty-version", WARNING)]
    assert "0.0.4" in found[0].message
    found = check(tmp_path, comp([]), name="empty.0.et")
    assert [(f.code, f.severity, f.node_ids) for f in found] == [("no-nodes", WARNING, ())]


# ---------------------------------------------------------------- the whole report


def test_returns_every_finding_in_a_fixed_order(tmp_path):
    columns = {
        "id": [1, 2, 2, 3, 4, 5, 6, 7],
        "name": list("abcdefgh"),
        "type": ["COMP_NODE", "COMP_NODE", "COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE", "MEM_LOAD_NODE",
                 "COMP_NODE", "COMP_NODE"],
        "data_deps": [[], [1], [1], [9], [4], [], [7], [6]],
        "ctrl_deps": [[], [], [], [], [], [], [], []],
        "is_cpu_op": [None, None, None, True, None, None, None, None],
        "comm_type": [None, None, None, 3, None, None, None, None],
    }
    found = check(tmp_path, columns, version="")
    assert [f.code for f in found] == [
        "empty-version", "duplicate-id", "self-dependency", "missing-dependency", "cycle",
        "missing-attribute", "missing-attribute", "missing-attribute", "missing-attribute", "missing-attribute",
        "unsupported-comm-type", "comm-on-cpu",
    ]
    order = list(CHECKS)
    assert [order.index(f.code) for f in found] == sorted(order.index(f.code) for f in found)
    assert found == validate_file(found[0].path)  # deterministic
    assert [f.to_dict() for f in found][4] == {
        "severity": "error", "code": "cycle", "path": found[0].path, "node_ids": [6, 7], "message": found[4].message}


def test_path_defaults_to_the_tables_source(tmp_path):
    path = write(tmp_path, comp([1, 1]))
    table = chakra_core.read_table(path)
    assert validate_table(table)[0].path == path
    assert validate_table(table, "elsewhere.et")[0].message.startswith("elsewhere.et: ")
    assert validate_table(pa.table(comp([1, 1])))[0].path == "<table>"


@pytest.mark.parametrize("cut", [1, 40])
def test_truncated_file_is_one_unreadable_finding(tmp_path, microbenchmark_files, cut):
    data = microbenchmark_files[0].read_bytes()
    path = tmp_path / "cut.0.et"
    path.write_bytes(data[:-cut])
    found = validate_file(str(path))
    assert len(found) == 1
    (f,) = found
    assert (f.severity, f.code, f.path) == (ERROR, "unreadable", str(path))
    assert str(path) in f.message and "byte " in f.message and "truncated" in f.message


def test_missing_file_is_unreadable(tmp_path):
    found = validate_file(str(tmp_path / "absent.et"))
    assert [(f.code, f.severity) for f in found] == [("unreadable", ERROR)]


# ---------------------------------------------------------------- speed


def chain_and_fan_out(n: int, seed: int = 0, close_cycle: bool = False) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Vertex v depends on v-1 (data) and v//2 (ctrl); ids and file order are shuffled, so
    neither id order nor file order is topological and the full sort runs.
    Returns (table, id of each vertex, vertex of each id - 1)."""
    rng = np.random.default_rng(seed)
    ids = (rng.permutation(n) + 1).astype(np.uint64)
    v = np.arange(n)
    chain = v - 1
    if close_cycle:
        chain[0] = n - 1
    has_chain = chain >= 0
    fan = v // 2
    has_fan = fan != v
    types = np.where(v % 10 == 0, 7, 4).astype(np.int32)
    not_coll = types != 7
    table = pa.table({
        "id": ids,
        "name": pa.array(np.full(n, "op", object), pa.string()),
        "type": types,
        "data_deps": pa.ListArray.from_arrays(np.concatenate([[0], np.cumsum(has_chain)]).astype(np.int32),
                                              ids[chain[has_chain]]),
        "ctrl_deps": pa.ListArray.from_arrays(np.concatenate([[0], np.cumsum(has_fan)]).astype(np.int32),
                                              ids[fan[has_fan]]),
        "comm_type": pa.array(np.zeros(n, np.int64), mask=not_coll),
        "comm_size": pa.array(np.full(n, 1 << 20, np.int64), mask=not_coll),
    })
    vertex_of = np.empty(n, np.int64)
    vertex_of[ids.astype(np.int64) - 1] = v
    return chakra_core.normalize_table(table.take(pa.array(rng.permutation(n)))), ids, vertex_of


def test_two_hundred_thousand_nodes_validate_quickly():
    table, _, _ = chain_and_fan_out(200_000)
    start = time.perf_counter()
    found = validate_table(table)
    elapsed = time.perf_counter() - start
    assert [f.code for f in found] == ["empty-version"]
    assert elapsed < 3.0, elapsed  # about 0.5 s on one idle core


def test_a_long_cycle_is_found_quickly():
    n = 200_000
    table, _, vertex_of = chain_and_fan_out(n, seed=1, close_cycle=True)
    start = time.perf_counter()
    found = validate_table(table)
    elapsed = time.perf_counter() - start
    assert [f.code for f in found] == ["empty-version", "cycle", "no-root"]
    ring = np.array(found[1].node_ids, np.int64)
    assert len(ring) >= 2 and len(np.unique(ring)) == len(ring)
    child = vertex_of[ring - 1]
    parent = np.roll(child, 1)  # each node depends on the one before it, the first on the last
    assert np.all((parent == (child - 1) % n) | (parent == child // 2))
    assert elapsed < 4.0, elapsed  # about 0.6 s on one idle core


def test_valueless_attribute_on_a_collective(tmp_path):
    # feeder_v3 throws on reading it: one error, not also "missing" or "unreadable"
    found = check(tmp_path, {
        "id": [1, 2], "name": ["a", "b"], "type": ["COMM_COLL_NODE"] * 2, "comm_type": [0, 0], "comm_size": [None, 8],
        "other_attrs": other_attrs([[attr("comm_size", None)],
                                    [attr("pg_name", None), attr("x", "double_val", double=1.0)]]),
    })
    assert [(f.code, f.node_ids) for f in found] == [
        ("attribute-without-value", (1,)), ("attribute-without-value", (2,))]


def test_out_of_range_integers_and_list_kinds(tmp_path):
    found = check(tmp_path, {
        "id": [1, 2, 3], "name": ["a", "b", "c"], "type": ["MEM_LOAD_NODE", "COMM_COLL_NODE", "COMM_COLL_NODE"],
        "comm_type": [None, 0, 0], "comm_size": [None, None, 8],
        "other_attrs": other_attrs([
            [attr("tensor_size", "int64_val", int=-3)],  # an integer feeder_v3 reads, the uint64 column cannot hold
            [attr("comm_size", "uint64_val", uint=(1 << 63) + 1)],
            [attr("involved_dim", "int64_list", int_list=[1, 1])],  # Workload.cc wants a bool_list
        ]),
    })
    assert [(f.code, f.severity, f.node_ids) for f in found] == [
        ("unreadable-attribute", ERROR, (3,)),
        ("nonstandard-attribute", WARNING, (2,)),
        ("nonstandard-attribute", WARNING, (1,)),
    ]
    assert "Expected bool_list in involved_dim" in found[0].message
    assert "above 2**63-1" in found[1].message and "a negative value" in found[2].message
