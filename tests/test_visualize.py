"""chakra_core.viz.graph: node selection (around/depth, only comm with path contraction,
max-nodes), .dot / .graphml / picture output, and the `visualize` subcommand."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import networkx as nx
import pytest
from datapaths import PYTORCH_ET
from et_builders import attr, metadata, node, write_et

from chakra_core.format.etfile import read_table
from chakra_core.viz import graph as viz
from chakra_core.viz.graph import add_visualize_parser, render, select

RESNET = PYTORCH_ET / "resnet_ddp.rank0.et.json.gz"

COMP, SEND, RECV, COLL = 4, 5, 6, 7


def ids_of(table, sel) -> list[int]:
    return table.column("id").to_numpy()[sel.rows].tolist()


def edges_of(table, sel) -> dict[tuple[int, int], int]:
    ids = table.column("id").to_numpy()
    return {(int(ids[s]), int(ids[d])): int(k) for s, d, k in zip(sel.src, sel.dst, sel.kind)}


@pytest.fixture
def chain_et(tmp_path) -> str:
    """1 -> 2 -> 3 -> 4 -> 5 (data), 2 -> 6 (control), 7 alone; plus a dangling dependency."""
    nodes = [
        node(1, "load", 2),
        node(2, "matmul", COMP, data_deps=[1], dur=10),
        node(3, "relu", COMP, data_deps=[2], ctrl_deps=[999]),
        node(4, "add", COMP, data_deps=[3]),
        node(5, "store", 3, data_deps=[4]),
        node(6, "side", COMP, ctrl_deps=[2]),
        node(7, "lonely", COMP),
    ]
    path = str(tmp_path / "chain.et")
    write_et(path, metadata(), nodes)
    return path


@pytest.fixture
def comm_et(tmp_path) -> str:
    """Communication nodes 10, 20, 30, 40 with compute nodes between them.

    10 -data-> 11 -data-> 20          (20 depends on 10 through compute only: data edge)
    10 -ctrl-> 12 -data-> 30          (30 on 10 through a mixed path: control edge)
    20 -data-> 30                     (direct data edge)
    20 -ctrl-> 30                     (... and direct control edge: both)
    30 -data-> 31 -data-> 40, 30 -ctrl-> 40   (both: data through 31, control direct)
    20 -data-> 21 -data-> 30          (adds nothing new: 20 -> 30 already data)
    """
    cs = [attr("comm_type", "int64_val", 0), attr("comm_size", "int64_val", 4096)]
    nodes = [
        node(10, "allreduce_a", COLL, attrs=cs),
        node(11, "c11", COMP, data_deps=[10]),
        node(12, "c12", COMP, ctrl_deps=[10]),
        node(20, "send", SEND, data_deps=[11], attrs=[attr("comm_size", "int64_val", 8)]),
        node(21, "c21", COMP, data_deps=[20]),
        node(30, "recv", RECV, data_deps=[12, 20, 21], ctrl_deps=[20]),
        node(31, "c31", COMP, data_deps=[30]),
        node(40, "allreduce_b", COLL, data_deps=[31], ctrl_deps=[30], attrs=cs),
        node(50, "after", COMP, data_deps=[40]),
    ]
    path = str(tmp_path / "comm.et")
    write_et(path, metadata(), nodes)
    return path


# --- selection ---------------------------------------------------------------------------------


def test_around_depth_is_exact_and_goes_both_ways(chain_et):
    table = read_table(chain_et)
    assert ids_of(table, select(table, around=3, depth=0)) == [3]
    assert ids_of(table, select(table, around=3, depth=1)) == [2, 3, 4]
    assert ids_of(table, select(table, around=3, depth=2)) == [1, 2, 3, 4, 5, 6]  # 6 via control 2 -> 6
    assert ids_of(table, select(table, around=6, depth=1)) == [2, 6]
    assert ids_of(table, select(table, around=7, depth=5)) == [7]
    sel = select(table, around=3, depth=1)
    assert edges_of(table, sel) == {(2, 3): viz.DATA, (3, 4): viz.DATA}


def test_all_edges_and_kinds(chain_et):
    table = read_table(chain_et)
    sel = select(table, max_nodes=None)
    assert ids_of(table, sel) == [1, 2, 3, 4, 5, 6, 7]
    # the dangling control dependency of 3 on 999 is left out
    assert edges_of(table, sel) == {(1, 2): 1, (2, 3): 1, (3, 4): 1, (4, 5): 1, (2, 6): 2}


def test_bad_around_and_options(chain_et):
    table = read_table(chain_et)
    with pytest.raises(ValueError, match="no node with this id"):
        select(table, around=12345)
    with pytest.raises(ValueError, match="--depth"):
        select(table, around=1, depth=-1)
    with pytest.raises(ValueError, match="--only"):
        select(table, only="compute")


def test_only_comm_contracts_paths_through_dropped_nodes(comm_et):
    table = read_table(comm_et)
    sel = select(table, only="comm")
    assert ids_of(table, sel) == [10, 20, 30, 40]
    assert edges_of(table, sel) == {
        (10, 20): viz.DATA,  # through 11, all data
        (10, 30): viz.CTRL,  # through 12, control then data
        (20, 30): viz.DATA | viz.CTRL,  # direct data + direct control
        (30, 40): viz.DATA | viz.CTRL,  # data through 31, control direct
    }
    # 50 is not kept; nothing reaches past 40. --around works over the contracted graph.
    assert ids_of(table, select(table, only="comm", around=10, depth=1)) == [10, 20, 30]
    with pytest.raises(ValueError, match="not kept by --only comm"):
        select(table, only="comm", around=11)


def test_contraction_cap_is_reported(comm_et):
    table = read_table(comm_et)
    n = table.num_rows
    _, src, dst, kind = viz.dependency_edges(table)
    keep = viz.np.isin(table.column("type").to_numpy(), viz.COMM_NODE_TYPES)
    s, d, k, cut = viz.contract(n, src, dst, kind, keep, cap=0)
    assert cut > 0
    ids = table.column("id").to_numpy()
    # direct kept -> kept edges are still found with no search budget at all
    assert {(int(ids[a]), int(ids[b])): int(c) for a, b, c in zip(s, d, k)} == {(20, 30): 3, (30, 40): 2}


def test_max_nodes_keeps_first_in_id_order_and_says_so(chain_et, tmp_path):
    table = read_table(chain_et)
    sel = select(table, max_nodes=3)
    assert ids_of(table, sel) == [1, 2, 3]
    assert (sel.selected, sel.left_out) == (7, 4)
    assert edges_of(table, sel) == {(1, 2): 1, (2, 3): 1}
    out = tmp_path / "cut.dot"
    summary = render(chain_et, str(out), max_nodes=3)
    assert (summary["nodes"], summary["edges"], summary["left_out"], summary["selected"]) == (3, 2, 4, 7)
    text = out.read_text()
    assert "4 of 7 selected nodes left out (--max-nodes 3" in text
    # with --around, the nearest nodes are kept, so the centre is never cut
    sel = select(table, around=5, depth=3, max_nodes=2)
    assert ids_of(table, sel) == [4, 5]


# --- output --------------------------------------------------------------------------------------


def test_graphml_attributes(comm_et, chain_et, tmp_path):
    out = tmp_path / "g.graphml"
    summary = render(chain_et, str(out), label_duration=True)
    assert summary["format"] == "graphml" and summary["nodes"] == 7 and summary["edges"] == 5
    g = nx.read_graphml(out)
    assert g.edges["2", "6"]["dependency"] == "control"
    assert g.edges["1", "2"]["dependency"] == "data"
    n2 = g.nodes["2"]
    assert (n2["name"], n2["type"], n2["duration"], n2["size"]) == ("matmul", "COMP", 10, 0)
    assert "matmul" in n2["label"] and "10 µs" in n2["label"]

    out = tmp_path / "c.graphml"
    render(comm_et, str(out), only="comm", label_size=True)
    g = nx.read_graphml(out)
    assert {(a, b): d["dependency"] for a, b, d in g.edges(data=True)} == {
        ("10", "20"): "data", ("10", "30"): "control", ("20", "30"): "both", ("30", "40"): "both"}
    assert g.nodes["10"]["size"] == 4096 and g.nodes["20"]["size"] == 8
    assert "comm 4.0 KiB" in g.nodes["10"]["label"]


def test_dot_text_has_colours_labels_styles_and_legend(comm_et, tmp_path):
    out = tmp_path / "c.dot"
    render(comm_et, str(out), label_duration=True, label_size=True)
    text = out.read_text()
    assert "rankdir=TB" in text
    assert "shape=box" in text
    assert viz.TYPE_COLORS[COLL] in text and viz.TYPE_COLORS[COMP] in text and viz.TYPE_COLORS[SEND] in text
    assert "allreduce_a\\nCOMM_COLL ALL_REDUCE  #10\\n0 µs\\ncomm 4.0 KiB" in text
    assert "cluster_legend" in text and "COMM_RECV" in text
    assert '10 -> 12 [style=dashed]' in text  # control
    assert "10 -> 11\n" in text  # data: plain solid arrow
    assert '20 -> 30 [style=bold]' in text  # both


def test_dot_escapes_awkward_names(tmp_path):
    name = 'a "quoted" back\\slash <html> ' + "x" * 100
    path = str(tmp_path / "odd.et")
    write_et(path, metadata(), [node(1, name, COMP), node(2, "<b>", COMP, data_deps=[1])])
    out = tmp_path / "odd.dot"
    render(path, str(out))
    text = out.read_text()
    assert 'a \\"quoted\\" back\\\\slash <html> ' in text
    assert "…" in text and "x" * 60 not in text  # truncated
    assert '"<b>\\n' in text  # quoted, not an HTML label
    import subprocess

    subprocess.run(["dot", "-Tsvg", str(out), "-o", str(tmp_path / "odd.svg")], check=True)  # Graphviz reads it


def test_unknown_extension_and_missing_dot(chain_et, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"unknown output extension \.jpg"):
        render(chain_et, str(tmp_path / "x.jpg"))
    with pytest.raises(ValueError, match="unknown output extension"):
        render(chain_et, str(tmp_path / "noext"))
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    with pytest.raises(viz.GraphvizNotFound, match="install Graphviz.*\\.dot or \\.graphml"):
        render(chain_et, str(tmp_path / "x.png"))
    render(chain_et, str(tmp_path / "x.dot"))  # needs no Graphviz


def test_memory_urls(chain_et, memfs):
    memfs.pipe("/in.et", Path(chain_et).read_bytes())
    summary = render("memory://in.et", "memory://out.graphml")
    assert summary["nodes"] == 7
    assert b"dependency" in memfs.cat("/out.graphml")


@pytest.mark.parametrize("ext,magic", [("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_pictures(comm_et, tmp_path, ext, magic):
    out = tmp_path / f"c.{ext}"
    summary = render(comm_et, str(out), label_size=True)
    assert summary["nodes"] == 9
    assert out.read_bytes().startswith(magic)


def test_cli(chain_et, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="chakra")
    sub = parser.add_subparsers(dest="command", required=True)
    add_visualize_parser(sub)
    out = tmp_path / "cli.graphml"
    args = parser.parse_args(["visualize", chain_et, "-o", str(out), "--around", "3", "--depth", "1",
                              "--max-nodes", "2", "--label-duration", "--label-size"])
    assert args.run(args) == 0
    printed = capsys.readouterr().out
    assert "2 of 7 nodes" in printed and "1 selected nodes left out" in printed
    assert sorted(nx.read_graphml(out).nodes) == ["2", "3"]
    args = parser.parse_args(["visualize", chain_et, "-o", str(out), "--only", "comm"])
    assert (args.only, args.max_nodes, args.depth, args.around) == ("comm", viz.DEFAULT_MAX_NODES, 2, None)
    with pytest.raises(SystemExit):
        parser.parse_args(["visualize", chain_et, "-o", str(out), "--only", "compute"])


# --- the real ResNet trace -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_et(tmp_path_factory) -> str:
    from chakra_core.convert.pytorch.job import convert_job

    out = tmp_path_factory.mktemp("resnet")
    convert_job(str(RESNET), str(out), "r")
    return str(out / "r.0.et")


def first_collective(table) -> int:
    ids = table.column("id").to_numpy()
    return int(ids[table.column("type").to_numpy() == COLL][0])


def test_resnet_around_collective_png_is_fast(resnet_et, tmp_path):
    table = read_table(resnet_et)
    assert table.num_rows > 10_000
    coll = first_collective(table)
    out = tmp_path / "resnet.png"
    t0 = time.perf_counter()
    summary = render(resnet_et, str(out), around=coll, depth=2, max_nodes=40, label_size=True)
    elapsed = time.perf_counter() - t0
    assert elapsed < 5, elapsed
    assert out.read_bytes().startswith(b"\x89PNG")
    assert summary["nodes"] == 40 and summary["left_out"] == summary["selected"] - 40 > 0
    sel = select(table, around=coll, depth=2, max_nodes=40)
    assert coll in ids_of(table, sel)  # the centre survives the cut


def test_resnet_selection_is_fast(resnet_et):
    table = read_table(resnet_et)
    t0 = time.perf_counter()
    sel = select(table, only="comm", max_nodes=None)
    full = select(table, max_nodes=500)
    elapsed = time.perf_counter() - t0
    assert elapsed < 3, elapsed
    types = table.column("type").to_numpy()[sel.rows]
    assert len(sel.rows) == int((table.column("type").to_numpy() >= 5).sum()) and (types >= 5).all()
    assert len(sel.src) > 0 and not sel.notes[1:]  # no contraction cap hit
    assert len(full.rows) == 500 and full.left_out == table.num_rows - 500
