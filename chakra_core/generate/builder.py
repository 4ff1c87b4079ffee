"""Describe per-NPU graphs and write one Chakra ET per rank.

    job = JobBuilder(4, flops_per_s=50e12)
    tp = job.group([0, 1])                          # communicator "1"
    for r in range(4):
        g = job.rank(r)
        x = g.compute("fwd", num_ops=2e9, tensor_size=1 << 20)   # duration from num_ops
        g.collective("grads", "ALL_REDUCE", 4 << 20, [x])
    job.write("out/jobs", "toy")    # out/jobs/toy.0.et ... toy.3.et, toy.comm_groups.json

Columns are the typed set in ``NODE_COLUMNS`` (the attributes ASTRA-sim's feeders read);
``node_table`` builds a table of them column-wise (fast on numpy), ``RankGraph`` node by
node. Node ids are 0, 1, 2, ... in creation order and dependencies always point back, so
a graph is acyclic by construction. ``check_send_recv`` finds unmatched send/recv pairs of a
job; ``JobBuilder.summary`` counts its nodes and communication.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from chakra_core.analysis.info import summarize_table
from chakra_core.format.etfile import with_metadata
from chakra_core.format.job import SCHEMA_VERSION, Job
from chakra_core.format.nodetypes import COLL, COMP, MEM_LOAD, MEM_STORE, RECV, SEND
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.generate.relabel import Relabel, Template, write_relabelled
from chakra_core.outputs import together

WORLD = "0"  # pg_name of the default group: all NPUs

NODE_COLUMNS: dict[str, pa.DataType] = {
    "id": pa.uint64(), "name": pa.string(), "type": pa.int32(), "ctrl_deps": pa.list_(pa.uint64()),
    "data_deps": pa.list_(pa.uint64()), "duration_micros": pa.uint64(), "is_cpu_op": pa.bool_(),
    "num_ops": pa.int64(), "tensor_size": pa.uint64(), "comm_type": pa.int64(), "comm_size": pa.int64(),
    "comm_src": pa.int64(), "comm_dst": pa.int64(), "comm_tag": pa.int64(), "pg_name": pa.string(),
}

COMM_TYPES: dict[str, int] = dict(pb.CollectiveCommType.items())
# Generated tables carry version 0.0.4 metadata, so write_table and validate_table see it too.
_SCHEMA = with_metadata(pa.schema(NODE_COLUMNS.items()),
                        pb.GlobalMetadata(version=SCHEMA_VERSION).SerializeToString())


def node_table(columns: Mapping[str, Sequence | np.ndarray | pa.Array]) -> pa.Table:
    """A node table in NODE_COLUMNS order and types from the given columns.

    Absent columns: ids 0, 1, 2, ...; empty names and dependency lists, type 0 and duration 0
    (the node fields the format requires); attributes null (not set). Columns may be Python
    sequences, numpy arrays or Arrow arrays (numpy and Arrow are converted without a Python
    loop). The table's schema carries version 0.0.4 global metadata.
    """
    unknown = [name for name in columns if name not in NODE_COLUMNS]
    if unknown:
        raise ValueError(f"node_table: unknown column(s) {unknown}; known: {', '.join(NODE_COLUMNS)}")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"node_table: columns of different lengths: {lengths}")
    n = next(iter(lengths.values()), 0)
    arrays = []
    for name, type_ in NODE_COLUMNS.items():
        values = columns.get(name)
        if values is None:
            arrays.append(_absent_column(name, type_, n))
            continue
        try:
            if isinstance(values, (pa.Array, pa.ChunkedArray)):
                arrays.append(values if values.type == type_ else values.cast(type_))
            else:
                arrays.append(pa.array(values, type_))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise ValueError(f"node_table: column {name!r} does not convert to {type_}: {exc}") from None
    return pa.Table.from_arrays(arrays, schema=_SCHEMA)


def _absent_column(name: str, type_: pa.DataType, n: int) -> pa.Array:
    if name == "id":
        return pa.array(np.arange(n, dtype=np.uint64))
    if name == "name":
        return pa.nulls(n, type_).fill_null("")
    if name in ("ctrl_deps", "data_deps"):
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.uint64()))
    if name in ("type", "duration_micros"):
        return pa.array(np.zeros(n, type_.to_pandas_dtype()))
    return pa.nulls(n, type_)


def flops_duration_us(flops: float, flops_per_s: float, min_us: int = 1, max_us: int | None = None) -> int:
    """Microseconds that `flops` operations take at `flops_per_s`, rounded and clamped to [min_us, max_us]."""
    if flops_per_s <= 0:
        raise ValueError(f"flops_per_s must be > 0, got {flops_per_s}")
    us = max(min_us, round(flops / flops_per_s * 1e6))
    return int(us if max_us is None else min(max_us, us))


def comm_type_number(comm_type: str | int) -> int:
    """The CollectiveCommType number of a name ("ALL_REDUCE") or number (0)."""
    if isinstance(comm_type, str):
        number = COMM_TYPES.get(comm_type.upper())
        if number is None:
            raise ValueError(f"comm_type {comm_type!r} is not one of {', '.join(COMM_TYPES)}")
        return number
    if isinstance(comm_type, (int, np.integer)) and not isinstance(comm_type, bool) \
            and int(comm_type) in COMM_TYPES.values():
        return int(comm_type)
    raise ValueError(f"comm_type {comm_type!r} is not a CollectiveCommType name or number")


def _non_negative(what: str, value) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return number


class RankGraph:
    """One NPU's nodes, ids 0, 1, 2, ... in creation order; every method returns the new node's id.

    rank: this NPU's global rank (comm_src of its sends, comm_dst of its receives).
    npus: the job's NPU count, when known, to check send/recv peers.
    flops_per_s, duration_bounds: a compute node given num_ops but no duration_us is timed
    at this effective rate, clamped to duration_bounds (µs; None = no upper bound).
    Dependencies are node ids of this graph; None entries are skipped (handy for "the
    previous node, if any"); duplicates are merged.
    """

    def __init__(self, rank: int = 0, *, npus: int | None = None, flops_per_s: float | None = None,
                 duration_bounds: tuple[int, int | None] = (1, None)):
        if rank < 0 or (npus is not None and rank >= npus):
            raise ValueError(f"rank {rank} is outside 0..{(npus or 1) - 1}")
        if flops_per_s is not None and flops_per_s <= 0:
            raise ValueError(f"flops_per_s must be > 0, got {flops_per_s}")
        self.rank = rank
        self.npus = npus
        self.flops_per_s = flops_per_s
        self.duration_bounds = duration_bounds
        self._rows: dict[str, list] = {name: [] for name in NODE_COLUMNS}

    def __len__(self) -> int:
        return len(self._rows["id"])

    def _deps(self, name: str, what: str, deps: Iterable[int | None]) -> list[int]:
        n = len(self)
        out = set()
        for d in deps:
            if d is None:
                continue
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < n:
                raise ValueError(f"rank {self.rank} node {n} ({name!r}): {what} {d!r} is not an earlier node "
                                 f"(ids 0..{n - 1})")
            out.add(int(d))
        return sorted(out)

    def _add(self, name: str, type_: int, deps, ctrl_deps=(), **values) -> int:
        node_id = len(self)
        values.update(id=node_id, name=str(name), type=type_, data_deps=self._deps(name, "data dep", deps),
                      ctrl_deps=self._deps(name, "ctrl dep", ctrl_deps))
        values.setdefault("duration_micros", 0)
        values.setdefault("is_cpu_op", False)
        for column, cells in self._rows.items():
            cells.append(values.get(column))
        return node_id

    def compute(self, name: str, deps: Iterable[int | None] = (), *, duration_us: int | None = None,
                num_ops: float | None = None, tensor_size: int | None = None, is_cpu: bool = False,
                ctrl_deps: Iterable[int | None] = ()) -> int:
        """A compute node (COMP_NODE); on the host CPU with is_cpu. num_ops and tensor_size feed
        the simulator's roofline; without duration_us the duration comes from num_ops at the
        graph's flops_per_s (0 when neither is known)."""
        if duration_us is None:
            duration_us = 0
            if num_ops is not None and self.flops_per_s is not None:
                duration_us = flops_duration_us(num_ops, self.flops_per_s, *self.duration_bounds)
        return self._add(name, COMP, deps, ctrl_deps, duration_micros=_non_negative("duration_us", duration_us),
                         is_cpu_op=bool(is_cpu),
                         num_ops=None if num_ops is None else _non_negative("num_ops", num_ops),
                         tensor_size=None if tensor_size is None else _non_negative("tensor_size", tensor_size))

    def memory(self, name: str, deps: Iterable[int | None] = (), *, tensor_size: int, store: bool = False) -> int:
        """A memory load (or, with store, a store) of tensor_size bytes."""
        return self._add(name, MEM_STORE if store else MEM_LOAD, deps,
                         tensor_size=_non_negative("tensor_size", tensor_size))

    def collective(self, name: str, comm_type: str | int, size: int, deps: Iterable[int | None] = (), *,
                   pg_name: str = WORLD, ctrl_deps: Iterable[int | None] = ()) -> int:
        """A collective of `size` bytes over communicator pg_name ("0" = all NPUs). `size` is what
        ASTRA-sim reads as comm_size: the whole buffer, except for ALL_GATHER, where it is one
        NPU's input (the result is size x group members)."""
        pg = str(pg_name)
        if not pg.isdigit():
            raise ValueError(f"pg_name {pg_name!r} is not a communicator group id (\"0\" = all NPUs)")
        return self._add(name, COLL, deps, ctrl_deps, comm_type=comm_type_number(comm_type),
                         comm_size=_non_negative("size", size), pg_name=pg)

    def _peer(self, what: str, peer: int) -> int:
        if isinstance(peer, bool) or not isinstance(peer, (int, np.integer)) or peer < 0 \
                or (self.npus is not None and peer >= self.npus) or peer == self.rank:
            raise ValueError(f"rank {self.rank}: {what} {peer!r} is not another rank"
                             + (f" of 0..{self.npus - 1}" if self.npus is not None else ""))
        return int(peer)

    def send(self, name: str, dst: int, size: int, tag: int, deps: Iterable[int | None] = ()) -> int:
        """A send of `size` bytes to global rank dst; the matching recv has this rank as src and the same tag."""
        return self._add(name, SEND, deps, comm_src=self.rank, comm_dst=self._peer("dst", dst),
                         comm_tag=int(tag), comm_size=_non_negative("size", size), pg_name=WORLD)

    def recv(self, name: str, src: int, size: int, tag: int, deps: Iterable[int | None] = ()) -> int:
        """A receive of `size` bytes from global rank src (tag as on its send)."""
        return self._add(name, RECV, deps, comm_src=self._peer("src", src), comm_dst=self.rank,
                         comm_tag=int(tag), comm_size=_non_negative("size", size), pg_name=WORLD)

    def table(self) -> pa.Table:
        return node_table(self._rows)


def write_job(tables: Sequence[pa.Table], out_dir: str, name: str,
              comm_groups: Mapping[int, Sequence[int]] | None = None) -> list[str]:
    """Job.write of these tables (index = rank) and groups: out_dir/name.<rank>.et and, when
    there are groups, out_dir/name.comm_groups.json. Returns the paths written."""
    return Job(list(tables), {int(g): tuple(m) for g, m in (comm_groups or {}).items()}, name).write(out_dir)


def check_send_recv(tables: list[pa.Table]) -> list[str]:
    """Problems with point-to-point pairs across ranks: every send needs one recv (same tag and size)."""
    sends, recvs = {}, {}
    for rank, t in enumerate(tables):
        rows = t.select(["id", "type", "comm_src", "comm_dst", "comm_tag", "comm_size"]).to_pylist()
        for r in rows:
            if r["type"] == SEND:
                if r["comm_src"] != rank:
                    return [f"rank {rank}: send node {r['id']} has comm_src {r['comm_src']}"]
                sends.setdefault((r["comm_src"], r["comm_dst"], r["comm_tag"]), []).append(r["comm_size"])
            elif r["type"] == RECV:
                if r["comm_dst"] != rank:
                    return [f"rank {rank}: recv node {r['id']} has comm_dst {r['comm_dst']}"]
                recvs.setdefault((r["comm_src"], r["comm_dst"], r["comm_tag"]), []).append(r["comm_size"])
    problems = []
    for key in sorted(set(sends) | set(recvs)):
        if sends.get(key) != recvs.get(key):
            problems.append(f"src {key[0]} -> dst {key[1]} tag {key[2]}: sends {sends.get(key)}, "
                            f"recvs {recvs.get(key)}")
    return problems


class JobBuilder:
    """A job of `npus` ranks: one RankGraph each, and the communicator groups they use.

    flops_per_s and duration_bounds are passed to every RankGraph (see there).
    """

    def __init__(self, npus: int, *, flops_per_s: float | None = None,
                 duration_bounds: tuple[int, int | None] = (1, None)):
        if isinstance(npus, bool) or not isinstance(npus, (int, np.integer)) or npus < 1:
            raise ValueError(f"npus must be an integer >= 1, got {npus!r}")
        self.npus = int(npus)
        self._graph_options = {"flops_per_s": flops_per_s, "duration_bounds": duration_bounds}
        self._graphs: dict[int, RankGraph] = {}
        self._groups: dict[tuple[int, ...], int] = {}
        self._relabels: dict[int, Relabel] = {}  # ranks that run another rank's graph (relabel.py)

    def rank(self, r: int) -> RankGraph:
        """Rank r's graph (created empty on first use)."""
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < self.npus:
            raise ValueError(f"rank {r!r} is outside 0..{self.npus - 1}")
        graph = self._graphs.get(int(r))
        if graph is None:
            graph = self._graphs[int(r)] = RankGraph(int(r), npus=self.npus, **self._graph_options)
        return graph

    def group(self, ranks: Iterable[int]) -> str:
        """The pg_name of the communicator over `ranks`: "0" for all NPUs, else an id from 1 (the
        same member set, in any order, gets the same id). Members are kept in ascending order,
        which is the ring order the simulator uses."""
        members = tuple(sorted({int(r) for r in ranks}))
        if not members:
            raise ValueError("group: no ranks given")
        bad = [r for r in members if not 0 <= r < self.npus]
        if bad:
            raise ValueError(f"group: ranks {bad} are outside 0..{self.npus - 1}")
        if len(members) == self.npus:
            return WORLD
        gid = self._groups.setdefault(members, len(self._groups) + 1)
        return str(gid)

    @property
    def comm_groups(self) -> dict[int, tuple[int, ...]]:
        return {gid: members for members, gid in self._groups.items()}

    def derive(self, rank: int, template: int, groups: Mapping[str, str], peers: Mapping[int, int]) -> None:
        """Rank `rank` runs rank `template`'s graph (built with rank()) with the group names in
        `groups` and the peer ranks in `peers` mapped; its nodes are never built one by one
        (relabel.py). Every rank derived from one template maps the same names and peers."""
        self.rank(rank)  # checks the rank
        self._relabels[int(rank)] = Relabel(int(template), dict(groups), dict(peers))

    def _templates(self) -> dict[int, tuple[Template, list[int]]]:
        """template rank -> (its Template, the ranks derived from it)."""
        ranks: dict[int, list[int]] = {}
        for rank, label in self._relabels.items():
            ranks.setdefault(label.template, []).append(rank)
        return {t: (Template(self.rank(t).table(), list(self._relabels[rs[0]].groups),
                             list(self._relabels[rs[0]].peers)), rs) for t, rs in ranks.items()}

    def tables(self) -> list[pa.Table]:
        """One node table per rank, 0..npus-1 (an untouched rank has no nodes)."""
        tables = [None if r in self._relabels else self.rank(r).table() for r in range(self.npus)]
        for template, ranks in self._templates().values():
            whole, n = template.relabelled([self._relabels[r] for r in ranks]), template.table.num_rows
            for i, rank in enumerate(ranks):
                tables[rank] = whole.slice(i * n, n)
        return tables

    def job(self, name: str = "job") -> Job:
        """This job's tables and groups, to write (Job.write) or simulate."""
        return Job(self.tables(), self.comm_groups, name)

    def write(self, out_dir: str, name: str) -> list[str]:
        """out_dir/name.<rank>.et per rank and, when there are sub-groups, out_dir/name.comm_groups.json
        (Job.write; derived ranks by relabel.write_relabelled, the same bytes). Returns the paths written."""
        tables = [None if r in self._relabels else self.rank(r).table() for r in range(self.npus)]
        with together():  # the derived ranks join the job's set of files (Job.write)
            urls = Job(tables, self.comm_groups, name).write(out_dir, skip=set(self._relabels))
            metadata = pb.GlobalMetadata(version=SCHEMA_VERSION).SerializeToString()
            for template, ranks in self._templates().values():
                write_relabelled(template, [self._relabels[r] for r in ranks], [urls[r] for r in ranks], metadata)
        return urls

    def summary(self) -> dict:
        """Ranks, nodes per rank, collectives and send/recv by type (count and bytes over all
        ranks) and groups, JSON-ready (a derived rank counts as its template)."""
        nodes, comm, summaries = [], {}, {}
        for rank in range(self.npus):
            source = self._relabels[rank].template if rank in self._relabels else rank
            if source not in summaries:
                summaries[source] = summarize_table(self.rank(source).table(), f"rank {source}")
            s = summaries[source]
            nodes.append(s["nodes"])
            for kind, row in {**s["collectives"], **s["point_to_point"]}.items():
                total = comm.setdefault(kind, {"count": 0, "bytes": 0})
                total["count"] += row["count"]
                total["bytes"] += row["bytes"]
        return {"npus": self.npus, "nodes_per_rank": {"min": min(nodes), "max": max(nodes), "total": sum(nodes)},
                "communication": comm, "comm_groups": {str(g): list(m) for g, m in self.comm_groups.items()}}
