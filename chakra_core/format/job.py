"""A whole job on storage: one Chakra ET per rank plus its communicator groups.

The layout is the one ASTRA-sim opens: ``<prefix>.<rank>.et`` for ranks 0..N-1 (its
``--workload-configuration=<prefix>``) and, when the job has sub-groups,
``<prefix>.comm_groups.json`` (its ``--comm-group-configuration``): ``{"<id>": [ranks]}``
with ids >= 1 (0 is every NPU). Every reader and writer of that layout goes through here;
``prefix`` is any fsspec URL. A rank file may also be gzipped (``.et.gz``) where a reader
finds it so.

Every groups file this project ever wrote is that one mapping, pretty-printed three ways (one
group per line, ``indent=1``, one rank per line); a reader parses JSON, so it reads them all.
``comm_groups_text`` is the one way it is written now.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass, field

import fsspec
import pyarrow as pa

from chakra_core.documents import ConfigError, read_document
from chakra_core.errors import ChakraError
from chakra_core.format.names import COMM_GROUPS_SUFFIX, RANK_FILE, split_rank_url  # noqa: F401  (re-exported)
from chakra_core.literal import rank_siblings, remove_file
from chakra_core.outputs import afterwards, open_output, together

SCHEMA_VERSION = "0.0.4"

CommGroups = dict[int, tuple[int, ...]]


class JobLayoutError(ChakraError):
    """A job whose files do not form ranks 0..N-1."""


def rank_url(prefix: str, rank: int) -> str:
    return f"{prefix}.{rank}.et"


def groups_url(prefix: str) -> str:
    return f"{prefix}{COMM_GROUPS_SUFFIX}"


def _rank_files(prefix: str) -> tuple[object, list[tuple[int, str]]]:
    """(filesystem, [(rank, path)]) of every ``<prefix>.<R>.et[.gz]`` there is."""
    fs, path = fsspec.core.url_to_fs(prefix)
    return fs, [(found[1], p) for p in rank_siblings(fs, path) if (found := split_rank_url(p)) and found[0] == path]


def remove_other_ranks(prefix: str, written: Container[int]) -> None:
    """Removes the rank files of ``prefix`` an earlier job left beside the ranks now written (and
    the .et.gz of a rank now written as .et), so that a new job never lies beside an older one's
    ranks (a job of some ranks of a larger one, rank 3 alone say, keeps its own numbers)."""
    fs, found = _rank_files(prefix)
    for rank, path in found:
        if rank not in written or path.endswith(".gz"):
            remove_file(fs, path)


def find_ranks(prefix: str) -> int:
    """How many rank files ``<prefix>.<R>.et[.gz]`` exist; they must be exactly ranks 0..N-1."""
    ranks = sorted(rank for rank, _ in _rank_files(prefix)[1])
    if not ranks:
        raise JobLayoutError(f"{prefix}: no rank files {prefix}.<rank>.et")
    if ranks != list(range(len(ranks))):
        missing = sorted(set(range(ranks[-1] + 1)) - set(ranks))
        raise JobLayoutError(f"{prefix}: rank files are not 0..{ranks[-1]} (missing {missing[:8]}"
                             f"{' ...' if len(missing) > 8 else ''}; duplicates are .et and .et.gz of one rank)"
                             if missing else f"{prefix}: a rank has both a .et and a .et.gz file")
    return len(ranks)


def rank_files(prefix: str) -> list[str]:
    """The URLs of ``<prefix>.<R>.et[.gz]``, ranks 0..N-1 in order (find_ranks' checks)."""
    return [_existing_rank_file(prefix, rank) for rank in range(find_ranks(prefix))]


def read_ranks(prefix: str, npus: int | None = None, columns: Sequence[str] | None = None) -> list[pa.Table]:
    """The node tables of ranks 0..npus-1 (all found when None), index = rank; an error names
    the rank and its file. Plain local files are read in one pass (format/manyfiles.py) unless
    they are big: that pass holds their bytes and every column at once, where a file read alone
    holds a batch of it and keeps only `columns` (all when None)."""
    from chakra_core.format.etfile import read_table
    from chakra_core.format.manyfiles import read_local_tables

    if npus is None:
        npus = find_ranks(prefix)
    elif _exists(rank_url(prefix, npus)) or _exists(rank_url(prefix, npus) + ".gz"):
        raise JobLayoutError(f"{prefix}: the job has a rank file {rank_url(prefix, npus)}[.gz] beyond the {npus} "
                             f"read; give the job's own NPU count (or --traced-npus to scale it)")
    tables = read_local_tables([rank_url(prefix, rank) for rank in range(npus)], columns)
    if tables is not None:
        return tables
    tables = []
    for rank in range(npus):
        try:
            tables.append(read_table(_existing_rank_file(prefix, rank), columns))
        except ChakraError as exc:
            raise JobLayoutError(f"rank {rank} of {npus}: {exc}") from None
    return tables


def read_comm_groups(url: str) -> CommGroups:
    """ASTRA-sim communicator groups: ``{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}`` -> {1: (0, 1, 2, 3), ...}.

    Group ids are integers >= 1 (0 means "all NPUs" and may not be defined); members are
    distinct non-negative NPU ids, kept in file order. Groups may overlap. An error is one
    line naming the file and the key (documents.ConfigError).
    """
    path, data = read_document(url)
    groups: dict[int, tuple[int, ...]] = {}
    for raw_key, members in data.items():
        key = str(raw_key)
        if isinstance(raw_key, bool) or not re.fullmatch(r"[0-9]+", key):
            raise ConfigError(path, key, "a communicator group id must be an integer >= 1")
        group = int(key)
        if group == 0:
            raise ConfigError(path, key, "group id 0 is reserved for all NPUs; number groups from 1")
        if group in groups:
            raise ConfigError(path, key, f"group {group} is defined twice")
        if not isinstance(members, list) or not members:
            raise ConfigError(path, key, f"expected a non-empty list of NPU ids, got {members!r}")
        groups[group] = _members(path, key, group, members)
    return groups


def _members(path: str, key: str, group: int, members: list) -> tuple[int, ...]:
    seen: set[int] = set()
    for i, npu in enumerate(members):
        if isinstance(npu, bool) or not isinstance(npu, int) or npu < 0:
            raise ConfigError(path, f"{key}[{i}]", f"an NPU id must be a non-negative integer, got {npu!r}")
        if npu in seen:
            raise ConfigError(path, f"{key}[{i}]", f"NPU {npu} is listed twice in group {group}")
        seen.add(npu)
    return tuple(members)


def comm_groups_text(groups: Mapping[int, Sequence[int]]) -> str:
    """The one serialisation every writer uses: ids ascending, one rank per line (so that no
    run of ranks can spell a training string, and diffs stay readable)."""
    for gid in groups:
        if int(gid) < 1:
            raise ValueError(f"communicator group id {gid} must be >= 1 (0 means all NPUs)")
    return json.dumps({str(int(g)): [int(r) for r in m] for g, m in sorted(groups.items(), key=lambda kv: int(kv[0]))},
                      indent=0) + "\n"


def write_comm_groups(groups: Mapping[int, Sequence[int]], url: str) -> str:
    with open_output(url, "w") as f:
        f.write(comm_groups_text(groups))
    return url


@dataclass
class Job:
    """A job in memory: one node table per rank (rank = index) and its communicator groups.
    Ranks may share one table object (an SPMD job); it is then encoded once."""

    tables: list[pa.Table]
    comm_groups: CommGroups = field(default_factory=dict)
    name: str = "job"

    @property
    def npus(self) -> int:
        return len(self.tables)

    @classmethod
    def read(cls, prefix: str, npus: int | None = None, comm_groups: str | None = None,
             columns: Sequence[str] | None = None) -> Job:
        """Ranks 0..npus-1 (read_ranks, only `columns` of them when given) and the groups file (the
        one beside the ranks when not named; none if it does not exist)."""
        tables = read_ranks(prefix, npus, columns)
        groups_file = comm_groups or (groups_url(prefix) if _exists(groups_url(prefix)) else None)
        return cls(tables, read_comm_groups(groups_file) if groups_file else {}, prefix.rstrip("/").rsplit("/", 1)[-1])

    def write(self, out_dir: str, name: str | None = None, skip: Collection[int] = ()) -> list[str]:
        """``out_dir/<name>.<rank>.et`` per rank (schema 0.0.4) and ``<name>.comm_groups.json`` when
        there are groups; out_dir is any fsspec URL, created if missing. Returns the URLs written
        (with those of the ranks in `skip`, whose files the caller writes). An earlier job of this
        name is replaced whole (its extra ranks removed) or, when writing fails, left as it was;
        inside a caller's `together()` block, when that block ends."""
        from chakra_core.format.etfile import ETWriter
        from chakra_core.format.schema import et_def_pb2 as pb

        name = name or self.name
        if not self.tables:
            raise ValueError("a job needs at least one rank's table (no tables given)")
        if not name or "/" in name:
            raise ValueError(f"job name {name!r} must be a non-empty file name prefix")
        text = comm_groups_text(self.comm_groups) if self.comm_groups else None  # checked before any write
        fs, root = fsspec.core.url_to_fs(out_dir)
        fs.makedirs(root, exist_ok=True)
        prefix = f"{out_dir.rstrip('/')}/{name}"
        metadata = pb.GlobalMetadata(version=SCHEMA_VERSION)
        encoded: dict[int, bytes] = {}
        written = []
        with together():
            for rank, table in enumerate(self.tables):
                url = rank_url(prefix, rank)
                written.append(url)
                if rank in skip:
                    continue
                if id(table) not in encoded:  # a table shared by several ranks: encoded once
                    buffer = io.BytesIO()
                    with ETWriter(url, metadata, into=buffer) as writer:
                        writer.write_table(table)
                    encoded[id(table)] = buffer.getvalue()
                with open_output(url, "wb") as f:
                    f.write(encoded[id(table)])
            if text is not None:
                with open_output(groups_url(prefix), "w") as f:
                    f.write(text)
                written.append(groups_url(prefix))
            afterwards(lambda: remove_other_ranks(prefix, range(len(self.tables))))
        return written


def _exists(url: str) -> bool:
    fs, path = fsspec.core.url_to_fs(url)
    return fs.exists(path)


def _existing_rank_file(prefix: str, rank: int) -> str:
    url = rank_url(prefix, rank)
    return url if _exists(url) or not _exists(url + ".gz") else url + ".gz"
