"""Convert a whole PyTorch job: find its ranks, convert each, infer process groups, check collectives.

Inputs: what discover.find_ranks finds (one PyTorch ET file, a folder or bundle of
`rank<R>.et.json[.gz]` with Kineto and timing files beside them, a multi-rank JSON).
Output: `<prefix>.<R>.et` per rank (what ASTRA-sim's --workload-configuration=<prefix>
opens), `<prefix>.comm_groups.json` (its --comm-group-configuration) and
`<prefix>.report.json` (what was kept, collapsed, cut, inferred, the cross-rank check, and
the input files not used). They replace an earlier conversion with the same prefix as a set:
its extra ranks are removed, and a failed conversion leaves it whole.

Cross-rank check: within each process group every member must issue the same collectives in
the same order, type and size (all_to_all sizes may differ: uneven splits); every send must
meet a recv with the same source, destination, tag and size. The first mismatch is reported
precisely.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Callable

import fsspec
import pyarrow as pa

from chakra_core.convert.common.collector import with_collector_paused
from chakra_core.convert.common.result import JobResult, published, tables_wanted
from chakra_core.convert.common.source_file import SourceOptions
from chakra_core.convert.pytorch import comms
from chakra_core.convert.pytorch.groups import WORLD, ProcessGroups, comm_group_document
from chakra_core.convert.pytorch.discover import JobInputs, RankInput, checked_rank, find_ranks, unprofiled_steps
from chakra_core.convert.pytorch.kineto import rank_of, read_kineto
from chakra_core.convert.pytorch.conversion import RankConversion
from chakra_core.convert.pytorch.noderows import NodeRows
from chakra_core.convert.pytorch.analysis import CommRecord
from chakra_core.convert.pytorch.et import read_host_trace
from chakra_core.documents import read_document
from chakra_core.errors import ChakraError
from chakra_core.format.columns import NODE_SCHEMA
from chakra_core.format.etfile import ETWriter
from chakra_core.format.job import groups_url, rank_url, write_comm_groups


# ---------------------------------------------------------------------------- conversion
def convert_pytorch(src: str, out_dir: str, prefix: str, options: SourceOptions,
                    progress: Callable[[str, int, int], None] | None, accounted: frozenset[str]) -> JobResult:
    """The registry's entry (convert/sources.py): PyTorch traces take no options."""
    return convert_job(src, out_dir, prefix, progress, accounted)


@with_collector_paused  # and resumed once the job's objects are let go: no pass over them
def convert_job(src: str, out_dir: str, prefix: str = "trace",
                progress: Callable[[str, int, int], None] | None = None,
                accounted: frozenset[str] = frozenset()) -> JobResult:
    """Convert every rank of `src` into `out_dir`; see the module docstring. `accounted`: base
    names of files in src the caller has dealt with (discover.find_ranks leaves them alone)."""
    with tempfile.TemporaryDirectory(prefix="chakra-convert-") as workdir:
        inputs = find_ranks(src, workdir, accounted)
        conversions = [analyse_rank(item, progress) for item in inputs.ranks]
        return convert_ranks(conversions, inputs, out_dir, prefix)


@with_collector_paused
def analyse_rank(item: RankInput, progress: Callable[[str, int, int], None] | None = None) -> RankConversion:
    """One rank read and analysed (the traces are referenced by the conversion alone, which
    releases them once emitted); the nightly's per-rank Ray tasks call it too (pipeline/nightly/bigjobs)."""
    kineto = read_kineto(item.kineto) if item.kineto else None
    rank = checked_rank(rank_of(item.host, kineto, item.rank if item.rank >= 0 else None), item.host)
    step = (lambda done, total, label=f"rank {rank}": progress(label, done, total)) if progress else None
    total = file_size(item.host)
    host = read_host_trace(item.host, progress=(lambda b: step(b, total)) if step else None)
    return RankConversion(host, kineto, rank)


