"""Convert a job recorded as Kineto traces alone (docs/gpu.md, 'Kineto traces alone'): each
rank's host trace is rebuilt from its Kineto trace (host.py), then analysed, linked and emitted
as an execution trace with its Kineto trace is (convert/pytorch/), and the ranks written as one
job (pytorch/job.convert_ranks: groups, own time of calls, the cross-rank check).

Inputs: one Kineto trace, or a folder holding one per rank, named `rank<R>.kineto.json[.gz]`,
`worker<R>...pt.trace.json[.gz]` or `<anything>.pt.trace.json[.gz]` (tensorboard_trace_handler),
with optional `rank<R>.timing.json` beside them. A rank is the trace's `distributedInfo.rank`
where it records one, else the number its name carries, else 0 for a lone file.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import fsspec

from chakra_core.convert import sources
from chakra_core.convert.common.result import JobResult
from chakra_core.convert.common.source_file import JobInputError, SourceOptions
from chakra_core.convert.kineto.host import host_trace, keep_args
from chakra_core.convert.pytorch.conversion import RankConversion
from chakra_core.convert.pytorch.discover import JobInputs, RankInput, checked_rank
from chakra_core.convert.pytorch.job import convert_ranks
from chakra_core.convert.pytorch.kineto import read_kineto


def convert_kineto(src: str, out_dir: str, prefix: str, options: SourceOptions,
                   progress: Callable[[str, int, int], None] | None, accounted: frozenset[str]) -> JobResult:
    """The registry's entry (convert/sources.py); see the module docstring."""
    inputs = _find_ranks(src, accounted)
    conversions, claimed = [], {}
    for item in inputs.ranks:
        conversions.append(_analysed(src, item, claimed))
    order = sorted(range(len(conversions)), key=lambda k: conversions[k].rank)
    inputs.ranks = [inputs.ranks[k] for k in order]
    return convert_ranks([conversions[k] for k in order], inputs, out_dir, prefix)


def _analysed(src: str, item: RankInput, claimed: dict[int, str]) -> RankConversion:
    """One rank's Kineto trace read, its host trace rebuilt, analysed (the trace is referenced by
    the conversion alone, which releases it once emitted)."""
    kineto = read_kineto(item.kineto, keep_args=keep_args)
    recorded = kineto.distributed_info.get("rank")
    rank = checked_rank(recorded if type(recorded) is int else max(item.rank, 0), item.kineto)
    if rank in claimed:
        raise JobInputError(f"{src}: {os.path.basename(claimed[rank])} and {os.path.basename(item.kineto)} "
                            f"both are rank {rank}")
    claimed[rank] = item.kineto
    item.rank = rank
    conversion = RankConversion(host_trace(kineto), kineto, rank)
    if not kineto.device and not kineto.runtime:
        conversion.report.notes.append("no device events in the Kineto trace: host operators only")
    elif kineto.device and all(d.correlation is None for d in kineto.device):
        conversion.report.notes.append("the device events carry no correlation ids (no flows): they "
                                       "cannot be tied to their launches; converted host-only")
    return conversion


def _find_ranks(src: str, accounted: frozenset[str]) -> JobInputs:
    """The Kineto traces of src (a file or a folder) and the step-timing files beside them."""
    rule, timing = sources.source("kineto").trace, sources.SIDE_FILES["timing"]
    fs, path = fsspec.core.url_to_fs(src)
    if not fs.exists(path):
        raise JobInputError(f"{src}: no such file or folder")
    if not fs.isdir(path):
        rank = rule.rank(os.path.basename(path))
        return JobInputs([RankInput(-1 if rank is None else rank, src, src)])
    names = sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))
    traces = [n for n in names if n not in accounted and rule.pattern.match(n)]
    if not traces:
        raise JobInputError(f"{src}: no Kineto traces ({rule.shown}) in this folder")
    timings = {timing.rank(n): n for n in names if n not in accounted and timing.pattern.match(n)}
    ranks = []
    for k, name in enumerate(traces):
        rank = rule.rank(name)
        side = timings.get(rank) if rank is not None else None
        url = fs.unstrip_protocol(f"{path.rstrip('/')}/{name}")
        ranks.append(RankInput(k if rank is None else rank, url, url,
                               fs.unstrip_protocol(f"{path.rstrip('/')}/{side}") if side else None))
    return JobInputs(ranks)
