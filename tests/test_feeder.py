"""chakra_core.sim.workload.feeder: feeder_v3 issuability on hand-built graphs, errors, the reference traces, speed."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import chakra_core
from chakra_core.errors import ChakraError
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.sim.workload.feeder import FeederError, GraphFeeder, UnknownNodeError


def table(ids, data=None, ctrl=None, **extra) -> pa.Table:
    columns = {"id": pa.array(ids, pa.uint64())}
    if data is not None:
        columns["data_deps"] = pa.array(data, pa.list_(pa.uint64()))
    if ctrl is not None:
        columns["ctrl_deps"] = pa.array(ctrl, pa.list_(pa.uint64()))
    columns.update(extra)
    return chakra_core.normalize_table(pa.table(columns))


def feeder(ids, data=None, ctrl=None, **extra) -> GraphFeeder:
    return GraphFeeder(table(ids, data, ctrl, **extra), path="hand.et")


def drain(f: GraphFeeder) -> list[int]:
    """Issue order (ids) of the plain loop next_issuable -> free_children."""
    order = []
    while f.has_nodes_to_issue():
        i = f.next_issuable()
        order.append(int(f.ids[i]))
        f.free_children(i)
    assert f.next_issuable() is None and f.remaining == 0 and f.unfinished() == []
    return order


def id_set(f: GraphFeeder, indices) -> list[int]:
    return sorted(int(f.ids[i]) for i in indices)


# ------------------------------------------------------------ issue order and gating


def test_chain():
    f = feeder([0, 1, 2, 3], data=[[], [0], [1], [2]])
    assert f.issuable() == [0] and f.remaining == 4 and len(f) == 4 and f.num_edges == 3
    for k in range(4):
        assert f.has_nodes_to_issue()
        i = f.next_issuable()
        assert f.ids[i] == k and not f.has_nodes_to_issue() and f.next_issuable() is None
        freed = f.free_children(i)
        assert id_set(f, freed) == ([k + 1] if k < 3 else [])
        assert f.remaining == 3 - k
    assert not f.has_nodes_to_issue()


def test_diamond():
    f = feeder([10, 11, 12, 13], data=[[], [10], [10], [11, 12]])
    a = f.next_issuable()
    assert id_set(f, f.free_children(a)) == [11, 12]
    assert id_set(f, f.issuable()) == [11, 12]
    b = f.next_issuable()
    assert f.ids[b] == 11 and f.free_children(b) == []  # 13 still waits on 12
    assert f.waiting_on(f.lookup(13)) == [12]
    c = f.next_issuable()
    assert f.ids[c] == 12 and id_set(f, f.free_children(c)) == [13]
    assert drain(f) == [13]


def test_fan_out_fan_in():
    # 0 fans out to 1..5; 6 fans in from all of them; 7 depends on 6 and 0
    data = [[]] + [[0]] * 5 + [[1, 2, 3, 4, 5], [6, 0]]
    f = feeder(list(range(8)), data=data)
    assert f.issuable() == [0]
    root = f.next_issuable()
    assert id_set(f, f.free_children(root)) == [1, 2, 3, 4, 5]
    for k in (1, 2, 3, 4):
        i = f.next_issuable()
        assert f.ids[i] == k and f.free_children(i) == []
    assert f.waiting_on(f.lookup(6)) == [5] and f.waiting_on(f.lookup(7)) == [6]
    i = f.next_issuable()
    assert id_set(f, f.free_children(i)) == [6]
    assert drain(f) == [6, 7]


def test_ctrl_deps_gate_issue():
    # the legacy feeder ignores ctrl_deps and would issue 1 at once; feeder_v3 does not
    f = feeder([0, 1, 2], data=[[], [], [1]], ctrl=[[], [0], [0]])
    assert f.issuable() == [f.lookup(0)]
    assert f.waiting_on(f.lookup(1)) == [0] and f.waiting_on(f.lookup(2)) == [0, 1]
    assert drain(f) == [0, 1, 2]


def test_ctrl_only_graph():
    f = feeder([5, 6, 7], ctrl=[[6], [], [5]])
    assert drain(f) == [6, 5, 7]


def test_parent_listed_twice_and_in_both_kinds_counts_once():
    f = feeder([0, 1, 2], data=[[], [0, 0], [0, 1]], ctrl=[[], [0], [1, 0, 1]])
    assert f.num_edges == 3  # 0->1, 0->2, 1->2
    assert f.parents(f.lookup(2)) == [f.lookup(0), f.lookup(1)]
    i = f.next_issuable()
    assert id_set(f, f.free_children(i)) == [1]  # 1 freed by one finish, though listed three times
    i = f.next_issuable()
    assert id_set(f, f.free_children(i)) == [2]
    assert drain(f) == [2]


def test_ascending_id_order_whatever_the_file_order():
    ids = [40, 7, 19, 3, 25, 11]
    data = [[], [], [3], [], [7, 3], [40]]
    expected = [3, 7, 19, 25, 40, 11]
    f = feeder(ids, data)
    assert id_set(f, f.issuable()) == [3, 7, 40]
    assert [int(f.ids[i]) for i in f.issuable()] == [3, 7, 40]  # snapshot is in ascending id order
    assert drain(f) == expected
    for seed in range(5):  # file order does not matter
        perm = random.Random(seed).sample(range(len(ids)), len(ids))
        g = feeder([ids[k] for k in perm], [data[k] for k in perm])
        assert drain(g) == expected


def test_issue_order_is_lowest_id_among_free_nodes_on_random_dags():
    """Against a plain-Python model of feeder_v3: pick the lowest free id, finish it, repeat."""
    rng = random.Random(1234)
    for _ in range(30):
        n = rng.randint(1, 60)
        ids = rng.sample(range(1000), n)  # topological order = list order; ids random
        data = [rng.sample(ids[:k], rng.randint(0, min(k, 3))) for k in range(n)]
        ctrl = [rng.sample(ids[:k], rng.randint(0, min(k, 2))) for k in range(n)]
        parents = {ids[k]: set(data[k]) | set(ctrl[k]) for k in range(n)}
        done: set[int] = set()
        expected = []
        while len(done) < n:
            nxt = min(i for i in ids if i not in done and parents[i] <= done)
            expected.append(nxt)
            done.add(nxt)
        perm = rng.sample(range(n), n)
        f = feeder([ids[k] for k in perm], [data[k] for k in perm], [ctrl[k] for k in perm])
        assert drain(f) == expected


def test_push_back_and_take():
    f = feeder([1, 2, 3, 4], data=[[], [], [], [1]])
    a = f.next_issuable()
    assert f.ids[a] == 1 and f.state(a) == "taken"
    f.push_back(a)  # its slot was busy
    assert f.state(a) == "issuable" and f.issuable() == [a, f.lookup(2), f.lookup(3)]
    assert f.next_issuable() == a  # the lowest id again
    f.push_back(a)
    # take a specific node out of the snapshot, as ASTRA-sim's issue loop does
    snapshot = f.issuable()
    f.take(snapshot[1])
    assert f.issuable() == [snapshot[0], snapshot[2]]
    f.push_back(snapshot[1])
    f.take(snapshot[1])
    f.push_back(snapshot[1])
    f.take(snapshot[1])  # repeated take/push_back leaves no duplicate behind
    got = []
    while (i := f.next_issuable()) is not None:
        got.append(int(f.ids[i]))
    assert got == [1, 3]
    assert not f.has_nodes_to_issue()
    for i in (f.lookup(1), f.lookup(2), f.lookup(3)):
        f.free_children(i)
    assert drain(f) == [4]


def test_free_children_returns_newly_issuable_and_adds_them():
    f = feeder([0, 1, 2, 3], data=[[], [0], [0], [0, 1]])
    root = f.next_issuable()
    freed = f.free_children(root)
    assert id_set(f, freed) == [1, 2]
    assert [int(f.ids[i]) for i in freed] == [1, 2]  # ascending id
    assert f.issuable() == freed and f.has_nodes_to_issue()
    one = f.next_issuable()
    assert id_set(f, f.free_children(one)) == [3]
    assert id_set(f, f.issuable()) == [2, 3]


def test_call_out_of_turn_is_an_error():
    f = feeder([0, 1], data=[[], [0]])
    with pytest.raises(FeederError, match="free_children: the node is issuable, not taken"):
        f.free_children(f.lookup(0))
    with pytest.raises(FeederError, match="take: the node is waiting, not issuable"):
        f.take(f.lookup(1))
    with pytest.raises(FeederError, match="push_back: the node is issuable"):
        f.push_back(f.lookup(0))
    with pytest.raises(FeederError, match="no node has index"):
        f.free_children(7)
    with pytest.raises(FeederError, match="no node has index"):
        f.take(-1)
    i = f.next_issuable()
    f.free_children(i)
    with pytest.raises(FeederError, match="node id 0: free_children: the node is finished"):
        f.free_children(i)


def test_deadlock_report():
    f = feeder([0, 1, 2, 3], data=[[], [0], [1], [1, 2]])
    i = f.next_issuable()  # taken, never finished
    assert f.unfinished() == [0, 1, 2, 3] and f.remaining == 4
    assert not f.has_nodes_to_issue()
    assert f.waiting_on(f.lookup(3)) == [1, 2] and f.waiting_on(f.lookup(1)) == [0]
    f.free_children(i)
    assert f.unfinished() == [1, 2, 3] and f.waiting_on(f.lookup(1)) == []


def test_lookup():
    f = feeder([30, 10, 20], data=[[], [], []])
    assert [f.lookup(i) for i in (30, 10, 20)] == [0, 1, 2]
    assert f.index_of(np.uint64(20)) == 2
    assert f.ids.dtype == np.uint64 and f.ids.tolist() == [30, 10, 20]
    with pytest.raises(UnknownNodeError, match=r"^hand.et: no node has id 11$"):
        f.lookup(11)
    with pytest.raises(KeyError):
        f.lookup(-1)
    assert issubclass(FeederError, ChakraError)


def test_empty_table():
    f = feeder([], data=[])
    assert len(f) == 0 and f.remaining == 0 and not f.has_nodes_to_issue() and f.next_issuable() is None
    assert f.issuable() == [] and f.unfinished() == []


def test_missing_columns_mean_no_dependencies():
    f = GraphFeeder(pa.table({"id": pa.array([2, 1], pa.int64())}))
    assert drain(f) == [1, 2]


# ------------------------------------------------------------ errors at construction


@pytest.mark.parametrize("kind", ["data", "ctrl"])
def test_missing_parent(tmp_path: Path, kind: str):
    deps = [[], [0], [0, 77], [78]]
    path = str(tmp_path / "missing.0.et")
    chakra_core.write_table(table([0, 1, 2, 3], **{kind: deps}), path, metadata=pb.GlobalMetadata(version="0.0.4"))
    with pytest.raises(FeederError) as info:
        GraphFeeder.from_file(path)
    e = info.value
    assert e.path == path and e.node_id == 2 and e.missing_id == 77
    assert str(e).startswith(f"{path}: node id 2: depends on id 77 ({kind}_deps)")
    assert f"Node 77 in {kind}_dep graph, but not found in index" in str(e)
    assert "1 more reference(s) to absent ids" in str(e)


def test_missing_parent_reports_first_row():
    with pytest.raises(FeederError) as info:
        feeder([0, 1, 2], data=[[], [], [99]], ctrl=[[], [98], []])
    assert info.value.node_id == 1 and info.value.missing_id == 98 and "(ctrl_deps)" in str(info.value)


def assert_real_cycle(err: FeederError, t: pa.Table):
    parents = {}
    for i, d, c in zip(t.column("id").to_pylist(), t.column("data_deps").to_pylist(),
                       t.column("ctrl_deps").to_pylist()):
        parents.setdefault(i, set()).update(d, c)
    ring = err.cycle
    assert ring and len(set(ring)) == len(ring)
    for a, b in zip(ring, ring[1:] + ring[:1]):
        assert a in parents[b], f"{b} does not depend on {a}"
    if len(ring) <= 20:
        assert " -> ".join(map(str, ring)) + f" -> {ring[0]}" in str(err)
    else:  # long cycles are shortened in the message
        assert " -> ".join(map(str, ring[:20])) + f" -> ... ({len(ring)} nodes) -> {ring[0]}" in str(err)


def test_cycle_names_a_real_cycle():
    # 0 -> 1 -> 2 -> 3 -> 4 -> 2 (a cycle of three, reached from a root); 5 depends on the cycle
    t = table([0, 1, 2, 3, 4, 5], data=[[], [0], [1], [2], [3], [4]], ctrl=[[], [], [4], [], [], []])
    with pytest.raises(FeederError, match="dependency cycle") as info:
        GraphFeeder(t, "cyc.et")
    assert sorted(info.value.cycle) == [2, 3, 4]
    assert str(info.value).startswith("cyc.et: node id 2: dependency cycle 2 -> 3 -> 4 -> 2")
    assert_real_cycle(info.value, t)


def test_cycle_in_a_large_shuffled_graph():
    rng = np.random.default_rng(7)
    n = 5000
    data = [[k - 1] if k else [] for k in range(n)]
    data[1000] = [999, 4000]  # 1000 -> ... -> 4000 -> 1000
    ids = rng.permutation(n).astype(np.uint64)  # relabel: neither id nor file order follows the edges
    perm = rng.permutation(n)
    t = table([int(ids[k]) for k in perm], data=[[int(ids[p]) for p in data[k]] for k in perm])
    with pytest.raises(FeederError) as info:
        GraphFeeder(t)
    assert len(info.value.cycle) == 3001
    assert_real_cycle(info.value, t)
    assert "(3001 nodes)" in str(info.value)


def test_self_dependency_is_a_cycle():
    t = table([0, 1, 2], data=[[], [0], [2]])
    with pytest.raises(FeederError, match=r"node id 2: dependency cycle 2 -> 2") as info:
        GraphFeeder(t)
    assert info.value.cycle == [2]
    with pytest.raises(FeederError, match="cycle 2 -> 2"):
        feeder([0, 2], ctrl=[[], [2]])


def test_no_root():
    t = table([0, 1, 2], data=[[2], [0], [1]])
    with pytest.raises(FeederError, match="none of the 3 node.s. is free of dependencies") as info:
        GraphFeeder(t, "noroot.et")
    assert "No dependancy free nodes found" in str(info.value) and str(info.value).startswith("noroot.et: ")
    assert_real_cycle(info.value, t)
    with pytest.raises(FeederError, match="free of dependencies"):
        feeder([4], ctrl=[[4]])


# ------------------------------------------------------------ duplicate ids


def test_duplicate_ids_merged():
    t = table([0, 5, 1, 5, 2], data=[[], [0], [0], [1, 0], []], ctrl=[[], [2], [], [], [0]],
              name=["a", "first5", "b", "last5", "c"], duration_micros=pa.array([1, 2, 3, 4, 5], pa.uint64()))
    f = GraphFeeder(t)
    assert f.duplicates == 1 and len(f) == 4
    assert f.ids.tolist() == [0, 1, 5, 2] and f.rows.tolist() == [0, 2, 3, 4]
    five = f.lookup(5)
    assert f.waiting_on(five) == [0, 1, 2]  # union of both rows' data and ctrl deps
    merged = f.table.to_pydict()
    assert merged["name"] == ["a", "b", "last5", "c"] and merged["duration_micros"] == [1, 3, 4, 5]
    assert merged["data_deps"] == [[], [0], [0, 1], []] and merged["ctrl_deps"] == [[], [], [2], [0]]
    assert f.table.schema == chakra_core.NODE_SCHEMA
    assert drain(f) == [0, 1, 2, 5]  # issued once, after all of its merged parents


def test_table_without_duplicates_is_the_input():
    t = table([0, 1], data=[[], [0, 0]])
    assert GraphFeeder(t).table is t


# ------------------------------------------------------------ dynamic nodes


def test_add_and_remove_node():
    f = feeder([0, 1], data=[[], [0]])
    a = f.add_node(10, data_deps=[0], ctrl_deps=[1, 0])
    assert a == 2 and f.ids.tolist() == [0, 1, 10] and f.lookup(10) == 2
    assert f.state(a) == "waiting" and f.waiting_on(a) == [0, 1] and f.remaining == 3
    b = f.add_node(3)  # no parents: issuable at once
    assert f.issuable() == [0, b]
    i = f.next_issuable()
    assert id_set(f, f.free_children(i)) == [1]
    c = f.add_node(4, data_deps=[0])  # its parent has finished already
    assert f.state(c) == "issuable"
    i = f.next_issuable()
    assert f.ids[i] == 1 and id_set(f, f.free_children(i)) == [10]
    assert drain(f) == [3, 4, 10]
    f.remove_node(f.lookup(0))
    with pytest.raises(UnknownNodeError):
        f.lookup(0)
    assert f.state(0) == "removed" and f.remaining == 0
    again = f.add_node(0, data_deps=[1])  # the id is free again; its parent finished
    assert f.lookup(0) == again and f.issuable() == [again]
    with pytest.raises(FeederError, match="exists already"):
        f.add_node(1)
    with pytest.raises(FeederError, match="depends on id 99") as info:
        f.add_node(50, ctrl_deps=[99])
    assert info.value.missing_id == 99
    with pytest.raises(FeederError, match="depends on itself"):
        f.add_node(51, data_deps=[51])
    with pytest.raises(FeederError, match="remove_node: the node is issuable, not finished"):
        f.remove_node(again)


def test_added_node_waits_for_a_taken_parent():
    f = feeder([0], data=[[]])
    i = f.next_issuable()
    child = f.add_node(1, data_deps=[0])
    assert not f.has_nodes_to_issue()
    assert f.free_children(i) == [child]
    assert drain(f) == [1]


def test_remove_before_lookup_built():
    f = feeder([0, 1], data=[[], []])
    i = f.next_issuable()
    f.free_children(i)
    f.remove_node(i)
    with pytest.raises(UnknownNodeError):
        f.lookup(0)
    assert f.lookup(1) == 1


# ------------------------------------------------------------ reference traces


def test_microbenchmarks_load(microbenchmark_files):
    for path in microbenchmark_files:
        f = GraphFeeder.from_file(str(path))
        assert len(f) == 1 and f.path == str(path)
        i = f.next_issuable()
        assert i == 0 and f.free_children(i) == [] and f.remaining == 0


# ------------------------------------------------------------ speed


def chain_fan_in(n: int, shuffle: bool = False) -> pa.Table:
    """Node k depends on k-1 (data); every 8th node also on the 7 before that (ctrl fan-in)."""
    k = np.arange(n, dtype=np.int64)
    data_len = (k > 0).astype(np.int64)
    data_val = k[:-1]
    ctrl_len = np.where((k % 8 == 0) & (k >= 8), 7, 0)
    ctrl_off = np.concatenate([[0], np.cumsum(ctrl_len)])
    owner = np.repeat(k, ctrl_len)
    ctrl_val = owner - 2 - (np.arange(len(owner)) - ctrl_off[:-1][owner])
    ids = k
    if shuffle:  # random ids and file order: neither follows the dependencies
        rng = np.random.default_rng(0)
        relabel = rng.permutation(n)
        ids, data_val, ctrl_val = relabel[ids], relabel[data_val], relabel[ctrl_val]

    def lists(lengths, values):
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.uint64)))

    t = pa.table({"id": pa.array(ids.astype(np.uint64)), "data_deps": lists(data_len, data_val),
                  "ctrl_deps": lists(ctrl_len, ctrl_val)})
    if shuffle:
        t = t.take(pa.array(np.random.default_rng(1).permutation(n)))
    return chakra_core.normalize_table(t)


def timed_drain(f: GraphFeeder) -> tuple[int, float]:
    next_issuable, free_children = f.next_issuable, f.free_children
    count = 0
    start = time.perf_counter()
    while (i := next_issuable()) is not None:
        free_children(i)
        count += 1
    return count, time.perf_counter() - start


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
def test_speed_million_nodes(shuffle: bool):
    n = 1_000_000
    t = chain_fan_in(n, shuffle)
    start = time.perf_counter()
    f = GraphFeeder(t, "million.et")
    build = time.perf_counter() - start
    count, elapsed = timed_drain(f)
    assert count == n and f.remaining == 0
    layout = "shuffled ids and rows" if shuffle else "ids in dependency order"
    print(f"\nfeeder, {n} nodes, {f.num_edges} edges, {layout}:"
          f" build {build:.2f} s, drain {elapsed:.2f} s ({n / elapsed / 1e6:.2f} M nodes/s)")
    # loose bounds for a busy 2-core machine (measured: build 0.4-0.7 s ordered, 1.9-2.7 s shuffled;
    # drain 0.6-1.0 s ordered, 1.8-2.9 s shuffled)
    assert build < (15 if shuffle else 6)
    assert elapsed < 10  # at least 200k nodes per 2 s


def test_speed_wide_graph():
    """Many issuable nodes at once: the heap, push_back and issuable() at work."""
    n, width = 200_000, 1000
    k = np.arange(n, dtype=np.int64)
    lengths = (k >= width).astype(np.int64)
    values = (k - width)[k >= width]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = chakra_core.normalize_table(pa.table({
        "id": pa.array(k.astype(np.uint64)),
        "data_deps": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.uint64)))}))
    f = GraphFeeder(t)
    assert len(f.issuable()) == width
    start = time.perf_counter()
    count = 0
    while (i := f.next_issuable()) is not None:
        if count % 3 == 0:  # every third node's slot is busy once
            f.push_back(i)
            i = f.next_issuable()
        f.free_children(i)
        count += 1
    elapsed = time.perf_counter() - start
    assert count == n and f.remaining == 0
    print(f"\nfeeder, {n} nodes in {width} lanes with push_back: drain {elapsed:.2f} s")
    assert elapsed < 10
