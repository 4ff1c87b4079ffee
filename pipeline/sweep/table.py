"""A sweep's results on storage: WAREHOUSE/tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet.

Rows have sim_results' columns (tables.SCHEMAS["sweep_results"]), then the sweep's own
(EXTRA: where the job came from, the key a re-run skips, options, cost, time taken), then one
column per parameter of the grid. Sweeps differ in their parameters, so each part carries its
sweep's schema and readers combine parts by column name (DuckDB's union_by_name). A run adds
numbered parts, named with its run id so that two runs of one sweep at once never write the
same name, and never rewrites one: each is written whole under a temporary name, then moved
into place, so an interrupted sweep keeps every part it finished. A re-run skips the points
that have a row and retries the `failed` ones: other rows (`ok`, `not simulated`: refused
for a reason that holds) are one per (job, point); a failed attempt stays as history beside
any later one.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.outputs import open_output
from pipeline.layout import filesystem, join, sweep_table_dir
from pipeline.sweep_point import SweepPoint, split_column
from pipeline.sweep.file import SweepError
from pipeline.tables import SCHEMAS

EXTRA = pa.schema([
    ("origin", pa.string()), ("job_sha256", pa.string()), ("point_key", pa.string()), ("mode", pa.string()),
    ("scaling", pa.string()), ("cost", pa.float64()), ("seconds", pa.float64()), ("run_id", pa.string()),
    # a point placing copies of the job together (sim/colocation.py): how, how many, and the copy slowed most
    ("placement", pa.string()), ("copies", pa.int32()), ("alone_finish_ns", pa.int64()), ("slowdown", pa.float64()),
])
# parameter columns of these keys have one type whatever a grid spells (50 or 50.0), so sweeps group alike
FIXED_TYPES = {"topology": pa.string(), "npus_count": pa.int64(), "bandwidth": pa.float64(), "latency": pa.float64()}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PART = re.compile(r"part-(\d+)(?:-[0-9a-f]+)?\.parquet$")  # part-<n>-<run>; part-<n> before run ids


def sweep_folder(warehouse: str, name: str, date: str | None = None) -> str:
    if not _NAME.match(name):
        raise SweepError(f"--name {name!r}: a sweep's name is letters, digits, '.', '_' and '-'")
    return sweep_table_dir(warehouse, name, date)


def schema(columns: list[str], points: list[SweepPoint]) -> pa.Schema:
    """The table's schema for a sweep with these parameter columns (their types from the points' values)."""
    params = []
    for column in columns:
        key = split_column(column)[0]
        values = [p.params[column] for p in points if column in p.params]
        params.append((column, FIXED_TYPES.get(key) or _inferred(values)))
    return pa.schema([*SCHEMAS["sweep_results"], *EXTRA, *params])


def _inferred(values: list) -> pa.DataType:
    try:
        kind = pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed kinds, e.g. 1 and "ring": text
        return pa.string()
    return pa.string() if kind == pa.null() else kind


def parts(folder: str) -> list[str]:
    """The sweep's part files, in part order."""
    fs, path = filesystem(folder)
    if not fs.exists(path):
        return []
    found = [p for p in fs.ls(path, detail=False) if _PART.search(p)]
    return sorted(found, key=lambda p: (int(_PART.search(p)[1]), p))


def done_keys(folder: str) -> set[tuple[str, str]]:
    """(job sha256, point key) of every row already in the sweep's parts but `failed` ones."""
    fs, _ = filesystem(folder)
    keys: set[tuple[str, str]] = set()
    for path in parts(folder):
        with fs.open(path, "rb") as f:
            part = pq.ParquetFile(f)
            if not {"job_sha256", "point_key", "status"} <= set(part.schema_arrow.names):
                continue  # written before sweeps had keys: nothing to skip by
            table = part.read(columns=["job_sha256", "point_key", "status"])
        keys.update(key for key, status in zip(zip(table.column("job_sha256").to_pylist(),
                                                    table.column("point_key").to_pylist()),
                                                table.column("status").to_pylist()) if status != "failed")
    return keys


class PartWriter:
    """Writes rows as the sweep's next numbered parts, tagged with the run's id."""

    def __init__(self, folder: str, table_schema: pa.Schema, run_id: str):
        self.folder, self.schema, self.run_id = folder, table_schema, run_id
        existing = parts(folder)
        self._next = int(_PART.search(existing[-1])[1]) + 1 if existing else 0

    def write(self, rows: list[dict]) -> str:
        url = join(self.folder, f"part-{self._next}-{self.run_id}.parquet")
        data = pa.Table.from_pylist(rows, schema=self.schema)
        with open_output(url, "wb", gzipped=False) as f:  # a temporary beside it, moved into place when whole
            pq.write_table(data, f, compression="zstd")
        self._next += 1
        return url
