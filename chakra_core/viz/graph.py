"""Render a Chakra ET's dependency graph: Graphviz (.dot, .png, .svg, .pdf) or GraphML.

Real traces have 10k-500k nodes, far more than a picture can show, so the nodes are selected
first, with numpy over CSR arrays (chakra_core.format.depgraph), never node by node in networkx:

* ``only="comm"``: communication nodes (COMM_SEND, COMM_RECV, COMM_COLL) only. An edge a -> b
  is kept when b depends on a directly or through dropped nodes only (paths are contracted by
  a breadth-first search from each kept node through dropped nodes; each search stops after
  CONTRACT_CAP states and all of them together after CONTRACT_BUDGET, which the picture says).
  A contracted edge is a data dependency when a path of data dependencies only exists, and a
  control dependency when another path exists (control, or data and control mixed).
* ``around=NODE, depth=K``: the nodes within K dependency hops of NODE, both directions,
  over control and data dependencies (with ``only``, hops over the contracted graph, so
  ``--only comm --around C`` shows the collectives next to C).
* ``max_nodes=N``: then the first N nodes in id order (with ``around``: the N nearest to NODE,
  ties in id order, so NODE itself is always drawn); the graph's label says how many were
  left out. 0 or None: no limit.

Edges: data dependencies solid, control dependencies dashed, both bold. In GraphML every edge
carries ``dependency`` = data / control / both.
"""

from __future__ import annotations

import argparse
import posixpath
import shutil
from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from chakra_core.errors import ChakraError
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.depgraph import flat_list, lookup, to_numpy
from chakra_core.format.nodetypes import COMM_NODE_TYPES, NODE_TYPES
from chakra_core.outputs import open_output
from chakra_core.terminal import human_bytes, printable

DATA, CTRL = 1, 2  # edge kind bits
DEPENDENCY = {DATA: "data", CTRL: "control", DATA | CTRL: "both"}
ONLY_CHOICES = ("comm",)
FORMATS = ("png", "svg", "pdf", "dot", "graphml")
IMAGE_FORMATS = ("png", "svg", "pdf")
NAME_LIMIT = 48  # characters of a node name shown in its label
CONTRACT_CAP = 50_000  # states one contraction search may visit
CONTRACT_BUDGET = 5_000_000  # states all contraction searches together may visit
PNG_DPI = 110
SPLINE_EDGE_LIMIT = 80  # more edges than this are drawn straight (curved routing is too slow)

TYPE_COLORS: dict[int, str] = {
    0: "#ffffff",  # INVALID
    1: "#d9d9d9",  # METADATA
    2: "#a6cee3",  # MEM_LOAD
    3: "#b2df8a",  # MEM_STORE
    4: "#fff2a8",  # COMP
    5: "#fdbf6f",  # COMM_SEND
    6: "#cab2d6",  # COMM_RECV
    7: "#fb9a99",  # COMM_COLL
}
UNKNOWN_COLOR = "#eeeeee"


DEFAULT_MAX_NODES = 150  # dot lays out ~150 nodes of a real trace in a few seconds; 500 can take 20 s

class GraphvizNotFound(ChakraError):
    """The Graphviz `dot` program, needed for pictures, is not installed."""


@dataclass
class Selection:
    rows: np.ndarray  # shown rows of the table, in id order
    src: np.ndarray  # edges between shown rows (row numbers), parent -> child
    dst: np.ndarray
    kind: np.ndarray  # DATA / CTRL bits
    selected: int  # nodes selected before the max_nodes cut
    left_out: int  # cut by max_nodes
    total: int  # nodes in the trace
    notes: list[str] = field(default_factory=list)


def type_name(t: int) -> str:
    name = NODE_TYPES.get(int(t), f"TYPE_{int(t)}")
    return name[:-5] if name.endswith("_NODE") else name


# ---------------------------------------------------------------------------------------------
# Edges and selection (numpy)


