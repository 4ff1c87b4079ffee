"""Big jobs on Ray: the memory a conversion needs, declared to Ray; a big PyTorch job converted
rank by rank, a Ray task per rank.

Ray places a task where the CPU it asks for is free; memory it does not count unless the task
declares it (the `memory` resource), so two big conversions on one worker can exhaust it and
get it killed. Every job task therefore declares what its conversion will need: a worker's
own footprint plus BYTES_PER_READ_BYTE for every byte its trace files hold as read (a gzip
file counted GZIP_EXPANSION times its stored size), never more than the largest Ray node has
(more could never be placed, and the night would wait for it forever).

A PyTorch job whose largest rank reads PER_RANK_BYTES or more (and that has more than one
rank, in a folder) is converted rank by rank: its job task starts a task per rank that reads
and analyses that rank's files (chakra_core's RankConversion, returned through Ray's object
store), each declaring that rank's memory, then writes the job from them as `chakra convert`
does (process groups merged and inferred, collectives checked across ranks); the ranks read
in parallel instead of one after the other, on whichever workers have the memory.
docs/pipeline.md, 'Big jobs', says how the figures were measured.

A long conversion says how far it got: the job and rank tasks put lines on a `ProgressLog` (a
Ray queue the day's driver drains into its log): a rank's start and end (bytes, nodes,
seconds), "k of n ranks converted" per job, and from within a rank, its host trace's bytes
read, at most every PROGRESS_EVERY_S.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chakra_core.convert import sources
from chakra_core.convert.common.result import JobResult
from chakra_core.convert.pytorch.discover import RankInput, find_ranks
from chakra_core.convert.pytorch.job import analyse_rank, convert_ranks, file_size
from chakra_core.errors import ChakraError
from chakra_core.terminal import human_bytes
from pipeline.cluster import WORKER_RETRIES
from pipeline.nightly.ingest import JobInput

PER_RANK_BYTES = 256 << 20  # a job whose largest rank reads this much converts a task per rank
WORKER_BYTES = 512 << 20  # a worker with the library imported (about 120 MiB) and the job's small tables
BYTES_PER_READ_BYTE = 4  # peak memory per byte of trace JSON read: conversion 2.3, tables and statistics on top
GZIP_EXPANSION = 25  # JSON bytes per gzip byte of the shipped GPU runs' traces (gpt: 16.9 MB in 0.66 MB)
PROGRESS_EVERY_S = 10.0  # the least time between two lines of one rank's bytes read


def read_bytes(name: str, stored: int) -> int:
    """The bytes a file holds as read: its stored size, gzip expanded by GZIP_EXPANSION."""
    return stored * GZIP_EXPANSION if name.endswith(".gz") else stored


def memory_for(read: int) -> int:
    """The memory a task that reads `read` bytes of traces declares to Ray."""
    return WORKER_BYTES + BYTES_PER_READ_BYTE * read


def job_memory(job: JobInput) -> int:
    """What the job's task declares: every file it reads (hashed, converted, summarised)."""
    return memory_for(sum(read_bytes(f.name, f.bytes) for f in job.files if f.problem is None))


def rank_bytes(job: JobInput) -> dict[int, int]:
    """Per rank, the bytes its files (traces and side files naming the rank) hold as read."""
    ranks: dict[int, int] = {}
    for f in job.files:
        if f.problem is not None or (f.kind != job.trace_format and f.kind not in sources.SIDE_FILES):
            continue  # not opened, or of no rank (job.json, an unknown file)
        rank = f.rank
        if rank is not None:
            ranks[rank] = ranks.get(rank, 0) + read_bytes(f.name, f.bytes)
    return ranks


def converts_by_rank(job: JobInput, per_rank_bytes: int = PER_RANK_BYTES) -> bool:
    """Whether the job converts a task per rank: a job of a source whose ranks convert apart
    (sources.Source.ranks_apart: PyTorch traces) with more than one rank, the largest reading
    per_rank_bytes or more."""
    ranks = rank_bytes(job) if job.source is not None and job.source.ranks_apart else {}
    return len(ranks) > 1 and max(ranks.values()) >= per_rank_bytes


def capped(memory: int) -> int:
    """memory, or the largest Ray node's when that is less (a task asking more would never run)."""
    import ray

    largest = max((node["Resources"].get("memory", 0) for node in ray.nodes() if node.get("Alive")), default=0)
    return min(memory, int(largest)) if largest else memory


