"""A job already in Chakra's format: its `<name>.<R>.et[.gz]` copied as `<prefix>.<R>.et`, byte for
byte (gunzipped), each decoded and validated, and its `<name>.comm_groups.json`, checked, as
`<prefix>.comm_groups.json` (docs/pipeline.md: a drop's generated jobs)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable

import fsspec
import pyarrow as pa

from chakra_core.analysis.validate import validate_table
from chakra_core.convert.common.result import JobResult, published, rank_reports
from chakra_core.convert.common.source_file import JobInputError, SourceOptions
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.format.job import (
    COMM_GROUPS_SUFFIX,
    Job,
    groups_url,
    rank_url,
    read_comm_groups,
    split_rank_url,
    write_comm_groups,
)
from chakra_core.inputs import open_input
from chakra_core.outputs import open_output

COPY_CHUNK = 1 << 20


class CopiedTraceError(ValueError):
    """A copied rank that does not decode or validate, named by its original file."""


def copy_chakra(src: str, out_dir: str, prefix: str, options: SourceOptions,
                progress: Callable[[str, int, int], None] | None, accounted: frozenset[str]) -> JobResult:
    """The registry's entry (convert/sources.py): the Chakra ETs of folder `src` (files named in
    `accounted` left alone), ranks 0..N-1 of one name, copied into out_dir as `prefix`."""
    fs, path = fsspec.core.url_to_fs(src)
    found = sorted((split_rank_url(name.rsplit("/", 1)[-1]), fs.unstrip_protocol(name)) for name in fs.ls(path, False)
                   if name.rsplit("/", 1)[-1] not in accounted and split_rank_url(name.rsplit("/", 1)[-1]))
    names = {name for (name, _), _ in found}
    if len(names) != 1 or [rank for (_, rank), _ in found] != list(range(len(found))):
        raise JobInputError(f"{src}: expected <name>.<R>.et[.gz] of one name for ranks 0..N-1, found "
                            f"{', '.join(url.rsplit('/', 1)[-1] for _, url in found[:4]) or 'none'}")
    name = names.pop()
    groups = f"{path}/{name}{COMM_GROUPS_SUFFIX}"
    groups = fs.unstrip_protocol(groups) if f"{name}{COMM_GROUPS_SUFFIX}" not in accounted and fs.exists(groups) \
        else None
    job_prefix = f"{out_dir}/{prefix}"
    result = JobResult(prefix, out_dir, list(range(len(found))), [], groups_url(job_prefix) if groups else None,
                       None, [], [], [], source={"format": "Chakra ETs", "folder": src, "name": name,
                                                 "time": "as the ETs hold it (copied byte for byte)", "notes": []})
    with tempfile.TemporaryDirectory(prefix="chakra-copy-") as workdir:
        # each input is read once, into a local copy that is checked before any output is replaced
        copies = []
        for rank, (_, url) in enumerate(found):
            copies.append(f"{workdir}/{rank}.et")
            with open_input(url) as source, open(copies[-1], "wb") as out:
                shutil.copyfileobj(source, out, COPY_CHUNK)
            result.tables.append(_validated(copies[-1], url))
            result.et_files.append(rank_url(job_prefix, rank))
            result.nodes += result.tables[-1].num_rows

        def write() -> None:
            for local, url in zip(copies, result.et_files):
                with open(local, "rb") as source, open_output(url, "wb", gzipped=False) as out:
                    shutil.copyfileobj(source, out, COPY_CHUNK)
            if groups:
                _copy_groups(groups, len(found), result.comm_group_file)

        result.reports = rank_reports(Job(result.tables, {}))
        return published(result, write)


def _copy_groups(source: str, npus: int, target: str) -> None:
    groups = read_comm_groups(source)  # a bad file raises, naming itself and the key
    outside = next(((gid, rank) for gid, members in groups.items() for rank in members if rank >= npus), None)
    if outside:
        raise JobInputError(f"{source}: group {outside[0]} names NPU {outside[1]}, but the job has {npus} ranks")
    write_comm_groups(groups, target)


def _validated(copy: str, original: str) -> pa.Table:
    """The copy's table, when it decodes without errors; problems name the original file."""
    try:
        table = read_table(copy)
    except ChakraError as exc:
        raise CopiedTraceError(str(exc).replace(copy, original)) from None
    errors = [x for x in validate_table(table, original) if x.severity == "error"]
    if errors:
        raise CopiedTraceError(f"{original}: {errors[0].message}")
    return table