def dependency_edges(table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, src rows, dst rows, kind bits): one edge per (parent, child) pair, parent -> child;
    dependencies on ids that are not in the trace, and self-dependencies, are left out."""
    n = table.num_rows
    ids = to_numpy(table.column("id")).astype(np.uint64, copy=False)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    parts_src, parts_dst, parts_kind = [], [], []
    for column, bit in (("data_deps", DATA), ("ctrl_deps", CTRL)):
        values, child = flat_list(table.column(column), n)
        pos = lookup(sorted_ids, values) if n else np.zeros(0, np.int64)
        ok = pos >= 0
        parts_src.append(order[pos[ok]])
        parts_dst.append(child[ok])
        parts_kind.append(np.full(int(ok.sum()), bit, np.int64))
    src = np.concatenate(parts_src).astype(np.int64)
    dst = np.concatenate(parts_dst).astype(np.int64)
    kind = np.concatenate(parts_kind)
    ok = src != dst
    src, dst, kind = src[ok], dst[ok], kind[ok]
    return ids, *merge_edges(n, src, dst, kind)


def merge_edges(n: int, src: np.ndarray, dst: np.ndarray, kind: np.ndarray):
    """One edge per (src, dst), its kind bits or-ed together; sorted by (src, dst)."""
    if not src.size:
        return src, dst, kind
    key = src * max(n, 1) + dst
    order = np.argsort(key, kind="stable")
    key, kind = key[order], kind[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    bits = np.bitwise_or.reduceat(kind, first)
    key = key[first]
    return key // max(n, 1), key % max(n, 1), bits


def gather(off: np.ndarray, targets: np.ndarray, frontier: np.ndarray) -> np.ndarray:
    """Targets of all CSR rows in frontier, concatenated."""
    starts = off[frontier]
    lengths = off[frontier + 1] - starts
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    return targets[np.repeat(starts - (ends - lengths), lengths) + np.arange(total)]


def neighbourhood(n: int, src: np.ndarray, dst: np.ndarray, start: int, depth: int) -> np.ndarray:
    """Hops from start to each row (-1: more than depth hops away), edges followed both ways."""
    a = np.concatenate([src, dst])
    b = np.concatenate([dst, src])
    order = np.argsort(a, kind="stable")
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=off[1:])
    targets = b[order]
    hops = np.full(n, -1, np.int64)
    hops[start] = 0
    frontier = np.array([start], np.int64)
    for level in range(1, depth + 1):
        nxt = np.unique(gather(off, targets, frontier))
        nxt = nxt[hops[nxt] < 0]
        if not nxt.size:
            break
        hops[nxt] = level
        frontier = nxt
    return hops


def contract(n: int, src: np.ndarray, dst: np.ndarray, kind: np.ndarray, keep: np.ndarray,
             cap: int = CONTRACT_CAP, budget: int = CONTRACT_BUDGET):
    """Edges between kept rows: a -> b when b depends on a directly or through dropped rows only.

    A search from each kept row walks forward through dropped rows in two states (every edge so
    far a data dependency, or not) and stops at kept rows. Returns (src, dst, kind, searches cut
    short by the caps)."""
    order = np.argsort(src, kind="stable")
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=off[1:])
    off_l = off.tolist()
    tgt_l = dst[order].tolist()
    kind_l = kind[order].tolist()
    keep_l = keep.tolist()
    found: dict[tuple[int, int], int] = {}
    cut = 0
    spent = 0
    for a in np.flatnonzero(keep).tolist():
        # state 0: only data edges so far; 1: some control edge
        seen: dict[int, int] = {}
        stack: list[tuple[int, int]] = []
        steps = 0
        for i in range(off_l[a], off_l[a + 1]):
            v, k = tgt_l[i], kind_l[i]
            if keep_l[v]:  # direct edges are kept whatever the caps
                found[(a, v)] = found.get((a, v), 0) | k
                continue
            for state in ((0,) if k == DATA else (1,) if k == CTRL else (0, 1)):
                stack.append((v, state))
        while stack:
            v, state = stack.pop()
            bit = 1 << state
            if keep_l[v]:
                if v != a:
                    found[(a, v)] = found.get((a, v), 0) | (DATA if state == 0 else CTRL)
                continue
            mask = seen.get(v, 0)
            if mask & bit:
                continue
            seen[v] = mask | bit
            steps += 1
            if steps > cap or spent + steps > budget:
                cut += 1
                break
            for i in range(off_l[v], off_l[v + 1]):
                w, k = tgt_l[i], kind_l[i]
                if state == 0 and k & DATA:
                    stack.append((w, 0))
                if state == 1 or k & CTRL:
                    stack.append((w, 1))
        spent += steps
    if not found:
        z = np.zeros(0, np.int64)
        return z, z, z, cut
    pairs = np.array(list(found.keys()), np.int64)
    bits = np.array(list(found.values()), np.int64)
    s, d, k = merge_edges(n, pairs[:, 0], pairs[:, 1], bits)
    return s, d, k, cut


def select(table, *, around: int | None = None, depth: int = 2, only: str | None = None,
           max_nodes: int | None = DEFAULT_MAX_NODES) -> Selection:
    """The nodes and edges to draw (see the module docstring)."""
    if only is not None and only not in ONLY_CHOICES:
        raise ValueError(f"--only {only!r}: expected one of {', '.join(ONLY_CHOICES)}")
    if depth < 0:
        raise ValueError(f"--depth {depth}: expected 0 or more hops")
    if max_nodes is not None and max_nodes < 0:
        raise ValueError(f"--max-nodes {max_nodes}: expected 0 (no limit) or more")
    n = table.num_rows
    ids, src, dst, kind = dependency_edges(table)
    notes: list[str] = []
    keep = np.ones(n, bool)
    if only == "comm":
        types = to_numpy(table.column("type"))
        keep = np.isin(types, COMM_NODE_TYPES)
        src, dst, kind, cut = contract(n, src, dst, kind, keep)
        notes.append("communication nodes only; paths through other nodes contracted")
        if cut:
            notes.append(f"path contraction stopped early from {cut} node(s): some edges may be missing")
    if around is not None:
        hit = np.flatnonzero(ids == np.uint64(around)) if around >= 0 else np.zeros(0, np.int64)
        if not hit.size:
            raise ValueError(f"--around {around}: no node with this id in the trace")
        start = int(hit[0])
        if not keep[start]:
            raise ValueError(f"--around {around}: node {around} ({type_name(to_numpy(table.column('type'))[start])}) "
                             f"is not kept by --only {only}")
        hops = neighbourhood(n, src, dst, start, depth)
        keep &= hops >= 0
        notes.append(f"within {depth} hop(s) of node {around}")
    rows = np.flatnonzero(keep)
    if around is not None:  # nearest first, so that a cut keeps node `around` and its neighbours
        rows = rows[np.lexsort((ids[rows], hops[rows]))]
    else:
        rows = rows[np.argsort(ids[rows], kind="stable")]
    selected = len(rows)
    left_out = 0
    if max_nodes and selected > max_nodes:
        left_out = selected - max_nodes
        rows = rows[:max_nodes]
        kept = f"the {max_nodes} nearest" if around is not None else f"the first {max_nodes} in id order"
        notes.append(f"{left_out} of {selected} selected nodes left out (--max-nodes {max_nodes}: {kept} shown)")
    rows = rows[np.argsort(ids[rows], kind="stable")]  # drawn in id order
    shown = np.zeros(n, bool)
    shown[rows] = True
    ok = shown[src] & shown[dst]
    return Selection(rows, src[ok], dst[ok], kind[ok], selected, left_out, n, notes)


# ---------------------------------------------------------------------------------------------
# Output




def _column(table, name: str, fill):
    if name not in table.column_names:
        return [fill] * table.num_rows
    col = table.column(name)
    return (pc.fill_null(col, fill) if col.null_count else col).to_pylist()


@dataclass
class NodeInfo:
    id: int
    name: str
    type: int
    duration: int
    size: int  # comm_size for communication nodes, else tensor_size; 0 if absent
    comm_type: int | None


def node_infos(table, rows: np.ndarray) -> list[NodeInfo]:
    sub = table.take(rows) if len(rows) else table.slice(0, 0)
    ids = sub.column("id").to_pylist()
    names = sub.column("name").to_pylist()
    types = sub.column("type").to_pylist()
    durs = _column(sub, "duration_micros", 0)
    comm_size = _column(sub, "comm_size", None)
    tensor_size = _column(sub, "tensor_size", None)
    comm_type = _column(sub, "comm_type", None)
    out = []
    for i in range(len(ids)):
        size = comm_size[i] if comm_size[i] is not None else tensor_size[i]
        ct = comm_type[i] if types[i] == 7 else None
        out.append(NodeInfo(ids[i], printable(names[i] or ""), types[i], int(durs[i] or 0), int(size or 0), ct))
    return out


def label_lines(info: NodeInfo, label_duration: bool, label_size: bool) -> list[str]:
    name = " ".join(info.name.split())  # no newlines or tabs
    if len(name) > NAME_LIMIT:
        name = name[:NAME_LIMIT - 1] + "…"
    kind = type_name(info.type)
    if info.comm_type is not None:
        kind += " " + COMM_TYPES.get(int(info.comm_type), f"comm_type {info.comm_type}")
    lines = [name or "(no name)", f"{kind}  #{info.id}"]
    if label_duration:
        lines.append(f"{info.duration} µs")
    if label_size and info.size:
        what = "comm" if info.type in COMM_NODE_TYPES else "tensor"
        lines.append(f"{what} {human_bytes(info.size)}")
    return lines


def dot_escape(text: str) -> str:
    """Text for a double-quoted DOT escString: backslashes and quotes escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_label(lines: list[str]):
    import graphviz

    return graphviz.nohtml("\\n".join(dot_escape(line) for line in lines))


