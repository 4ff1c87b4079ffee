"""Finding and loading the jobs of a fleet: folders of per-rank Chakra ETs.

A folder given on the command line holds one job, as per-rank ETs `<name>.<rank>.et` (ranks
0..N-1, optionally `<name>.comm_groups.json` beside them, ASTRA-sim's communicator-group
file), or subfolders that each hold one job (searched recursively). Anything that is not a
complete job is reported, never silently skipped: a folder mixing several names, missing
ranks, or a folder with no ETs at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import fsspec
import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.job import Job, groups_url, split_rank_url


class FleetError(ChakraError):
    """A folder that does not describe a job (the message names the folder and what is wrong)."""


@dataclass(frozen=True)
class JobFiles:
    """One job on storage: its rank files in rank order and its communicator groups file."""

    job_id: str  # the folder's path relative to the folder given; the job's name when it is that folder
    folder: str
    name: str
    rank_files: tuple[str, ...]
    comm_groups: str | None

    @property
    def ranks(self) -> int:
        return len(self.rank_files)

    @property
    def prefix(self) -> str:
        """The job's `<prefix>` (its rank files are `<prefix>.<rank>.et`)."""
        return f"{self.folder}/{self.name}"


def _job_in(fs, folder: str, files: list[str]) -> JobFiles:
    by_name: dict[str, dict[int, str]] = defaultdict(dict)
    for path in files:
        found = split_rank_url(path.rsplit("/", 1)[-1])
        if found:
            by_name[found[0]][found[1]] = path
    if len(by_name) > 1:
        raise FleetError(f"{folder}: rank files of several jobs ({', '.join(sorted(by_name))}); "
                         "put each job in its own folder")
    name, ranks = next(iter(by_name.items()))
    missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
    if missing:
        raise FleetError(f"{folder}: job {name!r} lacks rank file(s) {missing} (has {sorted(ranks)})")
    groups = groups_url(f"{folder}/{name}")
    return JobFiles(name, folder, name, tuple(ranks[r] for r in range(len(ranks))),
                    groups if fs.exists(groups) else None)


def find_jobs(folders: Iterable[str]) -> tuple[list[JobFiles], list[str]]:
    """Every job under the folders (any fsspec URL), and one line per folder that is not a job."""
    jobs: list[JobFiles] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for root in folders:
        fs, base = fsspec.core.url_to_fs(root)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        prefix = "" if protocol in ("file", "local") else f"{protocol}://"
        base = base.rstrip("/")
        if not fs.isdir(base):
            problems.append(f"{root}: not a folder")
            continue
        by_folder: dict[str, list[str]] = defaultdict(list)
        for path in fs.find(base):
            if split_rank_url(path.rsplit("/", 1)[-1]):
                by_folder[path.rsplit("/", 1)[0]].append(prefix + path)
        if not by_folder:
            problems.append(f"{root}: no per-rank ETs (<name>.<rank>.et) in it or below it")
        for folder in sorted(by_folder):
            relative = folder[len(base):].strip("/")
            try:
                job = _job_in(fs, prefix + folder, by_folder[folder])
            except FleetError as exc:
                problems.append(str(exc))
                continue
            job_id = relative or job.name
            seen[job_id] = seen.get(job_id, 0) + 1
            if seen[job_id] > 1:  # the same relative path under two folders given
                job_id = f"{job_id}#{seen[job_id]}"
            jobs.append(JobFiles(job_id, job.folder, job.name, job.rank_files, job.comm_groups))
    return jobs, problems


def load_job(job: JobFiles) -> tuple[list[pa.Table], dict[int, tuple[int, ...]]]:
    """The job's node tables (index = rank) and its communicator groups (empty when none): Job.read."""
    loaded = Job.read(job.prefix, job.ranks, job.comm_groups)
    return loaded.tables, loaded.comm_groups