@with_collector_paused
def convert_ranks(conversions: list[RankConversion], inputs: JobInputs, out_dir: str, prefix: str) -> JobResult:
    """A job's analysed ranks (with their input files' account) written as one job: process groups
    merged and inferred, each call's own time kept, collectives checked across ranks."""
    job_groups = ProcessGroups()
    for c in conversions:
        job_groups.merge(c.groups)
    resolved, inference_notes = infer_groups(conversions, job_groups)
    inference_notes.extend(job_groups.problems)
    keep_own_time(conversions, resolved, job_groups)
    job_prefix = f"{out_dir}/{prefix}"
    steps = unprofiled_steps(inputs)
    result = JobResult(prefix, out_dir, [c.rank for c in conversions], [], groups_url(job_prefix),
                       f"{job_prefix}.report.json", [], [], inference_notes, unprofiled_step_ns=steps,
                       input_notes=inputs.notes, set_aside=inputs.set_aside)
    if inputs.profiler_cost:
        result.profiler_cost = _profiler_cost(inputs.profiler_cost, result)
    return published(result, lambda: _write_outputs(result, conversions, resolved, job_groups))


def _write_outputs(result: JobResult, conversions: list[RankConversion], resolved: dict, job_groups) -> None:
    """Every rank's ET, then the communicator groups (each file atomically)."""
    for c in conversions:
        rows, metadata = c.emit_rows(resolved.get(c.rank), job_groups)
        c.release()
        url = rank_url(f"{result.out_dir}/{result.prefix}", c.rank)
        result.et_files.append(url)
        nodes, table = write_rows(rows, url, metadata)
        del rows
        if table is not None:
            result.tables.append(table)
        result.reports.append(c.report.to_dict())
        result.nodes += nodes
        result.host_nodes += c.report.host_nodes
    result.mismatches = check_collectives(conversions, job_groups)
    result.lacking_rank = lacking_rank(conversions)
    write_comm_groups(comm_group_document(job_groups), result.comm_group_file)  # "{}" when there are none


def write_rows(rows: NodeRows, url: str, metadata) -> tuple[int, pa.Table | None]:
    """A rank's rows written to url batch by batch, each made, encoded and let go in turn (the
    file appears whole or not at all); returns the nodes written and, where the caller analyses
    the tables next (tables_wanted), the table."""
    kept = []
    with ETWriter(url, metadata) as writer:
        for batch in rows.batches():
            writer.write_batch(batch)
            if tables_wanted():
                kept.append(batch)
    return writer.nodes_written, pa.Table.from_batches(kept, NODE_SCHEMA) if tables_wanted() else None


def _profiler_cost(url: str, result: JobResult) -> dict | None:
    """The probe document beside the traces, carried into the report; one that cannot be read as
    a JSON object is set aside with its reason (the traces convert without it)."""
    try:
        return read_document(url)[1]
    except ChakraError as exc:
        result.set_aside[url] = str(exc)
        return None


def file_size(url: str) -> int:
    """The stored size of the file at url (0 where it cannot be told)."""
    fs, path = fsspec.core.url_to_fs(url)
    try:
        return int(fs.size(path) or 0)
    except OSError:
        return 0


# ---------------------------------------------------------------------------- groups
def _compatible(a: CommRecord, b: CommRecord) -> bool:
    return a.kind == b.kind and (a.size == b.size or a.kind == comms.ALL_TO_ALL)


