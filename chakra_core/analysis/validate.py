"""Checks a Chakra ET node table for what makes ASTRA-sim or the reference tools fail.

    from chakra_core.analysis.validate import validate_file
    for finding in validate_file("trace.0.et"):
        print(finding.severity, finding.code, finding.message)

Every check looks at the whole table at once (numpy / pyarrow). A trace of a million nodes
validates in about 0.3 s when its ids or its file order follow the dependencies (as every
converter writes them) and in about 3-4 s when neither does (the topological sort then runs
as a Python loop). The rules are those of docs/format.md: 'Attribute value kinds' (how
feeder_v3 converts attribute values), 'What ASTRA-sim reads per node type', 'Dependencies
and issue order', 'File framing' (zero-length messages) and 'What chakra validate checks'.

Findings come back in a fixed order: by check (the order of CHECKS below), then by node id
(or by comm_type value, attribute name). Each message starts with the file path and names up
to MESSAGE_IDS node ids; Finding.node_ids holds all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.depgraph import (
    TARJAN_LIMIT,
    csr,
    cycle_candidates,
    flat_list,
    lookup,
    one_cycle,
    strongly_connected,
    to_numpy,
    walk_cycle,
)
from chakra_core.errors import ChakraError, ChakraFormatError
from chakra_core.format.columns import (
    COMM_TYPES,
    WELL_KNOWN_ATTRIBUTES,
    WELL_KNOWN_BY_NAME,
    ValueClass,
)
from chakra_core.format.etfile import read_table, table_metadata, table_source
from chakra_core.format.nodetypes import COLL, COMM_NODE_TYPES, INVALID, MEM_LOAD, MEM_STORE, NODE_TYPES, RECV, SEND
from chakra_core.format.normalize import normalize_table

ERROR = "error"
WARNING = "warning"

# Every finding code, in the order the checks run (and findings are returned).
CHECKS: dict[str, str] = {
    "unreadable": "the file cannot be decoded (truncated, corrupt, not a Chakra ET)",
    "no-nodes": "the trace has no nodes (warning)",
    "empty-version": "GlobalMetadata.version is empty (warning)",
    "duplicate-id": "a node id appears more than once",
    "self-dependency": "a node lists itself in ctrl_deps or data_deps",
    "missing-dependency": "a node depends on an id that no node in the file has",
    "cycle": "the dependency graph (data and ctrl edges) has a cycle",
    "no-root": "no node is free of dependencies, so feeder_v3 refuses the file",
    "unknown-node-type": "type is not a NodeType number",
    "invalid-node-type": "type is INVALID_NODE (warning)",
    "zero-length-node": "a node encodes to zero bytes, which the Python tools read as end of file (warning)",
    "missing-attribute": "a node lacks an attribute that ASTRA-sim requires for its type",
    "unreadable-attribute": "an attribute ASTRA-sim reads has a value kind it cannot convert",
    "unknown-comm-type": "comm_type of a collective is not a CollectiveCommType",
    "unsupported-comm-type": "comm_type of a collective that ASTRA-sim cannot simulate (warning)",
    "comm-on-cpu": "a communication node has is_cpu_op true",
    "attribute-without-value": "an attribute with no value member set",
    "nonstandard-attribute": "a well-known attribute with an unexpected kind, a doc_string, or repeated (warning)",
    "empty-involved-dim": "involved_dim is present but empty (warning)",
    "negative-value": "comm_size, num_ops, comm_src or comm_dst is negative",
}

NON_NEGATIVE = ("comm_size", "num_ops", "comm_src", "comm_dst")  # attributes that must be >= 0
MESSAGE_IDS = 10  # node ids spelled out in a message; Finding.node_ids holds them all

DEP_KINDS = ("data_deps", "ctrl_deps")

# Collectives that ASTRA-sim's Workload.cc rejects with "Unsupported collective comm type".
UNSUPPORTED_COMM_TYPES = frozenset(
    v for v, name in COMM_TYPES.items() if name in ("REDUCE", "GATHER", "SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER")
)

# What feeder_v3 (non-strict) converts to each target type (docs/format.md, 'Attribute value kinds').
INTEGER_KINDS = frozenset(
    f"{k}_val" for k in ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
                         "sfixed32", "sfixed64")
)
READABLE_KINDS: dict[ValueClass, frozenset[str]] = {
    ValueClass.BOOL: INTEGER_KINDS | {"bool_val"},
    ValueClass.INT: INTEGER_KINDS | {"bool_val"},
    ValueClass.UINT: INTEGER_KINDS | {"bool_val"},
    ValueClass.STRING: frozenset({"string_val", "bytes_val"}),
    ValueClass.BOOL_LIST: frozenset({"bool_list"}),
}
TARGET_WORDS = {
    ValueClass.BOOL: "a bool", ValueClass.INT: "an integer", ValueClass.UINT: "an integer",
    ValueClass.STRING: "a string", ValueClass.BOOL_LIST: "a bool_list",
}

# (node type, attribute, required): what ASTRA-sim's Workload.cc reads per node type
# (docs/format.md, 'What ASTRA-sim reads per node type').
NODE_ATTRIBUTES: tuple[tuple[int, str, bool], ...] = (
    (MEM_LOAD, "tensor_size", True),
    (MEM_STORE, "tensor_size", True),
    (SEND, "comm_dst", True), (SEND, "comm_size", True), (SEND, "comm_tag", True),
    (SEND, "comm_src", False), (SEND, "is_cpu_op", False), (SEND, "pg_name", False),
    (RECV, "comm_src", True), (RECV, "comm_size", True), (RECV, "comm_tag", True),
    (RECV, "comm_dst", False), (RECV, "is_cpu_op", False), (RECV, "pg_name", False),
    (COLL, "comm_type", True), (COLL, "comm_size", True),
    (COLL, "comm_priority", False), (COLL, "involved_dim", False), (COLL, "is_cpu_op", False),
    (COLL, "pg_name", False),
)


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" or "warning"
    code: str  # one of CHECKS
    path: str  # the file, or "<table>"
    node_ids: tuple[int, ...]  # every node id involved (may be empty)
    message: str  # one line naming the file and (up to MESSAGE_IDS of) the node ids

    def to_dict(self) -> dict:
        return {"severity": self.severity, "code": self.code, "path": self.path,
                "node_ids": list(self.node_ids), "message": self.message}

    def __str__(self) -> str:
        return f"{self.severity}: [{self.code}] {self.message}"


def validate_file(url: str) -> list[Finding]:
    """Findings for one .et file; a file that cannot be read gives a single "unreadable" error."""
    try:
        table = read_table(url)
    except ChakraError as exc:
        return [unreadable_finding(url, exc)]
    return validate_table(table, url)


def unreadable_finding(url: str, exc: ChakraError) -> Finding:
    """The one finding of a file that cannot be read (a ChakraFormatError names file and byte offset)."""
    node_id = getattr(exc, "node_id", None)
    message = str(exc) if isinstance(exc, ChakraFormatError) or str(exc).startswith(url) else f"{url}: {exc}"
    return Finding(ERROR, "unreadable", url, (node_id,) if node_id is not None else (), message)


def validate_table(table: pa.Table, path: str | None = None) -> list[Finding]:
    """Every finding for a node table (any subset of the node-table columns is accepted)."""
    return _Validator(normalize_table(table), path or table_source(table, "<table>")).run()


# ---------------------------------------------------------------- helpers


def _ids_text(ids) -> str:
    ids = list(ids)
    shown = ", ".join(str(i) for i in ids[:MESSAGE_IDS])
    if len(ids) > MESSAGE_IDS:
        shown += f", ... ({len(ids)} in all)"
    return shown


def _nodes_text(ids, verb: str | None = None) -> str:
    """ "node 4 has" or "nodes 4, 5 have" (verb in its plural form)."""
    ids = list(ids)
    if len(ids) != 1:
        return f"nodes {_ids_text(ids)}" + (f" {verb}" if verb else "")
    singular = {"have": "has", "carry": "carries"}.get(verb, f"{verb}s") if verb else ""
    return f"node {ids[0]}" + (f" {singular}" if verb else "")


def _type_name(t: int) -> str:
    return NODE_TYPES.get(int(t), f"type {t}")


class _OtherAttrs:
    """The other_attrs entries that matter to the checks: well-known names and valueless ones."""

    def __init__(self, table: pa.Table):
        column = table.column("other_attrs")
        lengths = to_numpy(pc.list_value_length(column), 0)
        empty = np.zeros(0, np.int64)
        self.rows, self.names, self.kinds = empty, np.zeros(0, object), np.zeros(0, object)
        self.valueless, self.doc, self.ints = np.zeros(0, bool), np.zeros(0, bool), []
        if not lengths.sum():
            return
        flat = pc.list_flatten(column)
        names = pc.struct_field(flat, "name")
        kinds = pc.struct_field(flat, "kind")
        wanted = pc.or_(pc.fill_null(pc.is_in(names, value_set=pa.array([a.name for a in WELL_KNOWN_ATTRIBUTES])),
                                     False), pc.is_null(kinds))
        idx = np.flatnonzero(to_numpy(wanted))
        if not idx.size:
            return
        take = pa.array(idx)
        sub = flat.take(take)
        self.rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)[idx]
        self.names = np.array(pc.fill_null(pc.struct_field(sub, "name"), "").to_pylist(), object)
        kind = pc.cast(pc.struct_field(sub, "kind"), pa.string())
        self.valueless = to_numpy(pc.is_null(kind))
        self.kinds = np.array(pc.fill_null(kind, "").to_pylist(), object)  # "" = no value member set
        self.doc = to_numpy(pc.is_valid(pc.struct_field(sub, "doc_string")))
        ints = pc.struct_field(sub, "int").to_pylist()
        uints = pc.struct_field(sub, "uint").to_pylist()
        bools = pc.struct_field(sub, "bool").to_pylist()
        self.ints = [i if i is not None else u if u is not None else (int(b) if b is not None else None)
                     for i, u, b in zip(ints, uints, bools)]

    def select(self, name: str, kinds: frozenset[str] | None = None, valued: bool = True) -> np.ndarray:
        """Entry positions with this name and one of these kinds (None: any kind; valued: not valueless)."""
        mask = self.names == name
        if kinds is not None:
            mask &= np.isin(self.kinds.astype(str), sorted(kinds))
        elif valued:
            mask &= ~self.valueless
        return np.flatnonzero(mask)


class _Validator:
    def __init__(self, table: pa.Table, path: str):
        self.table = table
        self.path = path
        self.n = table.num_rows
        self.findings: list[Finding] = []
        self.unreadable: set[tuple[int, str]] = set()  # (row, attribute) reported as unreadable-attribute

    def add(self, severity: str, code: str, node_ids, text: str) -> None:
        ids = tuple(node_ids.tolist() if isinstance(node_ids, np.ndarray) else node_ids)
        self.findings.append(Finding(severity, code, self.path, ids, f"{self.path}: {text}"))

    def run(self) -> list[Finding]:
        t = self.table
        self.check_metadata()
        if self.n:
            self.ids = to_numpy(t.column("id")).astype(np.uint64, copy=False)
            self.types = to_numpy(t.column("type")).astype(np.int64)
            self.uniq, self.first, self.inverse, counts = np.unique(
                self.ids, return_index=True, return_inverse=True, return_counts=True)
            self.check_duplicates(counts)
            self.check_dependencies()
            self.check_node_types()
            self.other = _OtherAttrs(t)
            self.check_zero_length()
            self.check_node_attributes()
            self.check_comm_types()
            self.check_comm_on_cpu()
            self.check_negative_values()
            self.check_other_attrs()
            self.check_involved_dim()
        return self.findings

    # ------------------------------------------------------------ metadata

    def check_metadata(self) -> None:
        if self.n == 0:
            self.add(WARNING, "no-nodes", (), "the trace has no nodes")
        try:
            version = table_metadata(self.table).version
        except Exception as exc:  # a table whose stored metadata does not parse
            self.add(WARNING, "empty-version", (), f"the global metadata does not decode ({exc})")
            return
        if not version:
            self.add(WARNING, "empty-version", (),
                     'GlobalMetadata.version is empty; no reader checks it, but writers set "0.0.4" or "1.0.0"')

    # ------------------------------------------------------------ ids and dependencies

    def check_duplicates(self, counts: np.ndarray) -> None:
        dup = np.flatnonzero(counts > 1)
        tail = " (feeder_v3 keeps the last body and merges the dependencies of all of them)"
        self.findings += [
            Finding(ERROR, "duplicate-id", self.path, (i,), f"{self.path}: node id {i} appears {c} times{tail}")
            for i, c in zip(self.uniq[dup].tolist(), counts[dup].tolist())
        ]

    def check_dependencies(self) -> None:
        n_uniq = len(self.uniq)
        kinds = []  # per dependency kind: (name, values, child rows, self mask, found mask, parent vertex)
        for kind in DEP_KINDS:
            values, rows = flat_list(self.table.column(kind), self.n)
            vertex = lookup(self.uniq, values)
            found = vertex >= 0
            is_self = values == self.ids[rows]
            kinds.append((kind, values, rows, is_self, found, vertex))

        def by_child(mask_of) -> tuple[list[int], list[int], list[int], list[int]]:
            """(child ids, kind numbers, parent ids, group starts) of the masked dependencies, sorted, unique."""
            child = np.concatenate([self.ids[r[mask_of(s, f)]] for _, _, r, s, f, _ in kinds])
            kind = np.concatenate([np.full(int(mask_of(s, f).sum()), k, np.int8)
                                   for k, (_, _, _, s, f, _) in enumerate(kinds)])
            parent = np.concatenate([v[mask_of(s, f)] for _, v, _, s, f, _ in kinds])
            order = np.lexsort((parent, kind, child))
            child, kind, parent = child[order], kind[order], parent[order]
            new = np.ones(len(child), bool)
            new[1:] = (child[1:] != child[:-1]) | (kind[1:] != kind[:-1]) | (parent[1:] != parent[:-1])
            child, kind, parent = child[new], kind[new], parent[new]
            starts = np.flatnonzero(np.r_[True, child[1:] != child[:-1]]) if len(child) else np.zeros(0, np.int64)
            return child.tolist(), kind.tolist(), parent.tolist(), starts.tolist() + [len(child)]

        # self-dependency: one finding per node id
        child, kind, _, bounds = by_child(lambda is_self, found: is_self)
        for a, b in zip(bounds, bounds[1:]):
            where = " and ".join(DEP_KINDS[k] for k in kind[a:b])
            self.findings.append(Finding(ERROR, "self-dependency", self.path, (child[a],),
                                         f"{self.path}: node {child[a]} lists itself in {where}; it can never"
                                         " become ready"))

        # missing parents: one finding per node id, naming the parents of each kind
        child, kind, parent, bounds = by_child(lambda is_self, found: ~found)
        tail = " (feeder_v3 throws 'Node <id> in data_dep/ctrl_dep graph, but not found in index')"
        for a, b in zip(bounds, bounds[1:]):
            if b - a == 1:  # the common case, kept lean for traces with a million of them
                ids, text = (child[a], parent[a]), f"{DEP_KINDS[kind[a]]} [{parent[a]}]"
            else:
                ids = (child[a], *sorted(set(parent[a:b])))
                text = "; ".join(f"{DEP_KINDS[k]} [{_ids_text(p for p, kk in zip(parent[a:b], kind[a:b]) if kk == k)}]"
                                 for k in sorted(set(kind[a:b])))
            self.findings.append(Finding(ERROR, "missing-dependency", self.path, ids,
                                         f"{self.path}: node {child[a]} depends on ids that no node in the file"
                                         f" has: {text}{tail}"))

        # the graph over unique ids: parent vertex -> child vertex, without self-loops and missing parents
        src = np.concatenate([p[f & ~s] for _, _, _, s, f, p in kinds]).astype(np.int64)
        dst = np.concatenate([self.inverse[r[f & ~s]] for _, _, r, s, f, _ in kinds]).astype(np.int64)
        self.check_cycles(n_uniq, src, dst)

        has_deps = np.zeros(n_uniq, bool)
        for _, _, rows, _, _, _ in kinds:
            has_deps[self.inverse[rows]] = True
        if has_deps.all():
            self.add(ERROR, "no-root", (),
                     f"none of the {n_uniq} node(s) is free of dependencies; feeder_v3 throws 'No dependancy free"
                     " nodes found'")

    def check_cycles(self, n_vertices: int, src: np.ndarray, dst: np.ndarray) -> None:
        if not src.size:
            return
        start = self.table.column("start_time_micros")
        timed = pc.min_max(start)["min"].as_py() != pc.min_max(start)["max"].as_py()  # else time order = id order
        orders = (None, lambda: self.first) + ((self._time_order,) if timed else ())
        candidates = cycle_candidates(n_vertices, src, dst, orders)
        verts = np.flatnonzero(candidates)
        if not verts.size:
            return
        keep = candidates[src] & candidates[dst]
        local = np.full(n_vertices, -1, np.int64)
        local[verts] = np.arange(len(verts))
        off, tgt = csr(len(verts), local[src[keep]], local[dst[keep]])
        off_l, tgt_l = off.tolist(), tgt.tolist()
        ids = self.uniq[verts].tolist()
        if len(verts) <= TARJAN_LIMIT:
            components = strongly_connected(len(verts), off_l, tgt_l)
            cycles = [(one_cycle(comp, label, off_l, tgt_l, ids), len(comp)) for comp, label in components]
            tail = ""
        else:  # too many to split into components quickly: report one cycle
            cycles = [(walk_cycle(off_l, tgt_l, ids), 0)]
            tail = f"; {len(verts)} nodes lie on or between cycles (only one cycle is reported)"
        for ring, size in sorted(cycles):
            shown = " -> ".join(str(i) for i in ring[:MESSAGE_IDS])
            if len(ring) > MESSAGE_IDS:
                shown += f" -> ... ({len(ring)} nodes)"
            shown += f" -> {ring[0]}"
            scc = f"; {size} nodes are mutually dependent in all" if size > len(ring) else ""
            self.add(ERROR, "cycle", ring,
                     f"dependency cycle {shown} (a -> b: b depends on a); feeder_v3 never issues these"
                     f" nodes nor any that depend on them{scc}{tail}")

    def _time_order(self) -> np.ndarray:
        """Position of each unique id when sorted by start time (of its first row), then by id."""
        start = to_numpy(self.table.column("start_time_micros"), 0)[self.first]
        ranks = np.empty(len(start), np.int64)
        ranks[np.lexsort((np.arange(len(start)), start))] = np.arange(len(start))
        return ranks

    # ------------------------------------------------------------ node types

    def check_node_types(self) -> None:
        known = np.array(sorted(NODE_TYPES), np.int64)
        unknown = ~np.isin(self.types, known)
        for value in np.unique(self.types[unknown]).tolist():
            ids = np.unique(self.ids[self.types == value])
            self.add(ERROR, "unknown-node-type", ids,
                     f"{_nodes_text(ids.tolist(), 'have')} type {value}, which is not a NodeType; ASTRA-sim exits with"
                     " 'Unknown node type'")
        invalid = np.unique(self.ids[self.types == INVALID])
        if invalid.size:
            self.add(WARNING, "invalid-node-type", invalid,
                     f"{_nodes_text(invalid.tolist(), 'have')} type INVALID_NODE (0); ASTRA-sim completes them at once")

    def check_zero_length(self) -> None:
        t = self.table
        zero = (self.ids == 0) & (self.types == 0)
        zero &= to_numpy(pc.equal(pc.binary_length(t.column("name")), 0), False)
        for name in ("ctrl_deps", "data_deps", "other_attrs"):
            zero &= to_numpy(pc.list_value_length(t.column(name)), 0) == 0
        for name in ("start_time_micros", "duration_micros"):
            zero &= to_numpy(t.column(name), 0) == 0
        zero &= to_numpy(pc.fill_null(pc.binary_length(t.column("unknown_fields")), 0)) == 0
        for name in ["inputs", "outputs"] + [a.name for a in WELL_KNOWN_ATTRIBUTES]:
            zero &= to_numpy(pc.is_null(t.column(name)))
        rows = np.flatnonzero(zero)
        if rows.size:
            self.add(WARNING, "zero-length-node", (0,),
                     f"{rows.size} node(s) with id 0 and every field at its default encode to a zero-length"
                     " message, which the reference Python tools read as the end of the file (rows "
                     f"{_ids_text(rows.tolist())})")

    # ------------------------------------------------------------ attributes

    def _column_valid(self, name: str) -> np.ndarray:
        return to_numpy(pc.is_valid(self.table.column(name)))

    def readable(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: the attribute is readable by feeder_v3; present with another kind; valueless entry."""
        cls = WELL_KNOWN_BY_NAME[name].value_class
        ok = self._column_valid(name)
        ok[self.other.rows[self.other.select(name, READABLE_KINDS[cls])]] = True
        wrong = np.zeros(self.n, bool)
        wrong[self.other.rows[self.other.select(name)]] = True
        valueless = np.zeros(self.n, bool)
        valueless[self.other.rows[np.flatnonzero((self.other.names == name) & self.other.valueless)]] = True
        return ok, wrong & ~ok, valueless

    def int_values(self, name: str) -> tuple[np.ndarray, dict[int, int]]:
        """(column values with nulls as 0, {row: value} for rows that have it only in other_attrs)."""
        cls = WELL_KNOWN_BY_NAME[name].value_class
        column = self.table.column(name)
        values = to_numpy(column, False if cls == ValueClass.BOOL else 0)
        valid = self._column_valid(name)
        extra: dict[int, int] = {}
        for e in self.other.select(name, READABLE_KINDS[cls]).tolist():
            row = int(self.other.rows[e])
            if not valid[row] and row not in extra and self.other.ints[e] is not None:
                extra[row] = self.other.ints[e]
        return values, extra

    def check_node_attributes(self) -> None:
        for node_type, name, required in NODE_ATTRIBUTES:
            of_type = self.types == node_type
            if not of_type.any():
                continue
            ok, wrong, valueless = self.readable(name)
            type_name = _type_name(node_type)
            if required:
                ids = np.unique(self.ids[of_type & ~ok & ~wrong & ~valueless])
                if ids.size:
                    self.add(ERROR, "missing-attribute", ids,
                             f"{type_name} {_nodes_text(ids.tolist(), 'lack')} attribute {name}, which ASTRA-sim"
                             f" requires (feeder_v3 throws 'Attribute {name} not found in node <id>')")
            rows = np.flatnonzero(of_type & wrong)
            self.unreadable.update((int(r), name) for r in rows.tolist())
            if rows.size:
                ids = np.unique(self.ids[rows])
                entries = self.other.select(name)
                kinds = sorted(set(self.other.kinds[entries[np.isin(self.other.rows[entries], rows)]].tolist()))
                cls = WELL_KNOWN_BY_NAME[name].value_class
                why = ("ASTRA-sim exits with 'Expected bool_list in involved_dim'" if name == "involved_dim"
                       else "feeder_v3 throws std::bad_cast")
                self.add(ERROR, "unreadable-attribute", ids,
                         f"{type_name} {_nodes_text(ids.tolist(), 'carry')} {name} only as {', '.join(kinds)}, which"
                         f" ASTRA-sim cannot read as {TARGET_WORDS[cls]} ({why})")

    def check_comm_types(self) -> None:
        coll = self.types == COLL
        if not coll.any():
            return
        values, extra = self.int_values("comm_type")
        valid = self._column_valid("comm_type") & coll
        by_value: dict[int, list[int]] = {}
        rows = np.flatnonzero(valid)
        for value in np.unique(values[rows]).tolist():
            by_value.setdefault(value, []).extend(self.ids[rows[values[rows] == value]].tolist())
        for row, value in extra.items():
            if coll[row]:
                by_value.setdefault(value, []).append(int(self.ids[row]))
        for value in sorted(by_value):
            ids = sorted(set(by_value[value]))
            if value not in COMM_TYPES:
                self.add(ERROR, "unknown-comm-type", ids,
                         f"COMM_COLL_NODE {_nodes_text(ids, 'have')} comm_type {value}, which is not a"
                         " CollectiveCommType (0..9)")
            elif value in UNSUPPORTED_COMM_TYPES:
                self.add(WARNING, "unsupported-comm-type", ids,
                         f"COMM_COLL_NODE {_nodes_text(ids, 'have')} comm_type {value} ({COMM_TYPES[value]}), which"
                         " ASTRA-sim cannot simulate ('Unsupported collective comm type')")

    def check_comm_on_cpu(self) -> None:
        comm = np.isin(self.types, COMM_NODE_TYPES)
        if not comm.any():
            return
        values, extra = self.int_values("is_cpu_op")
        on_cpu = values.astype(bool)
        for row, value in extra.items():
            on_cpu[row] = bool(value)
        ids = np.unique(self.ids[comm & on_cpu])
        if ids.size:
            self.add(ERROR, "comm-on-cpu", ids,
                     f"communication {_nodes_text(ids.tolist(), 'have')} is_cpu_op true; ASTRA-sim throws 'Comm node"
                     " should not be on CPU'")

    def check_negative_values(self) -> None:
        """Sizes, operation counts and peer ranks below zero: no simulator can time them."""
        for name in NON_NEGATIVE:
            values, extra = self.int_values(name)
            negative = values < 0
            for row, value in extra.items():
                negative[row] = value < 0
            ids = np.unique(self.ids[negative])
            if ids.size:
                self.add(ERROR, "negative-value", ids, f"{_nodes_text(ids.tolist(), 'have')} a negative {name}")

    def check_other_attrs(self) -> None:
        o = self.other
        if not len(o.rows):
            return
        # attributes with no value member set (any name)
        valueless = np.flatnonzero(o.valueless)
        for name in sorted(set(o.names[valueless].tolist())):
            sel = valueless[o.names[valueless] == name]
            ids = np.unique(self.ids[o.rows[sel]])
            self.add(ERROR, "attribute-without-value", ids,
                     f"{_nodes_text(ids.tolist(), 'carry')} attribute {name!r} with no value member set; feeder_v3"
                     " throws 'Attribute type not supported'")
        # well-known names that did not fit their typed column
        groups: dict[tuple[str, str, str], list[int]] = {}
        valid_cache: dict[str, np.ndarray] = {}
        for e in np.flatnonzero(~o.valueless).tolist():
            name, kind, row = o.names[e], o.kinds[e], int(o.rows[e])
            if name not in WELL_KNOWN_BY_NAME or (row, name) in self.unreadable:  # already an error
                continue
            if name not in valid_cache:
                valid_cache[name] = self._column_valid(name)
            if o.doc[e]:
                reason = "doc"
            elif valid_cache[name][row]:
                reason = "repeated"
            else:
                reason = "kind"
            groups.setdefault((name, kind, reason), []).append(int(self.ids[row]))
        for (name, kind, reason), ids in sorted(groups.items()):
            ids = sorted(set(ids))
            attr = WELL_KNOWN_BY_NAME[name]
            if reason == "doc":
                text = f"attribute {name} ({kind}) with a doc_string"
            elif reason == "repeated":
                text = f"attribute {name} more than once (another as {kind}); feeder_v3 reads the first"
            elif attr.value_class in (ValueClass.INT, ValueClass.UINT) and kind in INTEGER_KINDS:
                sign = "a negative value" if attr.value_class == ValueClass.UINT else "a value above 2**63-1"
                text = f"attribute {name} as {kind} with {sign}"
            else:
                text = (f"attribute {name} as {kind}; the portable kind, which both ASTRA-sim feeders read,"
                        f" is {attr.default_kind}")
            self.add(WARNING, "nonstandard-attribute", ids, f"{_nodes_text(ids, 'carry')} {text}")

    def check_involved_dim(self) -> None:
        column = self.table.column("involved_dim")
        empty = to_numpy(pc.is_valid(column)) & (to_numpy(pc.list_value_length(column), 0) == 0)
        ids = np.unique(self.ids[empty])
        if ids.size:
            self.add(WARNING, "empty-involved-dim", ids,
                     f"{_nodes_text(ids.tolist(), 'have')} an empty involved_dim; ASTRA-sim indexes it per network"
                     " dimension without bounds checks")
