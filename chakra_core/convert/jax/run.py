"""A JAX run folder, told by its layout, and its conversion (docs/jax.md).

The layout: the profiler's directory, the folder itself or one inside it (`[DIR/]plugins/profile/<run>/`
holding `<host>.xplane.pb`, `<host>.trace.json.gz` and `perfetto_trace.json.gz`), optionally
the `--xla_dump_to` dump (`*after_optimizations.txt`: the compiled, scheduled modules), the
compiled module's own text (`*.hlo.txt`) and `timing.json` (unprofiled step times). The
XPlane file is read when there is one, else the host's trace JSON, else the Perfetto one; every
other file is reported as set aside, with why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from chakra_core import limits
from chakra_core.convert.jax.chrome import read_trace_json
from chakra_core.convert.jax.emit import emit_job
from chakra_core.convert.jax.hlo import HloModule, parse_hlo
from chakra_core.convert.jax import layout
from chakra_core.convert.jax.profile import DeviceOps, device_ops
from chakra_core.convert.jax.xplane import read_xplane
from chakra_core.convert import sources
from chakra_core.convert.common.source_file import SourceOptions, read_source
from chakra_core.documents import ConfigError, read_document
from chakra_core.errors import SourceFormatError
from chakra_core.format.job import Job
from chakra_core.generate.builder import check_send_recv

_XPLANE = re.compile(r"\.xplane\.pb$")
_HOST_TRACE = re.compile(r"(?<!perfetto_trace)\.trace\.json(\.gz)?$")
_PERFETTO = re.compile(r"^perfetto_trace\.json(\.gz)?$")
_HLO = re.compile(r"(after_optimizations\.txt|\.hlo\.txt)$")
IDLE_DEVICES_ALLOWED = 16  # devices per device that ran ops (plus 16), before a numbering is refused as made up
# what a device's table costs before it holds a node (about 60 KB of Arrow and Python objects),
# counted as nodes of a job built in Python (about 400 bytes each)
TABLE_NODES = 150


@dataclass
class RunFiles:
    root: str
    profile: str  # the file read
    hlo: list[str]
    timing: str | None
    set_aside: dict[str, str] = field(default_factory=dict)  # url -> why


def find_run(src: str) -> RunFiles:
    """The files of the run at src (see the module docstring)."""
    fs, root, relative = layout.files(src)
    url = lambda name: fs.unstrip_protocol(f"{root}/{name}")  # noqa: E731
    profiles = [(m.group("run"), m.group("file"), name) for name in relative if (m := sources.JAX_PROFILE.match(name))]
    if not profiles:
        raise SourceFormatError(src, "no JAX profile (plugins/profile/<run>/<host>.xplane.pb or .trace.json.gz)")
    latest = max(run for run, _, _ in profiles)
    chosen = [(f, name) for run, f, name in profiles if run == latest]
    xplanes = [name for f, name in chosen if _XPLANE.search(f)]
    if len(xplanes) > 1:
        raise SourceFormatError(src, f"profiles of {len(xplanes)} hosts in plugins/profile/{latest}/; convert one"
                                " host's run folder at a time")
    traces = [name for f, name in chosen if _HOST_TRACE.search(f)] + [name for f, name in chosen if _PERFETTO.match(f)]
    read = (xplanes + traces)[0] if xplanes or traces else None
    if read is None:
        raise SourceFormatError(src, f"plugins/profile/{latest}/ holds no .xplane.pb or trace JSON")
    files = RunFiles(root, url(read), [], url("timing.json") if "timing.json" in relative else None)
    for name in relative:
        if name == read or name == "timing.json":
            continue
        if _HLO.search(name) and "buffer-assignment" not in name:
            files.hlo.append(url(name))
        elif name.endswith("before_optimizations.txt"):
            files.set_aside[url(name)] = f"{name}: HLO before optimisation (not the scheduled module that ran)"
        elif name.startswith("hlo/"):
            files.set_aside[url(name)] = f"{name}: another file of the HLO dump (not the scheduled module that ran)"
        elif sources.JAX_PROFILE.match(name):
            run = sources.JAX_PROFILE.match(name).group("run")
            files.set_aside[url(name)] = (f"{name}: an older profile than plugins/profile/{latest}/" if run != latest
                                          else f"{name}: the same profile as {read}, which was read")
        else:
            files.set_aside[url(name)] = f"{name}: not part of a JAX run's profile, compiled HLO or timing.json"
    return files


def _modules(files: RunFiles, op_names: dict[str, set[str]]) -> dict[str, HloModule]:
    """The compiled module of each name the profile ran: of several texts of one name, the one
    whose entry computation holds most of the ops the profile saw run (the others set aside)."""
    by_name: dict[str, list[HloModule]] = {}
    for path in files.hlo:
        module = parse_hlo(path, read_source(path))
        by_name.setdefault(module.name, []).append(module)
    chosen = {}
    for name, candidates in by_name.items():
        seen = op_names.get(name, set())
        best = max(candidates, key=lambda m: len(seen & set(m.entry_computation.by_name)))
        chosen[name] = best
        for other in candidates:
            if other is not best:
                files.set_aside[other.path] = (f"{_relative(files, other.path)}: module {name} again;"
                                               f" {_relative(files, best.path)} was used")
    return chosen


def _relative(files: RunFiles, url: str) -> str:
    return url.split(files.root + "/", 1)[-1]


def _timing(path: str | None) -> list[int] | None:
    """timing.json's unprofiled step times (`steps_ns`, positive integers), when there is one."""
    if path is None:
        return None
    where, document = read_document(path)
    steps = document.get("steps_ns") if isinstance(document, dict) else None
    if not isinstance(steps, list) or not steps or not all(type(s) is int and s > 0 for s in steps):
        raise ConfigError(where, "steps_ns", "expected a non-empty list of positive integers (ns per unprofiled step)")
    return steps


