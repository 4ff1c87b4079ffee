"""What a simulation returns: per-NPU results, the timeline, and their Arrow schemas."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import pyarrow as pa


@dataclass
class NpuResult:
    npu: int
    finish_ns: int = 0
    compute_ns: int = 0  # sum of GPU compute durations (what ASTRA-sim subtracts for "exposed")
    cpu_ns: int = 0
    nodes: int = 0
    comm_ns: dict[str, int] = field(default_factory=dict)  # collective / p2p time by type
    comm_bytes: dict[str, int] = field(default_factory=dict)
    time_by_category: dict[str, int] = field(default_factory=dict)  # sim/breakdown.py: adds up to finish_ns
    critical_path: dict[str, int] | None = None  # GPU jobs: what held the critical path (sim/criticalpath.py)

    def add_comm(self, kind: str, nbytes: int, ns: int | None = None) -> None:
        """Counts bytes (and, for collectives, the time) of one communication of this kind."""
        if ns is not None:
            self.comm_ns[kind] = self.comm_ns.get(kind, 0) + ns
        self.comm_bytes[kind] = self.comm_bytes.get(kind, 0) + nbytes

    def moved_to(self, npu: int) -> NpuResult:
        """The same result for another NPU (one that runs as this one: sim/symmetry.py)."""
        return replace(self, npu=npu, **{f.name: dict(getattr(self, f.name)) for f in fields(self)
                                         if isinstance(getattr(self, f.name), dict)})

    @property
    def exposed_comm_ns(self) -> int:
        """The time communication alone holds the NPU (sim/breakdown.py)."""
        return self.time_by_category.get("communication", 0)

    @property
    def astra_exposed_comm_ns(self) -> int:
        """ASTRA-sim's "exposed communication": finish time minus GPU compute time (host and idle
        time included), kept to compare with ASTRA-sim's output."""
        return self.finish_ns - self.compute_ns

    def to_dict(self) -> dict:
        return {"npu": self.npu, "finish_ns": self.finish_ns, "compute_ns": self.compute_ns,
                "exposed_comm_ns": self.exposed_comm_ns, "astra_exposed_comm_ns": self.astra_exposed_comm_ns,
                "cpu_ns": self.cpu_ns, "nodes": self.nodes,
                "comm_ns": dict(self.comm_ns), "comm_bytes": dict(self.comm_bytes),
                "time_by_category": dict(self.time_by_category),
                **({"critical_path": dict(self.critical_path)} if self.critical_path is not None else {})}


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One node's run on one NPU, for timelines (Perfetto) and overlap analysis (slots: a
    million-node run keeps a million of them)."""

    npu: int
    node_id: int
    name: str
    track: str  # "compute" (GPU), "cpu", or "comm" (collectives, send/recv, metadata)
    kind: str  # "compute", "all_reduce", ..., "send", "recv", "broadcast", "instant"
    start_ns: int  # when the NPU issued it
    end_ns: int
    bytes: int = 0


@dataclass
class SimResult:
    mode: str
    npus: list[NpuResult]
    timeline: list[TimelineEvent] | None = None  # with record_timeline=True
    notes: list[str] = field(default_factory=list)  # modelling choices beyond ASTRA-sim that this run used
    assumptions: list[str] = field(default_factory=list)  # what-if scaling's (sim/whatif.py), if it ran
    sharing: dict = field(default_factory=dict)  # what a shared run simulated (sim/symmetry.py), or why none ran
    ledger: object = None  # several jobs on one network: who waited behind whom (network/waits.WaitLedger)

    @property
    def finish_ns(self) -> int:
        return max((n.finish_ns for n in self.npus), default=0)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "finish_ns": self.finish_ns, "notes": self.notes, "sharing": self.sharing,
                "npus": [n.to_dict() for n in self.npus]}

    def npu_table(self) -> pa.Table:
        """One row per NPU, ready for Parquet (communication time and bytes as maps by type)."""
        rows = [{**n.to_dict(), "comm_ns": list(n.comm_ns.items()), "comm_bytes": list(n.comm_bytes.items()),
                 "time_by_category": list(n.time_by_category.items())} for n in self.npus]
        return pa.Table.from_pylist(rows, schema=NPU_RESULT_SCHEMA)

    def timeline_table(self) -> pa.Table:
        if self.timeline is None:
            raise ValueError("no timeline was recorded: run the engine with record_timeline=True")
        return pa.Table.from_pylist([{name: getattr(e, name) for name in TIMELINE_SCHEMA.names} for e in self.timeline],
                                    schema=TIMELINE_SCHEMA)


NPU_RESULT_SCHEMA = pa.schema([
    ("npu", pa.int32()), ("finish_ns", pa.int64()), ("compute_ns", pa.int64()), ("exposed_comm_ns", pa.int64()),
    ("astra_exposed_comm_ns", pa.int64()),
    ("cpu_ns", pa.int64()), ("nodes", pa.int64()), ("comm_ns", pa.map_(pa.string(), pa.int64())),
    ("comm_bytes", pa.map_(pa.string(), pa.int64())), ("time_by_category", pa.map_(pa.string(), pa.int64())),
])
TIMELINE_SCHEMA = pa.schema([
    ("npu", pa.int32()), ("node_id", pa.uint64()), ("name", pa.string()), ("track", pa.string()),
    ("kind", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("bytes", pa.int64()),
])