def title_lines(source: str, sel: Selection, edges: int) -> list[str]:
    return [f"{posixpath.basename(source.rstrip('/')) or source}: {len(sel.rows)} of {sel.total} nodes, "
            f"{edges} edges", *sel.notes]


def build_dot(table, sel: Selection, source: str, *, label_duration: bool, label_size: bool, fmt: str):
    import graphviz

    infos = node_infos(table, sel.rows)
    g = graphviz.Digraph("chakra_et", format=fmt if fmt in IMAGE_FORMATS else None)
    g.attr(rankdir="TB", labelloc="t", fontname="Helvetica", fontsize="14",
           label=_dot_label(title_lines(source, sel, len(sel.src))))
    if fmt == "png":
        g.attr(dpi=str(PNG_DPI))
    # dot's x-coordinate network simplex and spline routing take minutes on dense dependency
    # graphs (long control chains, fan-ins of 100+ edges): bound the one, straighten the other.
    g.attr(nslimit="1", nslimit1="1")
    if len(sel.src) > SPLINE_EDGE_LIMIT:
        g.attr(splines="line", mclimit="0.3")
    g.attr("node", shape="box", style="filled,rounded", fontname="Helvetica", fontsize="10", margin="0.1,0.04")
    g.attr("edge", arrowsize="0.7", color="#555555", fontname="Helvetica")
    for info in infos:
        g.node(str(info.id), label=_dot_label(label_lines(info, label_duration, label_size)),
               fillcolor=TYPE_COLORS.get(info.type, UNKNOWN_COLOR))
    ids = table.column("id").to_numpy()
    for s, d, k in zip(ids[sel.src].tolist(), ids[sel.dst].tolist(), sel.kind.tolist()):
        attrs = {}
        if k == CTRL:
            attrs["style"] = "dashed"
        elif k == DATA | CTRL:
            attrs["style"] = "bold"
        g.edge(str(s), str(d), **attrs)
    types = sorted({info.type for info in infos})
    if types:
        with g.subgraph(name="cluster_legend") as legend:
            legend.attr(label="legend", fontsize="11", style="rounded", color="#999999", rank="sink")
            previous = None
            for t in types:
                key = f"legend_type_{t}"
                legend.node(key, label=type_name(t), fillcolor=TYPE_COLORS.get(t, UNKNOWN_COLOR), fontsize="9")
                if previous is not None:
                    legend.edge(previous, key, style="invis")
                previous = key
            legend.node("legend_edge_a", label="", shape="point", width="0.05")
            legend.node("legend_edge_b", label="", shape="point", width="0.05")
            legend.node("legend_edge_c", label="", shape="point", width="0.05")
            legend.node("legend_edge_d", label="", shape="point", width="0.05")
            legend.edge(previous, "legend_edge_a", style="invis")
            legend.edge("legend_edge_a", "legend_edge_b", label=" data", fontsize="9")
            legend.edge("legend_edge_b", "legend_edge_c", label=" control", style="dashed", fontsize="9")
            legend.edge("legend_edge_c", "legend_edge_d", label=" both", style="bold", fontsize="9")
    return g


