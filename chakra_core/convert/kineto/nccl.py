"""NCCL kernel names: what collective a kernel runs, with which algorithm, protocol, reduction
and element type (docs/gpu.md, 'NCCL kernels').

NCCL names its kernels after what they run, in two generations:
- up to 2.18: `ncclKernel_<Func>_<ALGO>_<PROTO>_<RedOp>_<C type>(...)`, e.g.
  `ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)`; functions
  that reduce nothing carry `Sum_int8_t` (`ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t`);
- 2.19 on: `ncclDevKernel_<Func>[_<RedOp>_<short type>]_<ALGO>_<PROTO>(...)`, e.g.
  `ncclDevKernel_ReduceScatter_Sum_f32_RING_LL`, `ncclDevKernel_AllGather_RING_LL`, and the
  bare `ncclDevKernel_SendRecv`.
Algorithms: RING, TREE, COLLNET (2.10-2.11), COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE,
PAT; protocols LL, LL128, SIMPLE. The element type is the reduction's, so it is a dtype only for
AllReduce, ReduceScatter and Reduce; the others move bytes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from chakra_core.convert.pytorch import comms
from chakra_core.convert.pytorch.kineto import CpuEvent, KinetoTrace, innermost_open

# NCCL function -> record_param_comms' "Collective name" for it (comms.KIND_BY_NAME reads those)
COLLECTIVE_OF_FUNC = {
    "AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce",
    # PyTorch runs all_to_all, gather, scatter, send and recv as grouped sends and receives: one
    # SendRecv kernel. Alone, the kernel cannot tell them apart (an assumption the report states).
    "SendRecv": "all_to_all",
}
REDUCING = ("AllReduce", "ReduceScatter", "Reduce")
ALGORITHMS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "COLLNET", "NVLS", "RING", "TREE", "PAT")
PROTOCOLS = ("LL128", "LL", "SIMPLE")
REDUCTIONS = ("Sum", "Prod", "MinMax", "Max", "Min", "PreMulSum", "SumPostDiv", "Avg")
# element type in a kernel name (C type up to 2.18, short name from 2.19) -> Kineto's "Input type" name
DTYPE_OF_TYPE = {
    "int8_t": "signed char", "i8": "signed char", "uint8_t": "unsigned char", "u8": "unsigned char",
    "int32_t": "int", "i32": "int", "uint32_t": "int", "u32": "int",
    "int64_t": "long int", "i64": "long int", "uint64_t": "long int", "u64": "long int",
    "half": "c10::Half", "f16": "c10::Half", "float": "float", "f32": "float", "double": "double",
    "f64": "double", "__nv_bfloat16": "c10::BFloat16", "bf16": "c10::BFloat16",
    "__nv_fp8_e4m3": "Float8_e4m3fn", "f8e4m3": "Float8_e4m3fn", "__nv_fp8_e5m2": "Float8_e5m2",
    "f8e5m2": "Float8_e5m2",
}
_NAME = re.compile(r"^nccl(?:Dev)?Kernel_(?P<func>[A-Za-z]+)(?:_(?P<rest>[A-Za-z0-9_]*))?(?:\(|$)")
_ALGO = re.compile(r"(?:^|_)(" + "|".join(ALGORITHMS) + r")(?=_|$)")
_PROTO = re.compile(r"(?:^|_)(" + "|".join(PROTOCOLS) + r")(?=_|$)")
_REDUCTION = re.compile(r"(?:^|_)(" + "|".join(REDUCTIONS) + r")_(.+)$")


@dataclass(frozen=True)
class NcclKernel:
    func: str  # AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, SendRecv
    algorithm: str | None
    protocol: str | None
    reduction: str | None
    element_type: str | None  # the type as the name writes it

    @property
    def collective(self) -> str:
        """record_param_comms' "Collective name" for what the kernel runs."""
        return COLLECTIVE_OF_FUNC[self.func]

    @property
    def dtype(self) -> str | None:
        """The reduced elements' dtype (Kineto's "Input type" name); None where the kernel moves bytes."""
        return DTYPE_OF_TYPE.get(self.element_type or "") if self.func in REDUCING else None


def looks_like_nccl(name: str) -> bool:
    """A kernel of NCCL's (parsed or not): `ncclKernel_*`, `ncclDevKernel_*`."""
    return name.startswith(("ncclKernel_", "ncclDevKernel_"))


def parse_kernel(name: str) -> NcclKernel | None:
    """What an NCCL kernel name says; None for a name that is not one of a known collective."""
    match = _NAME.match(name)
    if match is None or match["func"] not in COLLECTIVE_OF_FUNC:
        return None
    rest = match["rest"] or ""
    algo, proto, reduction = _ALGO.search(rest), _PROTO.search(rest), _REDUCTION.search(rest)
    element_type = None
    if reduction is not None:  # 2.19 on, the algorithm and protocol follow the type: Sum_f32_RING_LL
        cut = min((m.start() for m in (algo, proto) if m is not None and m.start() > reduction.start()),
                  default=len(rest))
        element_type = rest[reduction.start(2):cut]
    return NcclKernel(match["func"], algo[1] if algo else None, proto[1] if proto else None,
                      reduction[1] if reduction else None, element_type)


