"""The warehouse as Iceberg tables: a warehouse of the old layout (one Parquet object per table
and day, as main wrote it before the change) migrated without losing a row; a night's files
compacted (chakra_core/warehouse/)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.cli import main
from chakra_core.warehouse import commit, parts, snapshots
from pipeline import tables
from pipeline.sweep.table import PartWriter, sweep_folder
from table_rows import complete


def _old_part(warehouse, table: str, date: str, data: pa.Table) -> None:
    """A table's day as the nightly wrote it before the Iceberg tables."""
    folder = warehouse / "tables" / table / f"date={date}"
    folder.mkdir(parents=True)
    pq.write_table(data, folder / "part-0.parquet", compression="zstd")


def _history(job: str, value: float) -> dict:
    return complete("job_history", {"job_id": job, "fingerprint": "f", "metric": "step_ns", "value": value,
                                    "unit": "ns", "run_id": "old"})


def test_an_old_warehouse_migrates_without_losing_a_row(tmp_path, capsys):
    warehouse = tmp_path / "wh"
    for day, n in (("2026-11-01", 3), ("2026-11-02", 2)):
        _old_part(warehouse, "job_history", day, tables.from_rows("job_history", [_history(f"j{i}", i) for i in
                                                                                   range(n)]))
    # a day written before `fingerprint` existed, and an empty day
    _old_part(warehouse, "job_history", "2026-10-31",
              tables.from_rows("job_history", [_history("old", 1.0)]).drop_columns(["fingerprint"]))
    _old_part(warehouse, "rejects", "2026-11-02", tables.empty("rejects"))
    damaged = warehouse / "tables" / "traces" / "date=2026-11-02"
    damaged.mkdir(parents=True)
    (damaged / "part-0.parquet").write_bytes(b"PAR1 garbage between the marks PAR1")
    PartWriter(sweep_folder(str(warehouse), "bw", "2026-11-02"), tables.SCHEMAS["sweep_results"], "0a1b2c").write(
        [complete("sim_results", {"job_id": "a", "system": "s", "status": "ok"})])

    assert main(["migrate", "--warehouse", str(warehouse)]) == 2  # the damaged part is named and left
    out = capsys.readouterr().out
    assert "job_history: 3 day(s), 6 row(s) migrated and counted back" in out
    assert "traces/date=2026-11-02/part-0.parquet: cannot be read" in out
    assert not (warehouse / "tables" / "job_history" / "date=2026-11-01").exists()
    assert (damaged / "part-0.parquet").exists()
    assert [d.name for d in (warehouse / "tables" / "sweep_results").iterdir()] == ["sweep=bw"]
    assert main(["query", "--warehouse", str(warehouse), "--json",
                 "SELECT date::VARCHAR d, count(*) n, count(fingerprint) fp FROM job_history GROUP BY d ORDER BY d"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"d": "2026-10-31", "n": 1, "fp": 0},
                                                   {"d": "2026-11-01", "n": 3, "fp": 3},
                                                   {"d": "2026-11-02", "n": 2, "fp": 2}]
    # the night's history read takes the migrated days, the one without fingerprints included
    from pipeline.nightly.history import read_history

    history = read_history(warehouse.as_uri(), "2026-11-03")
    assert [day for day, _, _ in history["j0"]] == ["2026-11-01", "2026-11-02"] and history["old"][0][1] is None
    assert main(["migrate", "--warehouse", str(warehouse)]) == 2  # once more: only the damaged part is left
    assert "job_history" not in capsys.readouterr().out


def test_a_nights_files_compact_into_few_and_the_rewrite_sees_them_all(tmp_path):
    warehouse = (tmp_path / "wh").as_uri()
    rows = [complete("ingest_log", {"job_id": f"j{i % 3}", "file": f"f{i}", "sha256": str(i % 2), "run_id": "r"})
            for i in range(6)]
    files = [tables.write_rows(warehouse, "ingest_log", "2026-11-02", f"r-{i}", [row])[0] for i, row in
             enumerate(rows)]
    small = commit.compact(warehouse, "ingest_log", "2026-11-02", files, "r", target_bytes=1 << 30)
    assert len(small) == 1
    many = commit.compact(warehouse, "ingest_log", "2026-11-02", files, "r", target_bytes=1)
    assert len(many) == len(files)  # each batch over the target closes its file
    marked = commit.compact(warehouse, "ingest_log", "2026-11-02", files, "r", rewrite=tables.mark_duplicates)
    table = snapshots.read_files([snapshots.DataFile(marked[0], "2026-11-02")],
                                 parts.with_day(tables.empty("ingest_log"), tables.SCHEMAS["ingest_log"],
                                                "2026-11-02").schema)
    # sorted by job and file: j0/f0 is the first of sha 0, j0/f3 the first of sha 1
    assert [(r["file"], r["duplicate_of"]) for r in table.to_pylist()] == [
        ("f0", None), ("f3", None), ("f1", "f3"), ("f4", "f0"), ("f2", "f0"), ("f5", "f3")]


