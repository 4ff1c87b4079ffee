"""A job's input files: which rank each PyTorch trace is, the Kineto trace and step timing
beside it, and an account of every other file seen.

Inputs: one PyTorch ET file; a folder (or .tar/.tar.gz/.zip bundle of one, unpacked within
the limits by chakra_core.archives) holding `rank<R>.et.json[.gz]` with optional
`rank<R>.kineto.json[.gz]` and `rank<R>.timing.json` beside them; or a multi-rank JSON
`{"<rank>": <PyTorch ET document>, ...}`.

Nothing is passed over in silence: a name meant as a job's file that does not parse
(`rank-1.et.json`, `rank1e3.et.json`), two files or members of one rank, or two multi-rank
keys of one rank (`"0"` and `"00"`) are an error naming them; a side file without its trace,
a folder or any other file becomes a note (but for what tools/collect.py records beside the
traces: job.json, rank<R>.program.json); a timing file that cannot be used is set aside,
with its reason, while the traces convert.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import fsspec

from chakra_core import limits
from chakra_core.archives import unpack
from chakra_core.documents import read_document
from chakra_core.convert import sources
from chakra_core.convert.common.source_file import JobInputError
from chakra_core.errors import ChakraError
from chakra_core.inputs import read_bounded

PYTORCH = sources.source("pytorch")
SIDES = [sources.SIDE_FILES[kind] for kind in PYTORCH.sides]
BUNDLES = (".tar", ".tar.gz", ".tgz", ".zip")


@dataclass
class RankInput:
    rank: int
    host: str
    kineto: str | None
    timing: str | None = None  # rank<R>.timing.json: steps timed with the profiler off (TraceRecorder timed_steps)


@dataclass
class JobInputs:
    ranks: list[RankInput]
    notes: list[str] = field(default_factory=list)  # files seen and not used, each with why
    profiler_cost: str | None = None  # profiler_cost.json beside the traces (tools/profcost.py)
    set_aside: dict[str, str] = field(default_factory=dict)  # side files of no use: url -> the reason


def checked_rank(rank: int, where: str) -> int:
    """rank, when a job can have it (below the `npus` limit)."""
    if not 0 <= rank < limits.value("npus"):
        raise limits.LimitExceeded(where, "npus", f"rank {rank:,} is beyond any job")
    return rank


def find_ranks(src: str, workdir: str, accounted: frozenset[str] = frozenset()) -> JobInputs:
    """The per-rank inputs `src` describes (archives and multi-rank JSON unpack into workdir);
    files named in `accounted` (base names) were dealt with by the caller and are not looked at."""
    fs, path = fsspec.core.url_to_fs(src)
    if not fs.exists(path):
        raise JobInputError(f"{src}: no such file or folder")
    if fs.isdir(path):
        return _ranks_in_folder(fs, path, src, accounted)
    if path.lower().endswith(BUNDLES):
        target = os.path.join(workdir, "bundle")
        notes = unpack(src, target)
        inputs = _ranks_in_folder(*fsspec.core.url_to_fs(target), src, accounted)
        inputs.notes[:0] = notes
        return inputs
    if _is_multi_rank_json(src):
        return JobInputs(_split_multi_rank_json(src, workdir))
    match = sources.PYTORCH_RANK_IN_NAME.search(os.path.basename(path))
    rank = checked_rank(int(match.group(1)), src) if match else -1
    kineto = _beside(fs, path, sources.PYTORCH_KINETO_BESIDE)
    return JobInputs([RankInput(rank, src, kineto)])


def _ranks_in_folder(fs, path: str, src: str, accounted: frozenset[str]) -> JobInputs:
    traces: dict[int, str] = {}
    sides: dict[tuple[int, str], str] = {}
    notes, unreadable, profiler_cost = [], [], None
    for entry in sorted(fs.ls(path, detail=True), key=lambda e: e["name"]):
        name = os.path.basename(entry["name"].rstrip("/"))
        if name in accounted or sources.PYTORCH_RECORDED_WITH_THE_JOB.match(name):
            continue
        if name == sources.PYTORCH_PROFILER_COST and entry["type"] != "directory":
            profiler_cost = fs.unstrip_protocol(entry["name"])
            continue
        if entry["type"] == "directory":
            notes.append(f"{name}/: a folder inside the job, not read")
        elif (rank := PYTORCH.trace.rank(name)) is not None:
            rank = checked_rank(rank, f"{src}: {name}")
            if rank in traces:
                raise JobInputError(f"{src}: {os.path.basename(traces[rank])} and {name} both claim rank {rank}")
            traces[rank] = fs.unstrip_protocol(entry["name"])
        elif side := next((rule for rule in SIDES if rule.pattern.match(name)), None):
            sides[(side.rank(name), side.kind)] = fs.unstrip_protocol(entry["name"])
        elif sources.PYTORCH_MEANT_AS_JOB_FILE.search(name):
            unreadable.append(name)
        else:
            notes.append(f"{name}: not a file of a job ({PYTORCH.trace.shown} and the files beside it), not read")
    if unreadable:
        shown = [rule.shown for rule in (PYTORCH.trace, *SIDES)]
        raise JobInputError(f"{src}: {', '.join(unreadable[:4])}{' ...' if len(unreadable) > 4 else ''}: not "
                            f"{', '.join(shown[:-1])} or {shown[-1]} with R a whole number; rename or remove them")
    if not traces:
        raise JobInputError(f"{src}: no {PYTORCH.trace.shown} files in this folder: give a job's folder, a "
                            "trace file, a bundle or a JAX run (chakra convert --help)")
    for (rank, kind), url in sorted(sides.items()):
        if rank not in traces:
            notes.append(f"{os.path.basename(url)}: a {kind} file of rank {rank}, which has no trace here; not read")
    ranks = [RankInput(rank, url, sides.get((rank, "kineto")), sides.get((rank, "timing")))
             for rank, url in sorted(traces.items())]
    return JobInputs(ranks, notes, profiler_cost=profiler_cost)


def _beside(fs, et_path: str, suffixes: tuple[str, ...]) -> str | None:
    """The first existing `<base><suffix>` beside `<base>.et.json[.gz]`."""
    match = sources.PYTORCH_TRACE_BASE.match(os.path.basename(et_path))
    if not match:
        return None
    folder = os.path.dirname(et_path)
    for suffix in suffixes:
        candidate = f"{folder}/{match.group(1)}{suffix}" if folder else match.group(1) + suffix
        if fs.exists(candidate):
            return fs.unstrip_protocol(candidate)
    return None


def _is_multi_rank_json(src: str) -> bool:
    from chakra_core.format.etfile import open_binary

    with open_binary(src) as f:
        head = f.read(4096).lstrip()
    return re.match(rb'^\{\s*"\d+"\s*:', head) is not None


def _split_multi_rank_json(src: str, workdir: str) -> list[RankInput]:
    """A multi-rank JSON is read whole (it is meant for small jobs; bounded by `element_bytes`)
    and written per rank; two keys of one rank ("0", "00") are refused."""
    import orjson

    from chakra_core.convert.common.jsonstream import TraceJSONError, check_depth

    data = read_bounded(src, "element_bytes", "a multi-rank JSON")
    check_depth(data, src)
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceJSONError(src, f"malformed JSON: {exc}") from None
    ranks: dict[int, str] = {}
    for key, trace in document.items():
        if not key.isdigit() or not isinstance(trace, dict):
            raise JobInputError(f"{src}: member {key!r} is not '<rank>': <PyTorch ET document>")
        rank = checked_rank(int(key), f"{src}: member {key!r}")
        if rank in ranks:
            raise JobInputError(f"{src}: members {ranks[rank]!r} and {key!r} both name rank {rank}")
        ranks[rank] = key
        with open(os.path.join(workdir, f"rank{rank}.et.json"), "wb") as out:
            out.write(orjson.dumps(trace))
    return [RankInput(rank, os.path.join(workdir, f"rank{rank}.et.json"), None) for rank in sorted(ranks)]


def unprofiled_steps(inputs: JobInputs) -> list[int] | None:
    """Per step timed with the profiler off, the slowest rank's time (ns), from every rank's
    `rank<R>.timing.json` (`{"steps_ns": [...]}`); None unless every rank has a usable one. A
    timing file that cannot be used is set aside (inputs.set_aside, with its reason); when some
    ranks have no usable one, inputs.notes says which and the others go unused."""
    per_rank, timed = [], [r for r in inputs.ranks if r.timing]
    for item in timed:
        try:
            path, document = read_document(item.timing)
        except ChakraError as exc:
            inputs.set_aside[item.timing] = str(exc)
            continue
        steps = document.get("steps_ns")
        if not isinstance(steps, list) or not steps or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**62 for v in steps):
            inputs.set_aside[item.timing] = (f"{path}: steps_ns: expected a list of positive integers (ns per "
                                             "unprofiled step); set aside")
            continue
        per_rank.append(steps)
    if timed and len(per_rank) < len(inputs.ranks):
        missing = [r.rank for r in inputs.ranks if not r.timing or r.timing in inputs.set_aside]
        inputs.notes.append(f"unprofiled step times of ranks {', '.join(map(str, missing[:8]))}"
                            f"{' ...' if len(missing) > 8 else ''} missing or unusable: the other ranks' timing "
                            "files are not used (every rank's are needed)")
        return None
    return [max(step) for step in zip(*per_rank)] or None