def convert_jax(src: str, out_dir: str, prefix: str, options: SourceOptions = SourceOptions(), progress=None,
                accounted: frozenset[str] = frozenset()):
    """The registry's entry (convert/sources.py): a run folder converts whole, so `progress` and
    `accounted` have nothing to say here."""
    return convert_jax_run(src, out_dir, prefix, options)


def convert_jax_run(src: str, out_dir: str, prefix: str, options: SourceOptions = SourceOptions()):
    """Convert the JAX run at src into out_dir/prefix.<device>.et (+ groups and report); returns a
    convert.job.JobResult, as every source does."""
    from chakra_core.convert.common.result import write_converted

    if options != SourceOptions():
        raise SourceFormatError(src, "a JAX run takes no conversion options (its profile and HLO say everything)")
    files = find_run(src)
    profile = read_xplane(files.profile) if files.profile.endswith(".pb") else read_trace_json(files.profile)
    ops = device_ops(profile)
    if not ops.by_device:
        raise SourceFormatError(files.profile, "no device ops (events naming an hlo_op and device_ordinal, or an"
                                " `XLA Ops` line of a /device: plane)")
    op_names: dict[str, set[str]] = {}
    for steps in ops.by_device.values():
        for runs in steps.values():
            for run in runs:
                op_names.setdefault(run[0].args.get("hlo_module", ""), set()).update(
                    e.args.get("hlo_op") or e.name for e in run)
    npus = _devices(files.profile, ops)
    _check_size(files.profile, ops, npus)
    modules = _modules(files, op_names)
    emitted = emit_job(ops, modules, npus)
    source = _report(files, profile.reader, ops, modules, emitted, npus)
    mismatches = check_send_recv(emitted.tables)  # every send meets its receive (same tag and size)
    return write_converted(Job(emitted.tables, emitted.comm_groups, prefix), out_dir, prefix, source, mismatches,
                           unprofiled_step_ns=_timing(files.timing), set_aside=files.set_aside)


def _devices(path: str, ops: DeviceOps) -> int:
    """The job's devices: one per ordinal up to the largest, each its own table, so bounded before
    any is built: within the npus limit, and at most 16 per device that ran ops, plus 16 (one
    event naming device 65535 made 65,536 tables: 2.7 GB)."""
    npus = max(ops.by_device) + 1
    if npus > limits.value("npus"):
        raise limits.LimitExceeded(path, "npus", f"device ordinal {npus - 1:,}")
    used = len(ops.by_device)
    allowed = IDLE_DEVICES_ALLOWED * (used + 1)
    if npus > allowed:
        raise SourceFormatError(path, f"device ordinal {npus - 1:,} makes {npus:,} devices, but ops ran on {used:,}"
                                f" of them (at most {allowed:,}: {IDLE_DEVICES_ALLOWED} per device with ops, plus"
                                f" {IDLE_DEVICES_ALLOWED})")
    return npus


def _check_size(path: str, ops: DeviceOps, npus: int) -> None:
    """The job's nodes, counted before any is built: at most 3 per op (launch gap, op, own time), 2
    per device and step (its launch, the host after it) and a table per device; within the nodes
    limit and the lower one of jobs built in Python (source_nodes)."""
    events = sum(len(run) for steps in ops.by_device.values() for runs in steps.values() for run in runs)
    nodes = 3 * events + 2 * npus * len(ops.steps) + TABLE_NODES * npus
    for name in ("nodes", "source_nodes"):
        if nodes > limits.value(name):
            raise limits.LimitExceeded(path, name, f"{events:,} device ops on {npus:,} device(s) over"
                                       f" {len(ops.steps):,} step(s) make up to {nodes:,} nodes, a device's"
                                       f" table counted as {TABLE_NODES}")


def _report(files: RunFiles, reader: str, ops, modules: dict[str, HloModule], emitted, npus: int) -> dict:
    """What the report's `source` says: what was read, what was made, what could not be known."""
    missing = []
    if not modules:
        missing.append("no compiled HLO text: collective sizes and communicator groups are unknown (collectives"
                       " written with size 0 over every device), collective-permutes are compute (peers unknown),"
                       " dependencies follow time order only, op categories come from names")
    unmatched = sorted(ops.modules - set(modules))
    if modules and unmatched:
        missing.append(f"no HLO text for module(s) {', '.join(unmatched)}: their ops are converted from the trace alone")
    if not ops.annotated:
        missing.append("no step annotations (jax.profiler.StepTraceAnnotation): the whole profile is one step")
    if ops.outside_steps:
        missing.append(f"{ops.outside_steps} device op(s) ran before the first annotated step: left out")
    made = ", ".join(f"{what} {count:,}" for what, count in sorted(emitted.counts.items()))
    notes = [f"read {files.profile.rsplit('/', 1)[-1]} ({reader}) and {len(modules)} compiled module(s);"
             f" {npus} device(s), steps {[s.number for s in ops.steps]}", f"made: {made}", *missing]
    return {"format": "jax", "time": "durations as the profiler measured them (us)", "notes": notes,
            "reader": reader, "profile": files.profile, "hlo": sorted(m.path for m in modules.values()),
            "modules": sorted(ops.modules), "devices": npus, "steps": [s.number for s in ops.steps],
            "made": dict(sorted(emitted.counts.items())), "missing": missing, "timing": files.timing}
