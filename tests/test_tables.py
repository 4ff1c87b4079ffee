"""The nightly tables' declarations (chakra_core/table_schema.py, gathered by pipeline/tables.py):
rows are checked on the way in, and each producer's rows have exactly its table's columns, so a
column added to a producer and not to its declaration (or the other way round) fails here."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from datapaths import GLOO, GPU_H200, REPO

from chakra_core.analysis.history import figures
from chakra_core.analysis.select import merged_rank_rows
from chakra_core.table_schema import TableRowError, TableSchema, column
from pipeline import tables
from pipeline.nightly import history
from pipeline.nightly.drop import list_day
from pipeline.nightly.jobs import process_job
from pipeline.nightly.represent import representatives_table
from pipeline.simulation import load_sweep, reference_point, simulate_row

DATE = "2026-11-26"
TOY = TableSchema("toy", (column("job_id", pa.string()), column("ns", pa.int64()),
                          column("note", pa.string(), nullable=True)))


def test_a_key_the_table_lacks_is_an_error():
    with pytest.raises(TableRowError, match=r"^toy: row 1: nanos: not a column of the table$"):
        TOY.from_rows([{"job_id": "a", "ns": 1}, {"job_id": "b", "ns": 2, "nanos": 2}])


def test_a_required_column_left_out_or_null_is_an_error():
    with pytest.raises(TableRowError, match=r"^toy: row 0: missing ns$"):
        TOY.from_rows([{"job_id": "a", "note": "x"}])
    with pytest.raises(TableRowError, match=r"^toy: row 1: ns: null in a column declared not nullable$"):
        TOY.from_rows([{"job_id": "a", "ns": 1}, {"job_id": "b", "ns": None}])


def test_a_nullable_column_may_be_left_out_and_files_store_every_column_nullable():
    table = TOY.from_rows([{"job_id": "a", "ns": 1}, {"job_id": "b", "ns": 2, "note": None}])
    assert table.column("note").to_pylist() == [None, None]
    assert all(f.nullable for f in table.schema) and TOY.required == ("job_id", "ns")


def test_a_table_made_column_wise_is_checked_and_put_in_order():
    made = pa.table({"ns": [1], "job_id": ["a"], "note": ["x"]})
    assert TOY.from_table(made).column_names == ["job_id", "ns", "note"]
    with pytest.raises(TableRowError, match=r"^toy: extra: not a column of the table$"):
        TOY.from_table(made.append_column("extra", pa.array([1])))
    with pytest.raises(TableRowError, match=r"^toy: missing ns$"):
        TOY.from_table(made.drop_columns(["ns"]))


def test_every_declared_column_is_documented():
    """docs/pipeline.md's row of each table names each of its columns."""
    text = (REPO / "docs" / "pipeline.md").read_text()
    for name, table in tables.TABLES.items():
        row = re.search(rf"^\| `{name}` \|.*$", text, re.M)
        assert row, f"{name}: no row in docs/pipeline.md"
        undocumented = [c for c in table.names if f"`{c}`" not in row[0]]
        assert not undocumented, f"{name}: {undocumented} not in docs/pipeline.md"


# ------------------------------------------------------------------ the producers, on a real day


@pytest.fixture(scope="module")
def day(tmp_path_factory) -> tuple[str, dict]:
    """A day of a GPU job (device rows), a gloo job (collectives), a broken job and a loose file,
    each job processed as the nightly does (without Ray)."""
    root = tmp_path_factory.mktemp("tables")
    folder = root / "drop" / DATE
    shutil.copytree(GPU_H200 / "mlp_tiny", folder / "gpu")
    shutil.copytree(GLOO / "collectives-w2", folder / "coll")
    (folder / "broken").mkdir()
    data = (GLOO / "collectives-w2" / "rank0.et.json.gz").read_bytes()
    (folder / "broken" / "rank0.et.json.gz").write_bytes(data[: len(data) // 2])
    (folder / "stray.bin").write_bytes(b"\x00")
    listed, loose = list_day((root / "drop").as_uri(), DATE)
    warehouse = (root / "warehouse").as_uri()
    return warehouse, {"outcomes": [process_job(job, DATE, warehouse, "run") for job in listed], "loose": loose}


def _exact(table: str, rows: list[dict]) -> None:
    """The rows give every column of the table (none left to a default null) and pass its check."""
    assert rows, f"{table}: the producer made no rows to check"
    names = set(tables.TABLES[table].names)
    assert all(set(row) == names for row in rows), f"{table}: {set(rows[0]) ^ names}"
    tables.from_rows(table, rows)


def test_each_jobs_rows_have_their_tables_columns(day):
    _, found = day
    outcomes = found["outcomes"]
    for table in ("ingest_log", "rejects", "traces", "device_time", "device_verdicts", "kernels"):
        _exact(table, [row for o in outcomes for row in getattr(o, "ingest" if table == "ingest_log" else table)])
    collectives = [o.collectives for o in outcomes if o.collectives is not None]
    assert collectives and all(c.schema.equals(tables.SCHEMAS["collectives"]) for c in collectives)


def test_simulations_history_and_representatives_have_their_tables_columns(day):
    warehouse, found = day
    converted = [o for o in found["outcomes"] if o.prefix]
    reference = reference_point(load_sweep())
    sims = [simulate_row(o.job_id, o.prefix, o.ranks, o.comm_groups, reference) for o in converted]
    _exact("sim_results", sims)
    job_figures = {o.job_id: figures(o.traces, o.collectives, o.device_time, o.device_verdicts, None)
                   for o in converted}
    today = history.history_rows(job_figures, {o.job_id: o.fingerprint for o in converted},
                                 {r["job_id"]: r for r in sims}, "run")
    _exact("job_history", today)
    earlier = {row["job_id"]: [("2026-11-25", "another program", {})] for row in today}
    earlier[converted[0].job_id] = [("2026-11-25", converted[0].fingerprint,
                                     {row["metric"]: row["value"] * 2 for row in today
                                      if row["job_id"] == converted[0].job_id})]
    flagged = history.regression_rows(today, earlier, "run")
    assert {r["kind"] for r in flagged} >= {"changed", "improvement"}
    tables.from_rows("regressions", flagged)
    impact = {"step_impact", "step_impact_ns", "impact_basis", "impact_note"}  # the next stage's (nightly/impact.py)
    assert set(flagged[-1]) | impact == set(tables.TABLES["regressions"].names)
    chosen = representatives_table({o.job_id: (o.ranks, merged_rank_rows(o.traces)) for o in converted}, sims, 2,
                                   "run")
    assert chosen.schema.equals(tables.SCHEMAS["representatives"]) and chosen.num_rows == len(converted)