def convert_by_rank(src: str, out_dir: str, prefix: str, accounted: frozenset[str],
                    log: ProgressLog | None = None) -> JobResult:
    """The job in folder `src` converted as chakra_core.convert.pytorch.job.convert_job converts
    it, each rank read and analysed by a Ray task of its own (in a Ray task: the job's); `log`
    hears of each rank as it starts and ends, and of the job's ranks converted so far."""
    import ray

    analyse = ray.remote(max_retries=WORKER_RETRIES)(analyse_logged)
    with tempfile.TemporaryDirectory(prefix="chakra-convert-") as workdir:
        inputs = find_ranks(src, workdir, accounted)
        refs = [analyse.options(memory=capped(memory_for(_item_bytes(item)))).remote(item, prefix, log)
                for item in inputs.ranks]
        if log is not None:
            log.line(f"{prefix}: converting {len(refs)} ranks, a Ray task each")
            waiting = list(refs)
            while waiting:
                _, waiting = ray.wait(waiting, num_returns=1)
                log.line(f"{prefix}: {len(refs) - len(waiting)} of {len(refs)} ranks converted")
        try:
            conversions = ray.get(refs)
        except ray.exceptions.RayTaskError as exc:  # the rank's own error, as the per-job path raises it
            raise exc.cause if isinstance(exc.cause, Exception) else RankFailed(str(exc).splitlines()[0]) from None
        return convert_ranks(conversions, inputs, out_dir, prefix)


def _item_bytes(item: RankInput) -> int:
    return sum(read_bytes(url, file_size(url)) for url in (item.host, item.kineto) if url)


@dataclass(frozen=True)
class ProgressLog:
    """Lines from the tasks of long conversions to the day's driver, through a Ray queue (an
    actor: `open` makes one, the driver `drain`s it into its log and `close`s it)."""

    queue: Any  # ray.util.queue.Queue
    every_s: float = PROGRESS_EVERY_S

    @classmethod
    def open(cls) -> ProgressLog:
        from ray.util.queue import Queue

        # no CPU held: the queue must not wait behind the conversions it reports on
        return cls(Queue(actor_options={"num_cpus": 0}), PROGRESS_EVERY_S)

    def line(self, text: str) -> None:
        self.queue.put(text)

    def drain(self, log: Callable[[str], None]) -> None:
        """Every line put so far, in order, to `log`."""
        size = self.queue.qsize()
        for text in self.queue.get_nowait_batch(size) if size else ():
            log(text)

    def close(self) -> None:
        self.queue.shutdown()


class RankFailed(ChakraError):
    """A rank's conversion error, carried back from its Ray task as its message alone: the
    library's errors hold their fields in their own constructors' arguments, which Ray cannot
    rebuild on the driver (it would say `Failed to deserialize exception`)."""


def analyse_logged(item: RankInput, prefix: str, log: ProgressLog | None):
    """analyse_rank of one rank of job `prefix` (a Ray task of convert_by_rank), saying to `log`
    when it starts and ends and, from within, how much of the host trace it has read; bad input
    is a RankFailed with the library's message."""
    try:
        return _analyse_logged(item, prefix, log)
    except ChakraError as exc:
        raise RankFailed(str(exc)) from None


def _analyse_logged(item: RankInput, prefix: str, log: ProgressLog | None):
    if log is None:
        return analyse_rank(item)
    name = f"{prefix} rank {item.rank}" if item.rank >= 0 else f"{prefix} {os.path.basename(item.host)}"
    started = time.monotonic()
    stored = human_bytes(sum(file_size(url) for url in (item.host, item.kineto) if url))
    log.line(f"{name}: converting {stored} of trace files")
    conversion = analyse_rank(item, _BytesRead(log, prefix, started))
    log.line(f"{name}: converted {stored}, {len(conversion.host):,} host nodes, "
             f"{len(conversion.device_work):,} device events, in {time.monotonic() - started:,.1f} s")
    return conversion


class _BytesRead:
    """A conversion's progress callback that puts a line on the log at most every log.every_s."""

    def __init__(self, log: ProgressLog, prefix: str, started: float):
        self.log, self.prefix, self.last = log, prefix, started

    def __call__(self, label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.log.every_s:
            self.last = now
            self.log.line(f"{self.prefix} {label}: read {human_bytes(done)} of {human_bytes(total)}")