def infer_groups(conversions: list[RankConversion], groups: ProcessGroups
                 ) -> tuple[dict[int, dict[int, tuple[str, str]]], list[str]]:
    """Process groups of collectives the traces do not name (gloo ops issued from C++, e.g. by
    DDP): replay every rank's collectives in order; a collective whose group is unknown is
    assigned the largest of its rank's groups whose members all have a matching collective
    next. Returns rank -> {anchor index: (pg_name, "inferred")} and notes."""
    notes: list[str] = []
    by_rank = {c.rank: [r for r in c.records if r.kind not in (comms.SEND, comms.RECV)] for c in conversions}
    if not any(r.pg_name is None for records in by_rank.values() for r in records):
        return {}, notes
    if len(conversions) < 2:
        notes.append("collectives without a recorded process group and a single rank: nothing to infer from")
        return {}, notes
    name_of_members: dict[tuple[int, ...], str] = {}
    for name, group in sorted(groups.groups.items(), key=lambda kv: (len(kv[0]), kv[0])):
        name_of_members.setdefault(tuple(group.ranks), name)
    heads = {rank: 0 for rank in by_rank}
    resolved: dict[int, dict[int, tuple[str, str]]] = defaultdict(dict)
    assigned: dict[tuple[int, int], str] = {}

    def head(rank: int) -> CommRecord | None:
        records = by_rank.get(rank)
        return records[heads[rank]] if records is not None and heads[rank] < len(records) else None

    def group_of(rank: int, record: CommRecord) -> str | None:
        return record.pg_name or assigned.get((rank, record.index))

    progressed = True
    while progressed:
        progressed = False
        for rank in by_rank:
            record = head(rank)
            if record is None:
                continue
            known = group_of(rank, record)
            candidates = [known] if known else [name_of_members[m] for m in
                                                sorted(name_of_members, key=len, reverse=True) if rank in m]
            for pg in candidates:
                members = groups.members(pg)
                if not members or any(m not in by_rank for m in members):
                    continue
                others = [(m, head(m)) for m in members]
                if all(h is not None and _compatible(h, record) and group_of(m, h) in (None, pg) for m, h in others):
                    for m, h in others:
                        if group_of(m, h) is None:
                            assigned[(m, h.index)] = pg
                            resolved[m][h.index] = (pg, "inferred")
                        heads[m] += 1
                    progressed = True
                    break
    stuck = sum(len(records) - heads[rank] for rank, records in by_rank.items())
    if stuck:
        notes.append(f"process-group inference stopped with {stuck} collective(s) unmatched; unresolved ones are"
                     " assumed to use the world group")
    inferred = sum(len(v) for v in resolved.values())
    if inferred:
        notes.append(f"inferred the process group of {inferred} collective(s) by matching ranks' collective order")
    return dict(resolved), notes


# ---------------------------------------------------------------------------- time of calls
def _matched_calls(conversions: list[RankConversion], resolved: dict, groups: ProcessGroups
                   ) -> list[list[tuple[RankConversion, CommRecord]]]:
    """Each communication call of the job with the calls it meets on the other ranks: the k-th
    collective of a group on each member, the k-th message of a (source, destination, tag)."""
    ranks = {c.rank for c in conversions}
    per_group: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    pairs: dict[tuple, list[list]] = defaultdict(lambda: [[], []])
    for c in conversions:
        for record in c.records:
            pg = record.pg_name or resolved.get(c.rank, {}).get(record.index, (WORLD,))[0]
            if record.kind in (comms.SEND, comms.RECV):
                members = groups.members(pg) or sorted(ranks)
                peer = members[record.peer] if record.peer is not None and 0 <= record.peer < len(members) else None
                if peer is None:
                    continue
                key = (c.rank, peer, record.tag) if record.kind == comms.SEND else (peer, c.rank, record.tag)
                pairs[key][record.kind == comms.RECV].append((c, record))
            else:
                per_group[pg][c.rank].append((c, record))
    matched = []
    for pg, lists in per_group.items():
        members = groups.members(pg) or sorted(ranks)
        if any(m not in lists for m in members):
            continue
        for k in range(min(len(lists[m]) for m in members)):
            matched.append([lists[m][k] for m in members])
    for sends, recvs in pairs.values():
        matched.extend([s, r] for s, r in zip(sends, recvs))
    return matched