@dataclass
class KernelCollectives:
    """What the NCCL kernels of a trace add to its host side (host.host_trace)."""

    kernels: dict[int, NcclKernel] = field(default_factory=dict)  # id(host event) -> the kernel naming it
    made: list[CpuEvent] = field(default_factory=list)  # record_param_comms events made for lone kernels
    notes: list[str] = field(default_factory=list)


def kernel_collectives(kineto: KinetoTrace) -> KernelCollectives:
    """The collectives NCCL kernels name where the host side names none: a record_param_comms
    without "Collective name" around a kernel's launch is named after the kernel; a kernel
    launched inside no communication op gets a record_param_comms of its own spanning its launch
    (older PyTorch, or NCCL called from outside c10d). The first kernel of an op names it."""
    found = KernelCollectives()
    by_correlation = {d.correlation: d for d in kineto.device if d.correlation is not None and looks_like_nccl(d.name)}
    if not by_correlation:
        return found
    launches = [r for r in kineto.runtime if r.correlation in by_correlation]
    naming, unnamed = [], []  # host events that name their collective; record_param_comms that do not
    for e in kineto.cpu:
        if e.name.startswith(("c10d::", "nccl:", "record_param_comms")):
            if names_collective(e):
                naming.append(e)
            elif e.name == "record_param_comms":
                unnamed.append(e)
    unknown, by_host, by_kernel, disagree = Counter(), Counter(), Counter(), Counter()
    for launch, host, around in zip(launches, innermost_open(naming, launches), innermost_open(unnamed, launches)):
        kernel = parse_kernel(by_correlation[launch.correlation].name)
        if kernel is None:
            unknown[by_correlation[launch.correlation].name.split("(")[0]] += 1
        elif host is not None:
            by_host[kernel.func] += 1
            host_kind = comms.kind_of(host.name if host.name != "record_param_comms"
                                      else str(host.args["Collective name"]))
            if host_kind is not None and not _agrees(host_kind, kernel):  # None: "coalesced" and the like
                disagree[(comms.kind_label(host_kind), kernel.func)] += 1  # the host's kind is kept
        elif around is not None:
            first = found.kernels.setdefault(id(around), kernel)
            by_kernel[kernel.func] += 1
            if first.func != kernel.func:
                disagree[(f"a record_param_comms named after {first.func}", kernel.func)] += 1
        else:
            made = CpuEvent("record_param_comms", launch.tid, launch.ts, launch.dur, None, None, args={})
            found.made.append(made)
            found.kernels[id(made)] = kernel
            by_kernel[kernel.func] += 1
    found.notes.extend(_notes(by_host, by_kernel, len(found.made), unknown))
    if disagree:
        found.notes.append("NCCL kernels of another collective than the op that launched them (the op's kind "
                           "kept, a name its first kernel gave): " + ", ".join(f"{kind} launched {func} {n:,}"
                                                      for (kind, func), n in sorted(disagree.items())))
    return found


def _agrees(host_kind: int | str, kernel: NcclKernel) -> bool:
    """Whether a kernel runs the collective its host op names (SendRecv runs every p2p-based one)."""
    if kernel.func == "SendRecv":
        return host_kind in (comms.ALL_TO_ALL, comms.SEND, comms.RECV, comms.GATHER, comms.SCATTER)
    return host_kind == comms.kind_of(kernel.collective)


def names_collective(event: CpuEvent) -> bool:
    """Whether a host event names the collective it runs (a c10d op, an nccl:* annotation, a
    record_param_comms with "Collective name")."""
    if event.name.startswith(("c10d::", "nccl:")):
        return comms.kind_of(event.name) is not None
    return event.name == "record_param_comms" and bool((event.args or {}).get("Collective name"))


def _notes(by_host: Counter, by_kernel: Counter, made: int, unknown: Counter) -> list[str]:
    """The report's lines on the NCCL kernels: which named their collective, which could not."""
    notes = []
    if by_host:
        notes.append("NCCL kernels launched by host ops that name their collective: " +
                     ", ".join(f"{func} {n:,}" for func, n in sorted(by_host.items())))
    if by_kernel:
        notes.append("NCCL kernels naming the collective of the op that launched them (the host names none): " +
                     ", ".join(f"{func} {n:,}" for func, n in sorted(by_kernel.items())) +
                     (f"; {made:,} launched inside no communication op, given a record_param_comms node"
                      " spanning the launch" if made else ""))
    if unknown:
        notes.append("NCCL kernels whose name says no collective, kept as kernels: " +
                     ", ".join(f"{name} {n:,}" for name, n in sorted(unknown.items())))
    return notes
