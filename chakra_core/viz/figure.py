"""What every figure of chakra_core.viz shares: reading a table (a pyarrow Table, a Parquet file
or a folder of hive-partitioned Parquet at any fsspec URL), checking its columns, a headless
matplotlib figure (no pyplot, no global state) and an atomic save as PNG or SVG."""

from __future__ import annotations

import os
from typing import Any, Iterable

import pyarrow as pa

from chakra_core.outputs import open_output
from chakra_core.terminal import human_bytes

FORMATS = (".png", ".svg")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")


def load_table(table: Any, name: str = "table") -> pa.Table:
    """A pyarrow Table from a Table/RecordBatch, a Parquet file, a table of the warehouse
    (WAREHOUSE/tables/<table>: its current snapshot) or a folder of hive-partitioned Parquet."""
    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([table])
    if not isinstance(table, (str, os.PathLike)):
        raise ValueError(f"{name}: expected a pyarrow Table or a path/URL of Parquet, got {type(table).__name__}")
    import fsspec
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, LocalFileSystem, PyFileSystem

    url = os.fspath(table)
    fs, path = fsspec.core.url_to_fs(url)
    is_local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    arrow_fs = LocalFileSystem() if is_local else PyFileSystem(FSSpecHandler(fs))
    if any(c in path for c in "*?["):
        files = sorted(fs.glob(path))
        if not files:
            raise ValueError(f"{name}: no files match {url}")
        source: Any = files
    elif fs.isdir(path):
        from chakra_core.warehouse.snapshots import iceberg_folder_rows

        committed = iceberg_folder_rows(url)
        if committed is not None:  # a table of the warehouse: its current snapshot, not every file below
            return committed
        source = path
    elif fs.exists(path):
        source = path
    else:
        raise ValueError(f"{name}: {url} does not exist")
    try:
        dataset = ds.dataset(source, filesystem=arrow_fs, format="parquet", partitioning="hive")
        schemas = {f.physical_schema for f in dataset.get_fragments()}
        if len(schemas) > 1:  # e.g. parts of sweeps with different parameter columns: every column, by name
            unified = pa.unify_schemas([dataset.schema, *schemas], promote_options="permissive")
            dataset = ds.dataset(source, schema=unified, filesystem=arrow_fs, format="parquet", partitioning="hive")
        return dataset.to_table()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{name}: cannot read Parquet from {url}: {exc}") from exc


def require(table: pa.Table, columns: Iterable[str], name: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(f"{name}: missing column(s) {', '.join(missing)} (has: {', '.join(table.column_names) or 'none'})")
    if table.num_rows == 0:
        raise ValueError(f"{name}: the table is empty")


def figure(nrows: int = 1, ncols: int = 1, size=(8, 5), layout: str | None = "constrained", **kw):
    """A figure and its axes; layout None leaves the margins to the caller (constrained layout
    measures every label, which costs most of a small figure's drawing time)."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=size, layout=layout)
    axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


def check_out(out: str | os.PathLike) -> str:
    out = os.fspath(out)
    ext = os.path.splitext(out)[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"{out}: the output must end in .png or .svg")
    return out


def save(fig, out: str) -> str:

    ext = os.path.splitext(out)[1].lower()
    with open_output(out, "wb", gzipped=False) as f:
        fig.savefig(f, format=ext[1:], dpi=120)
    return out


def fmt_bytes(value: float, _pos=None) -> str:
    """A size as an axis tick or legend shows it (matplotlib's FuncFormatter passes the position)."""
    return human_bytes(value, compact=True)