def keep_own_time(conversions: list[RankConversion], resolved: dict, groups: ProcessGroups) -> None:
    """The time a rank is blocked in a communication call is the call's own duration plus the
    wait for the peers that came later. The rank that came last waited for nothing: the
    shortest blocked time among the ranks of one call is its own duration (durations, so the
    ranks' clocks need not agree). Each rank keeps it as a CPU node (its gloo node after the
    communication node, or its annotation); the waits are left to the simulator, which makes
    them from the ranks' own times (docs/ingestion.md, 'Time of communication calls')."""
    for call in _matched_calls(conversions, resolved, groups):
        if call[0][1].kind == comms.BROADCAST:  # ASTRA-sim replays a broadcast by its duration, the span of its work
            continue
        blocked = [c.call_time.blocked.get(record.index, 0.0) for c, record in call]
        own = min(blocked)
        if own <= 0:
            continue
        for c, record in call:
            c.own_time[record.index] = own


# ---------------------------------------------------------------------------- checks
def _describe(record: CommRecord) -> str:
    return f"{comms.kind_label(record.kind)} of {record.size:,} B (node {record.node_id})"


def lacking_rank(conversions: list[RankConversion]) -> str | None:
    """A rank the traces' world group holds that the job lacks (a job given whole must have
    them all; converting some ranks of a job on purpose is not a mistake, so this is no mismatch)."""
    ranks = {c.rank for c in conversions}
    world = max((c.groups.world_size or 0 for c in conversions), default=0)
    lacking = next((r for r in range(min(world, max(ranks, default=0) + 2)) if r not in ranks), None)
    return None if lacking is None else f"the traces' world group has {world:,} ranks, and rank {lacking} is missing"


def check_collectives(conversions: list[RankConversion], groups: ProcessGroups) -> list[str]:
    """Every mismatch between ranks, the first one per process group / peer pair."""
    if len(conversions) < 2:
        return []
    ranks = {c.rank for c in conversions}
    per_group: dict[str, dict[int, list[CommRecord]]] = defaultdict(lambda: defaultdict(list))
    sends: dict[tuple, list[CommRecord]] = defaultdict(list)
    recvs: dict[tuple, list[CommRecord]] = defaultdict(list)
    for c in conversions:
        for record in c.records:
            if record.kind == comms.SEND or record.kind == comms.RECV:
                members = groups.members(record.pg_name) or sorted(ranks)
                peer = members[record.peer] if record.peer is not None and 0 <= record.peer < len(members) else record.peer
                key = (c.rank, peer, record.tag) if record.kind == comms.SEND else (peer, c.rank, record.tag)
                (sends if record.kind == comms.SEND else recvs)[key].append(record)
            else:
                per_group[record.pg_name or WORLD][c.rank].append(record)
    problems = []
    for pg, lists in sorted(per_group.items()):
        members = [m for m in (groups.members(pg) or sorted(ranks)) if m in ranks]
        reference_rank = members[0] if members else min(lists)
        reference = lists.get(reference_rank, [])
        for m in members[1:]:
            other = lists.get(m, [])
            for k in range(max(len(reference), len(other))):
                a = reference[k] if k < len(reference) else None
                b = other[k] if k < len(other) else None
                if a is None or b is None or not _compatible(a, b):
                    problems.append(f"process group {pg} (ranks {members}): collective #{k + 1}: rank {reference_rank}"
                                    f" has {_describe(a) if a else 'nothing'}, rank {m} has"
                                    f" {_describe(b) if b else 'nothing'}")
                    break
    for key in sorted(set(sends) | set(recvs), key=str):
        s, r = sends.get(key, []), recvs.get(key, [])
        src, dst, tag = key
        if dst not in ranks or src not in ranks:
            continue
        for k in range(max(len(s), len(r))):
            a = s[k] if k < len(s) else None
            b = r[k] if k < len(r) else None
            if a is None or b is None or a.size != b.size:
                problems.append(f"point-to-point {src} -> {dst} tag {tag}: message #{k + 1}: rank {src} sends"
                                f" {f'{a.size:,} B (node {a.node_id})' if a else 'nothing'}, rank {dst} receives"
                                f" {f'{b.size:,} B (node {b.node_id})' if b else 'nothing'}")
                break
    return problems