def build_networkx(table, sel: Selection, *, label_duration: bool, label_size: bool):
    import networkx as nx

    g = nx.DiGraph()
    for info in node_infos(table, sel.rows):
        g.add_node(str(info.id), label="\n".join(label_lines(info, label_duration, label_size)),
                   type=type_name(info.type), name=info.name, duration=info.duration, size=info.size)
    ids = table.column("id").to_numpy()
    for s, d, k in zip(ids[sel.src].tolist(), ids[sel.dst].tolist(), sel.kind.tolist()):
        g.add_edge(str(s), str(d), dependency=DEPENDENCY[k])
    return g


def output_format(out: str) -> str:
    ext = posixpath.splitext(str(out).rstrip("/"))[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise ValueError(f"{out}: unknown output extension {('.' + ext) if ext else '(none)'}; "
                         f"expected one of {', '.join('.' + f for f in FORMATS)}")
    return ext


def require_dot() -> None:
    if shutil.which("dot") is None:
        raise GraphvizNotFound("the Graphviz `dot` program was not found on PATH; install Graphviz "
                               "(e.g. `apt-get install graphviz`, `brew install graphviz`) to draw "
                               ".png/.svg/.pdf, or write .dot or .graphml, which need no Graphviz")


def render(url: str, out: str, *, around: int | None = None, depth: int = 2, only: str | None = None,
           max_nodes: int | None = DEFAULT_MAX_NODES, label_duration: bool = False, label_size: bool = False) -> dict:
    """Draw the dependency graph of the trace at url into out (format from its extension).

    Returns a summary: nodes (shown), edges, selected (before the max_nodes cut), left_out,
    total (nodes in the trace), output, format, notes."""
    from chakra_core.format.etfile import read_table

    fmt = output_format(out)
    if fmt in IMAGE_FORMATS:
        require_dot()  # before the (possibly long) read
    table = read_table(url)
    sel = select(table, around=around, depth=depth, only=only, max_nodes=max_nodes)
    if fmt == "graphml":
        import networkx as nx

        g = build_networkx(table, sel, label_duration=label_duration, label_size=label_size)
        with open_output(out, "wb") as f:
            nx.write_graphml(g, f)
    else:
        g = build_dot(table, sel, url, label_duration=label_duration, label_size=label_size, fmt=fmt)
        if fmt == "dot":
            data = g.source.encode()
        else:
            import graphviz

            try:
                data = g.pipe(format=fmt)
            except graphviz.ExecutableNotFound as exc:
                raise GraphvizNotFound(f"Graphviz `dot` could not be run ({exc}); install Graphviz or "
                                       "write .dot or .graphml") from None
        with open_output(out, "wb") as f:
            f.write(data)
    return {"output": out, "format": fmt, "nodes": int(len(sel.rows)), "edges": int(len(sel.src)),
            "selected": sel.selected, "left_out": sel.left_out, "total": sel.total, "notes": list(sel.notes)}


# ---------------------------------------------------------------------------------------------
# CLI


def cmd_visualize(args: argparse.Namespace) -> int:
    summary = render(args.input, args.output, around=args.around, depth=args.depth, only=args.only,
                     max_nodes=args.max_nodes, label_duration=args.label_duration, label_size=args.label_size)
    print(f"{summary['output']}: {summary['nodes']} of {summary['total']} nodes, {summary['edges']} edges"
          + (f", {summary['left_out']} selected nodes left out (--max-nodes)" if summary["left_out"] else ""))
    for note in summary["notes"]:
        print(f"  {note}")
    return 0


def add_visualize_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "visualize", help="draw a trace's dependency graph (.png, .svg, .pdf, .dot, .graphml)",
        description="Draw the dependency graph of IN.et: nodes coloured by type, data dependencies solid, "
        "control dependencies dashed. Big traces: pick nodes with --around/--depth and --only, and at most "
        "--max-nodes are drawn. .png/.svg/.pdf need the Graphviz `dot` program; .dot and .graphml do not.")
    p.add_argument("input", metavar="IN.et", help="trace file (any fsspec URL)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output file; its extension picks the format: " + ", ".join("." + f for f in FORMATS))
    p.add_argument("--around", type=int, metavar="NODE", help="only nodes within --depth hops of this node id")
    p.add_argument("--depth", type=int, default=2, metavar="K", help="hops for --around, both directions (default 2)")
    p.add_argument("--only", choices=ONLY_CHOICES,
                   help="comm: communication nodes only, paths through other nodes contracted into edges")
    p.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES, metavar="N",
                   help=f"draw at most N nodes: the nearest to --around NODE, else the first in id order "
                        f"(default {DEFAULT_MAX_NODES}; 0 = no limit; Graphviz's layout slows down fast beyond it)")
    p.add_argument("--label-duration", action="store_true", help="show each node's duration (µs)")
    p.add_argument("--label-size", action="store_true", help="show communication / tensor sizes")
    p.set_defaults(run=cmd_visualize)
    return p


__all__ = ["render", "select", "add_visualize_parser", "cmd_visualize", "GraphvizNotFound", "Selection"]
