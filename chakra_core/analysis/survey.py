"""Survey a folder of traces: decode, validate and summarise every .et file into Parquet tables.

Output folder:
    traces.parquet     one row per file: path, nodes, node counts by type, collective
                       counts and bytes, error and warning counts (or the read error)
    findings.parquet   one row per validation finding
    nodes/<name>.parquet   the node table of every readable file

A file that cannot be read becomes a row with its error and an "unreadable" finding; the
survey goes on with the rest.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.analysis.info import summarize_table
from chakra_core.analysis.validate import unreadable_finding, validate_table
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.outputs import open_output

ET_SUFFIXES = (".et", ".et.gz")

TRACES_SCHEMA = pa.schema([
    ("path", pa.string()),
    ("readable", pa.bool_()),
    ("error", pa.string()),
    ("nodes", pa.int64()),
    ("dependencies", pa.int64()),
    ("node_types", pa.map_(pa.string(), pa.int64())),
    ("collective_count", pa.int64()),
    ("collective_bytes", pa.int64()),
    ("collectives_json", pa.string()),
    ("metadata_version", pa.string()),
    ("errors", pa.int64()),
    ("warnings", pa.int64()),
])
FINDINGS_SCHEMA = pa.schema([
    ("path", pa.string()),
    ("severity", pa.string()),
    ("code", pa.string()),
    ("node_ids", pa.list_(pa.uint64())),
    ("message", pa.string()),
])


def find_traces(roots: Iterable[str]) -> list[tuple[str, str]]:
    """(root, url) of every .et / .et.gz file under the given folders, and each root that is not a
    folder (a file, a FIFO, a missing path: its row then says why it cannot be read), sorted."""
    found: list[tuple[str, str]] = []
    for root in roots:
        fs, path = fsspec.core.url_to_fs(root)
        protocol = root.split("://", 1)[0] + "://" if "://" in root else ""
        if not fs.isdir(path):
            found.append((root, root))
            continue
        for name in sorted(fs.find(path)):
            if name.endswith(ET_SUFFIXES):
                found.append((root, protocol + name if protocol else name))
    return found


def _trace_row(url: str, summary: dict | None, error: str | None, findings) -> dict:
    errors = sum(f.severity == "error" for f in findings)
    row = {"path": url, "errors": errors, "warnings": len(findings) - errors, "readable": summary is not None,
           "error": error}
    if summary is None:
        return row
    colls = summary["collectives"]
    return {
        **row,
        "nodes": summary["nodes"],
        "dependencies": summary["dependencies"],
        "node_types": list(summary["node_types"].items()),
        "collective_count": sum(c["count"] for c in colls.values()),
        "collective_bytes": sum(c["bytes"] for c in colls.values()),
        "collectives_json": json.dumps(colls),
        "metadata_version": summary["metadata"]["version"],
    }


def _node_table_name(root: str, url: str, used: set[str]) -> str:
    """<root folder name>__<path under root with / as __>.parquet, unique within one survey."""
    root_path = fsspec.core.url_to_fs(root)[1].rstrip("/")
    url_path = fsspec.core.url_to_fs(url)[1]
    relative = url_path[len(root_path):].lstrip("/") if url_path != root_path else ""
    name = "__".join(p for p in [PurePosixPath(root_path).name, *relative.split("/")] if p)
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}__{n}"
    used.add(candidate)
    return candidate + ".parquet"


def _write_parquet(table: pa.Table, path: Path) -> None:
    with open_output(str(path), "wb", gzipped=False) as f:
        pq.write_table(table, f)


def survey(roots: Iterable[str], out_dir: str, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Surveys every trace under roots into out_dir; returns counts and the output paths.

    progress(done, total, url) is called before each file.
    """
    traces = find_traces(roots)
    out = Path(out_dir)
    shutil.rmtree(out / "nodes", ignore_errors=True)  # a re-run replaces the previous survey
    (out / "nodes").mkdir(parents=True)
    trace_rows, finding_rows, used = [], [], set()
    for done, (root, url) in enumerate(traces):
        if progress:
            progress(done, len(traces), url)
        try:
            table = read_table(url)
        except ChakraError as exc:
            findings = [unreadable_finding(url, exc)]
            trace_rows.append(_trace_row(url, None, str(exc), findings))
        else:
            findings = validate_table(table, url)
            trace_rows.append(_trace_row(url, summarize_table(table, url), None, findings))
            _write_parquet(table, out / "nodes" / _node_table_name(root, url, used))
        finding_rows += [
            {"path": f.path, "severity": f.severity, "code": f.code, "node_ids": list(f.node_ids), "message": f.message}
            for f in findings
        ]
    _write_parquet(pa.Table.from_pylist(trace_rows, schema=TRACES_SCHEMA), out / "traces.parquet")
    _write_parquet(pa.Table.from_pylist(finding_rows, schema=FINDINGS_SCHEMA), out / "findings.parquet")
    return {
        "files": len(traces),
        "unreadable": sum(not r["readable"] for r in trace_rows),
        "nodes": sum(r.get("nodes") or 0 for r in trace_rows),
        "errors": sum(r["errors"] for r in trace_rows),
        "warnings": sum(r["warnings"] for r in trace_rows),
        "traces_table": str(out / "traces.parquet"),
        "findings_table": str(out / "findings.parquet"),
        "node_tables": str(out / "nodes"),
    }