def test_chakra_diff_takes_null_figures_of_a_damaged_day_as_none(tmp_path, capsys):
    """Issue 47: `kernels.total_ns` null (and a job_history value null) crashed `chakra diff`."""
    warehouse = str(tmp_path / "wh")
    kernel = complete("kernels", {"job_id": "j", "name": "k", "family": "gemm", "count": 1, "total_ns": 7,
                                  "run_id": "r"})
    for day in ("2026-11-01", "2026-11-02"):
        tables.write_day(warehouse, "job_history", day, [_history("j", 5.0), {**_history("j", 1.0), "metric": "x"}])
        tables.write_day(warehouse, "kernels", day, [kernel])
    # then the second day's kernel file damaged in place: its total_ns null
    damaged = next((tmp_path / "wh" / "tables" / "kernels" / "data" / "date=2026-11-02").glob("*.parquet"))
    data = pq.read_table(damaged)
    i = data.schema.get_field_index("total_ns")
    pq.write_table(data.set_column(i, data.schema.field(i).with_nullable(True), pa.nulls(1, pa.int64())), damaged)
    assert main(["diff", "--warehouse", warehouse, "--job", "j", "--date", "2026-11-02", "--against", "2026-11-01",
                 "--json"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert [(k["ns_before"], k["ns_after"]) for k in kernels] == [(7, 0)]


def test_a_damaged_history_costs_its_files_only(tmp_path, capsys):
    """Issue 47: one corrupt job_history file (garbage between the Parquet marks) or a `value`
    column written as text killed every night for the next 28 days and every query and diff."""
    from pipeline.nightly.history import read_history

    warehouse = str(tmp_path / "wh")
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        tables.write_day(warehouse, "job_history", day, [_history("j", 5.0)])
    files = {f.parent.name: f for f in (tmp_path / "wh" / "tables" / "job_history" / "data").rglob("*.parquet")}
    garbage = files["date=2026-11-01"]
    garbage.write_bytes(b"PAR1" + b"\x00garbage" * 100 + b"PAR1")
    as_text = files["date=2026-11-02"]
    data = pq.read_table(as_text)
    i = data.schema.get_field_index("value")
    pq.write_table(data.set_column(i, "value", pa.array(["five"], pa.string())), as_text)
    warnings = []
    history = read_history(warehouse, "2026-11-04", warn=warnings.append)
    assert [day for day, _, _ in history["j"]] == ["2026-11-03"]
    assert len(warnings) == 2 and all("job_history: " in w and "cannot be read" in w for w in warnings)
    assert any(garbage.name in w for w in warnings) and any(as_text.name in w for w in warnings)
    assert main(["query", "--warehouse", warehouse, "--json", "SELECT count(*) n FROM job_history"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"n": 2}] and garbage.name in err  # the text value reads; the garbage is left out
    assert main(["diff", "--warehouse", warehouse, "--job", "j", "--date", "2026-11-03", "--against",
                 "2026-11-02"]) in (0, 2)
    assert capsys.readouterr().err.count("\n") <= 1


def test_nights_merge_their_manifests_and_old_snapshots_are_forgotten(tmp_path, monkeypatch):
    """A year of nights left 365 manifests per table that every reader's planning opened (the
    day page took 7-14 s); and each commit copies metadata that grows with every snapshot kept."""
    from chakra_core.warehouse import catalog

    warehouse = str(tmp_path / "wh")
    for day in range(1, 13):
        tables.write_day(warehouse, "nights", f"2026-11-{day:02d}", [complete("nights", {"run_id": "r"})])
    iceberg = catalog.load(catalog.open_catalog(warehouse), "nights")
    assert len(iceberg.current_snapshot().manifests(iceberg.io)) <= 8
    assert len(iceberg.snapshots()) > 2
    monkeypatch.setattr(commit, "SNAPSHOT_DAYS", 0)
    tables.write_day(warehouse, "nights", "2026-11-13", [complete("nights", {"run_id": "r"})])
    iceberg = catalog.load(catalog.open_catalog(warehouse), "nights")
    assert len(iceberg.snapshots()) == 1 and tables.read_day(warehouse, "nights", "2026-11-05").num_rows == 1
