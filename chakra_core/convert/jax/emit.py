"""One Chakra ET per device from a JAX profile and, where it has them, the compiled modules' HLO.

Per device and step: a host node `ProfilerStep#N` (the step's launch: from the step's start to
the device's first op), a host node `host after step N` last (from its last op to the next
step's start, or to the step's end), and between them each execution's ops in the module's
schedule order (time order without HLO): a compute node per executed instruction or fusion with its measured duration; a
collective node per collective instruction (its `-done` folded in); a send per source-target
pair of a collective-permute whose source is the device, a receive per pair whose target is.
Dependencies: each op on the ops its HLO operands come from (through instructions that are not
executed: parameters, tuples, bitcasts) and on the op before it in the schedule, so a device
runs one op at a time as recorded; an asynchronous collective waits for the op before it but
only what uses its `-done` waits for it. A step's launch follows the device's previous step.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from chakra_core.convert.jax import collectives as coll
from chakra_core.convert.jax.hlo import HloModule, Instruction
from chakra_core.convert.jax.profile import DeviceOps, Event
from chakra_core.format.etfile import with_metadata
from chakra_core.format.job import SCHEMA_VERSION
from chakra_core.format.nodetypes import (
    AFTER_STEP_PREFIX,
    COLL,
    COMP,
    LAUNCH_GAP_PREFIX,
    RECV,
    SEND,
    XLA_CALL_OWN_TIME_PREFIX,
)
from chakra_core.format.normalize import normalize_table
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.generate.builder import WORLD, JobBuilder, comm_type_number

STEP_NODE = "ProfilerStep#{}"
# name -> category, when there is no HLO to ask (XLA names instructions after their opcode)
_BY_NAME = ((r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)",
             "collective"), (r"conv", "convolution"), (r"^dot|gemm|matmul", "gemm"), (r"^copy", "copy"),
            (r"fusion", "fusion"))
_TRACE_KIND = re.compile(r"^(all-reduce|all-gather|reduce-scatter|all-to-all)(-start)?(\.\d+)?$")
_NOT_RUN = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
            "replica-id", "opt-barrier"}


@dataclass
class Emitted:
    tables: list[pa.Table]
    comm_groups: dict[int, tuple[int, ...]]
    counts: Counter = field(default_factory=Counter)  # what was made and what was passed over
    missing: list[str] = field(default_factory=list)  # what the conversion could not know


def category(module: HloModule | None, instruction: Instruction | None, name: str) -> str:
    """The XLA op category of an executed op: convolution, gemm (dot), fusion, copy, collective, or its opcode."""
    if instruction is None or module is None:
        return next((c for pattern, c in _BY_NAME if re.search(pattern, name)), "other")
    if coll.base_opcode(instruction.opcode)[0] in coll.KINDS or instruction.opcode.startswith("async-"):
        return "collective"
    opcodes = module.opcodes_within(instruction)
    if "convolution" in opcodes or re.search(r"conv", instruction.attrs.get("custom_call_target", "")):
        return "convolution"
    if "dot" in opcodes or re.search(r"gemm|matmul", instruction.attrs.get("custom_call_target", ""), re.I):
        return "gemm"
    if instruction.opcode == "fusion":
        return "fusion"
    return "copy" if instruction.opcode.startswith("copy") else instruction.opcode


@dataclass
class _Shared:
    """What every device's emission shares: the job's communicator groups, when each op began on
    each device, and per group of a collective its pg_name and its last arrival, worked out once
    for the group, not per device (a group may hold every device)."""

    groups: JobBuilder
    arrivals: dict[tuple, dict[int, float]]  # _arrivals
    pg_names: dict[int, str] = field(default_factory=dict)  # id(group): groups live on in describe()'s cache
    last_arrivals: dict[tuple, float] = field(default_factory=dict)  # (arrival key, id(group)) -> ns

    def pg_name(self, group: tuple[int, ...]) -> str:
        if id(group) not in self.pg_names:
            self.pg_names[id(group)] = self.groups.group(group)
        return self.pg_names[id(group)]

    def last_arrival(self, key: tuple, group: tuple[int, ...]) -> float | None:
        """When the last device of the group began the op (None: none of them did)."""
        if (key, id(group)) not in self.last_arrivals:
            starts = self.arrivals.get(key, {})
            self.last_arrivals[(key, id(group))] = max((starts[d] for d in group if d in starts), default=None)
        return self.last_arrivals[(key, id(group))]


class _Device:
    """The rows of one device's table, and where the chain of its ops stands."""

    def __init__(self, device: int, npus: int, shared: _Shared):
        self.device, self.npus, self.shared = device, npus, shared
        self.rows: dict[str, list] = {k: [] for k in ("name", "type", "ctrl_deps", "data_deps", "start_time_micros",
                                                      "duration_micros", "duration_ns", "is_cpu_op", "comm_type",
                                                      "comm_size", "comm_src", "comm_dst", "comm_tag", "pg_name",
                                                      "stream")}
        self.start_ns: list[int] = []  # each node's start in ns (the table keeps whole microseconds)
        self.chain: list[int] = []  # the nodes the next op in the schedule waits for
        self.launcher: int | None = None  # the host node that launched the ops that follow
        self.gaps: dict[int, float] = {}  # id(event) -> idle before it (ns), this step
        self.run_key: tuple[int, int] = (0, 0)  # (step, execution in the step) being emitted
        self.seen: Counter = Counter()  # the synchronous collectives emitted, by (step, execution, name)

    def add(self, name: str, kind: int, event: Event | None, data=(), ctrl=(), **attrs) -> int:
        node = len(self.rows["name"])
        data = [d for d in dict.fromkeys(data) if d is not None]  # the launcher, when given, stays first (the simulator's convention)
        values = {"name": name, "type": kind, "data_deps": data, "ctrl_deps": sorted(set(ctrl) - set(data)),
                  "start_time_micros": max(0, int(event.start_ns // 1000)) if event else 0,
                  "duration_micros": max(0, int(round(event.dur_ns / 1000))) if event else 0,
                  "duration_ns": max(0, round(event.dur_ns)) if event else None,
                  "is_cpu_op": False, "stream": None if kind != COMP else 0, **attrs}
        for key, column in self.rows.items():
            column.append(values.get(key))
        self.start_ns.append(round(event.start_ns) if event else 0)
        return node

    def table(self) -> pa.Table:
        n = len(self.rows["name"])
        table = pa.table({"id": pa.array(range(n), pa.uint64()), **{
            k: pa.array(v, pa.list_(pa.uint64()) if k.endswith("deps") else None) for k, v in self.rows.items()}})
        table = normalize_table(table)
        return table.replace_schema_metadata(with_metadata(table.schema, pb.GlobalMetadata(
            version=SCHEMA_VERSION).SerializeToString()).metadata)


def emit_job(ops: DeviceOps, modules: dict[str, HloModule], npus: int) -> Emitted:
    """Every device's table (see the module docstring) and the communicator groups they use."""
    shared = _Shared(JobBuilder(npus), _arrivals(ops))
    emitted = Emitted([], {})
    for device in range(npus):
        dev = _Device(device, npus, shared)
        for number, step in enumerate(ops.steps):
            runs = ops.by_device.get(device, {}).get(step.number, [])
            first = min((run[0].start_ns for run in runs if run), default=step.end_ns)
            launch = Event(STEP_NODE.format(step.number), step.start_ns, max(0.0, first - step.start_ns), {})
            dev.chain = [dev.add(launch.name, COMP, launch, ctrl=dev.chain, is_cpu_op=True, stream=None)]
            dev.launcher = dev.chain[0]
            dev.gaps = _gaps(runs)
            for index, run in enumerate(runs):
                dev.run_key = (step.number, index)
                _execution(dev, run, modules, emitted)
            last = max((e.end_ns for run in runs for e in run), default=first)
            until = ops.steps[number + 1].start_ns if number + 1 < len(ops.steps) else step.end_ns
            if until - last >= 1000:  # the host's time after the device's last op, to the next step
                after = Event(f"{AFTER_STEP_PREFIX}{step.number}", last, until - last, {})
                dev.chain = [dev.add(after.name, COMP, after, ctrl=dev.chain, is_cpu_op=True, stream=None)]
        emitted.tables.append(dev.table())
    emitted.comm_groups = shared.groups.comm_groups
    return emitted


def _arrivals(ops: DeviceOps) -> dict[tuple, dict[int, float]]:
    """(step, execution in the step, op name, occurrence) -> device -> when the op began there:
    the k-th execution of a step runs the same module on every device."""
    found: dict[tuple, dict[int, float]] = {}
    for device, steps in ops.by_device.items():
        for step, runs in steps.items():
            for index, run in enumerate(runs):
                seen: Counter = Counter()
                for event in run:
                    name = event.args.get("hlo_op") or event.name
                    found.setdefault((step, index, name, seen[name]), {})[device] = event.start_ns
                    seen[name] += 1
    return found


def _gaps(runs: list[list[Event]]) -> dict[int, float]:
    """id(event) -> how long the device sat idle before the op began (ns): the time since every
    op begun before it had ended; the step's first op has none (its launch node holds it)."""
    gaps, busy_until = {}, None
    for event in sorted((e for run in runs for e in run), key=lambda e: e.start_ns):
        if busy_until is not None and event.start_ns > busy_until:
            gaps[id(event)] = event.start_ns - busy_until
        busy_until = event.end_ns if busy_until is None else max(busy_until, event.end_ns)
    return gaps


def _ordered(run: list[Event], entry) -> list[tuple[Event, str]]:
    """(event, instruction name) in schedule order: an instruction of the entry computation at
    its place, any other op right after the op that ran before it."""
    keyed, key = [], -1.0
    for n, event in enumerate(run):
        name = event.args.get("hlo_op") or event.name
        position = entry.position.get(name) if entry is not None else None
        key = float(position) if position is not None else key + 1e-6
        keyed.append((key, n, event, name))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [(event, name) for _, _, event, name in keyed]


def _execution(dev: _Device, run: list[Event], modules: dict[str, HloModule], emitted: Emitted) -> None:
    """One execution of a module on the device, appended to its table."""
    module_name = run[0].args.get("hlo_module", "")
    module = modules.get(module_name)
    if module is None:
        emitted.counts[f"ops of module {module_name or '(unnamed)'} without HLO"] += len(run)
    entry = module.entry_computation if module else None
    produced: dict[str, list[int]] = {}
    for event, name in _ordered(run, entry):
        instruction = entry.by_name.get(name) if entry is not None else None
        if module is not None and instruction is None:
            if module.instruction(name) is not None:  # inside a while/conditional/call: its caller's time holds it
                emitted.counts["ops of called computations (timed in their caller)"] += 1
                continue
            emitted.counts["ops not in the module's HLO (compute, ordered by time)"] += 1
        if instruction is not None and coll.done_of(instruction):
            _fold_done(dev, instruction, event, produced)
            emitted.counts["asynchronous -done folded into its -start"] += 1
            continue
        _launch_gap(dev, event, name)
        data = [dev.launcher, *(_operand_nodes(entry, instruction, produced) if instruction is not None else [])]
        described = coll.describe(module, instruction, dev.npus) if instruction is not None else None
        if described is not None:
            produced[name] = _collective(dev, name, event, described, data, instruction.line, emitted)
            continue
        kind = _TRACE_KIND.match(name) if instruction is None else None
        if kind is not None:  # the trace alone: kind known, size and group not
            node = dev.add(f"{name} xla:collective", COLL, event, data, dev.chain,
                           comm_type=comm_type_number(coll.KINDS[kind.group(1)]), comm_size=0, pg_name=WORLD)
            emitted.counts["collectives without HLO (size 0, group: every device)"] += 1
        else:
            node = dev.add(_op_label(module, instruction, name, event), COMP, event, data, dev.chain)
            emitted.counts["compute"] += 1
        dev.chain = [node]
        produced[name] = [node]


def _launch_gap(dev: _Device, event: Event, name: str) -> None:
    """The device idle before an op, waiting for the runtime to launch it (on CPU: for a thread to
    run it), as a host node before the op; gaps under a microsecond are left out."""
    gap = dev.gaps.get(id(event), 0.0)
    if gap >= 1000:
        idle = Event(f"{LAUNCH_GAP_PREFIX}{name}", event.start_ns - gap, gap, {})
        dev.chain = [dev.add(idle.name, COMP, idle, ctrl=dev.chain, is_cpu_op=True, stream=None)]
        dev.launcher = dev.chain[0]


def _op_label(module: HloModule | None, instruction: Instruction | None, name: str, event: Event) -> str:
    """`NAME xla:CATEGORY`; a GPU kernel is `KERNEL [NAME] xla:CATEGORY`, and without the
    instruction's HLO (a command buffer, a module without text) `KERNEL [NAME]`: the kernel's
    name then tells its family."""
    if event.name == name:
        return f"{name} xla:{category(module, instruction, name)}"
    label = f"{event.name} [{name}]"
    return f"{label} xla:{category(module, instruction, name)}" if instruction is not None else label


def _fold_done(dev: _Device, done: Instruction, event: Event, produced: dict[str, list[int]]) -> None:
    """The -done of an asynchronous pair: its start's nodes last until it ends; the ops after it
    in the schedule wait for them (the stream waits at the -done)."""
    nodes = produced.get(done.operands[0], []) if done.operands else []
    for node in nodes:
        start = dev.rows["start_time_micros"][node]
        dev.rows["duration_micros"][node] = max(dev.rows["duration_micros"][node], int(event.end_ns // 1000) - start)
        dev.rows["duration_ns"][node] = max(dev.rows["duration_ns"][node] or 0, round(event.end_ns) - dev.start_ns[node])
    produced[done.name] = nodes
    dev.chain = sorted(set(dev.chain) | set(nodes))


def _operand_nodes(entry, instruction: Instruction, produced: dict[str, list[int]]) -> list[int]:
    """The nodes an instruction's operands come from, looking through instructions that did not run."""
    found, seen, pending = set(), set(), list(instruction.operands)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in produced:
            found.update(produced[name])
        else:
            pending.extend(entry.by_name[name].operands)
    return sorted(found)


def _collective(dev: _Device, name: str, event: Event, c: coll.Collective, data: list[int], tag: int,
                emitted: Emitted) -> list[int]:
    """The device's nodes of one collective instruction (tag: its HLO line, the same on every device)."""
    label = f"{name} xla:collective"
    index = c.member_of.get(dev.device)
    group = c.groups[index] if index is not None else ()
    if c.kind == coll.PERMUTE:
        nodes = _permute(dev, label, event, c, data, tag, emitted)
    elif len(group) > 1:
        nodes = [dev.add(label, COLL, event, data, dev.chain, comm_type=comm_type_number(c.kind), comm_size=c.bytes,
                         pg_name=dev.shared.pg_name(group))]
        emitted.counts[f"collectives {c.kind}"] += 1
    else:
        nodes = []
        emitted.counts["collectives over this device alone (no communication)"] += 1
    if not nodes:  # nothing to send: the op's time on the device
        return _sync([dev.add(f"{name} xla:copy", COMP, event, data, dev.chain)], dev, c)
    if not c.is_async:
        partners = {d for pair in c.pairs_of.get(dev.device, ()) for d in pair}
        nodes = [_own_time(dev, name, event, nodes, partners | {dev.device}, group)]
    return _sync(nodes, dev, c)


def _permute(dev: _Device, label: str, event: Event, c: coll.Collective, data: list[int], tag: int,
             emitted: Emitted) -> list[int]:
    """A send per source-target pair whose source is the device, a receive per pair whose target is."""
    nodes = []
    for source, target in c.pairs_of.get(dev.device, ()):
        if source == dev.device and target != dev.device:
            nodes.append(dev.add(label, SEND, event, data, dev.chain, comm_src=source, comm_dst=target,
                                 comm_tag=tag, comm_size=c.bytes, pg_name=WORLD))
            emitted.counts["sends"] += 1
        if target == dev.device and source != dev.device:
            nodes.append(dev.add(label, RECV, event, (), dev.chain, comm_src=source, comm_dst=target,
                                 comm_tag=tag, comm_size=c.bytes, pg_name=WORLD))
            emitted.counts["receives"] += 1
    return nodes


def _sync(nodes: list[int], dev: _Device, c: coll.Collective) -> list[int]:
    if not c.is_async:
        dev.chain = nodes
    return nodes


def _own_time(dev: _Device, name: str, event: Event, nodes: list[int], peers: set[int],
              group: tuple[int, ...]) -> int:
    """A host node after a synchronous collective with its own time on this device: from the
    last of its peers' (and its group's) arrival to its end here (the wait for later peers is the
    simulator's to make). A network fitted to the runtime times the call itself, so it takes no
    time there (call-time-in-network), as a blocking gloo call's (convert/job.keep_own_time)."""
    key = (*dev.run_key, event.args.get("hlo_op") or event.name)
    arrival = (*key, dev.seen[key])
    dev.seen[key] += 1
    starts = dev.shared.arrivals.get(arrival, {})
    group_last = dev.shared.last_arrival(arrival, group) if group else None
    last = max([event.start_ns, *(starts[p] for p in peers if p in starts),
                *([group_last] if group_last is not None else [])])
    own = Event(f"{XLA_CALL_OWN_TIME_PREFIX} {name}", last, max(0.0, event.end_ns - last), {})
    return dev.add(own.name, COMP, own, nodes, is_cpu_op=True, stream=None)
