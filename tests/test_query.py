"""`chakra query`: DuckDB views over a warehouse, local and on S3 (moto), in every output form."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chakra_core.cli import main
from pipeline.sweep.table import PartWriter, sweep_folder
from pipeline.tables import SCHEMAS, from_rows, write_day


def _sim_row(job: str, topology: str, npus: int, finish: int) -> dict:
    return {"job_id": job, "system": f"{topology} {npus}", "topology": topology, "npus": npus, "traced_npus": npus,
            "status": "ok", "finish_ns": finish, "max_exposed_comm_ns": finish // 2}


def _fill(warehouse: str) -> None:
    write_day(warehouse, "sim_results", "2026-01-01", from_rows("sim_results", [
        _sim_row("a", "Ring", 8, 1_000), _sim_row("b", "Switch", 8, 3_000)]))
    write_day(warehouse, "sim_results", "2026-01-02", from_rows("sim_results", [_sim_row("a", "Ring", 8, 2_000)]))
    write_day(warehouse, "rejects", "2026-01-02", from_rows("rejects", [
        {"job_id": "x", "file": "x/rank0.et.json.gz", "bytes": 9, "stage": "ingest", "reason": "r " * 200,
         "run_id": "0a1b2c"}]))
    PartWriter(sweep_folder(warehouse, "bw", "2026-01-02"), SCHEMAS["sweep_results"], "0a1b2c").write(
        [_sim_row("a", "Ring", 16, 5)])
    write_day(warehouse, "traces", "2026-01-02", from_rows("traces", []))  # an empty day: a table with no file


def _query(capsys, *argv) -> tuple[int, str, str]:
    code = main(["query", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_views_have_partition_columns_and_every_form(tmp_path, capsys):
    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json",
                          "SELECT date::VARCHAR d, job_id, finish_ns FROM sim_results ORDER BY d, job_id")
    assert code == 0 and json.loads(out) == [{"d": "2026-01-01", "job_id": "a", "finish_ns": 1000},
                                             {"d": "2026-01-01", "job_id": "b", "finish_ns": 3000},
                                             {"d": "2026-01-02", "job_id": "a", "finish_ns": 2000}]
    code, out, _ = _query(capsys, "--warehouse", f"file://{warehouse}", "--csv",
                          "SELECT sweep, npus FROM sweep_results")
    assert code == 0 and out.splitlines() == ["sweep,npus", "bw,16"]
    code, out, _ = _query(capsys, "--warehouse", warehouse)  # no SQL: the tables, days and rows
    listed = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:-1]}
    assert listed == {"rejects": ["1", "1", "1"], "sim_results": ["2", "3", "2"], "sweep_results": ["1", "1", "1"],
                      "traces": ["0", "0", "0"]}
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json", "SELECT count(*) n FROM traces")
    assert code == 0 and json.loads(out) == [{"n": 0}]  # with every column, none of it stored


def test_piped_output_keeps_every_value_whole(tmp_path):
    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "query", "--warehouse", warehouse,
                          "SELECT reason, file FROM rejects"], capture_output=True, text=True, check=True)
    row = run.stdout.splitlines()[1]
    assert ("r " * 200).strip() in row and row.rstrip().endswith("x/rank0.et.json.gz")


def test_bad_sql_and_a_folder_that_is_no_warehouse_are_one_line_exit_2(tmp_path, capsys):
    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    code, _, err = _query(capsys, "--warehouse", warehouse, "SELEC 1")
    assert code == 2 and err.count("\n") == 1 and err.startswith("chakra query: ") and "SELEC" in err
    code, _, err = _query(capsys, "--warehouse", str(tmp_path / "nothing"))
    assert code == 2 and "no tables/ folder" in err and "nothing" in err


@pytest.mark.usefixtures("s3")
def test_s3_warehouse_reads_through_fsspec(s3, capsys):
    s3.mkdir("query-wh")
    _fill("s3://query-wh/warehouse")
    code, out, _ = _query(capsys, "--warehouse", "s3://query-wh/warehouse", "--json",
                          "SELECT topology, count(*) n, max(finish_ns) worst FROM sim_results GROUP BY ALL ORDER BY 1")
    assert code == 0, _
    assert json.loads(out) == [{"topology": "Ring", "n": 2, "worst": 2000},
                                             {"topology": "Switch", "n": 1, "worst": 3000}]


ESCAPES = {  # SQL that would reach past the warehouse, and what the confined query says
    "COPY (SELECT 1) TO '{out}/x.csv'": "COPY is not a query",
    "COPY sim_results TO '{wh}/tables/sim_results/date=2026-01-01/part-0.parquet'": "COPY is not a query",
    "SELECT * FROM read_csv('{secret}')": "file system operations are disabled",
    "SELECT * FROM read_text('{secret}')": "file system operations are disabled",
    "SELECT * FROM glob('{out}/*')": "file system operations are disabled",
    "ATTACH '{out}/new.db'": "ATTACH is not a query",
    "INSTALL httpfs": "LOAD is not a query",
    "LOAD httpfs": "LOAD is not a query",
    "SET enable_external_access = true": "SET is not a query",
    "SELECT 1; COPY (SELECT 1) TO '{out}/y.csv'": "2 statements",
    "CREATE TABLE t AS SELECT 1": "CREATE is not a query",
    "PRAGMA version": "PRAGMA is not a query",
}


@pytest.mark.parametrize("sql", list(ESCAPES))
def test_a_query_stays_read_only_inside_its_warehouse(tmp_path, capsys, sql):
    warehouse, out, secret = tmp_path / "wh", tmp_path / "out", tmp_path / "secret.csv"
    out.mkdir()
    secret.write_text("key\nTOP-SECRET\n")
    _fill(str(warehouse))
    before = {p: p.read_bytes() for p in warehouse.rglob("*") if p.is_file()}
    code, stdout, err = _query(capsys, "--warehouse", str(warehouse),
                               sql.format(out=out, wh=warehouse, secret=secret))
    assert code == 2 and err.count("\n") == 1 and ESCAPES[sql] in err, err
    assert "TOP-SECRET" not in stdout + err and not list(out.iterdir())
    assert {p: p.read_bytes() for p in warehouse.rglob("*") if p.is_file()} == before


def test_the_full_engine_is_an_explicit_opt_out(tmp_path, capsys):
    warehouse, out = tmp_path / "wh", tmp_path / "out.csv"
    _fill(str(warehouse))
    code, _, err = _query(capsys, "--warehouse", str(warehouse), "--unsafe-full-engine",
                          f"COPY (SELECT job_id FROM sim_results ORDER BY 1 LIMIT 1) TO '{out}'")
    assert code == 0 and out.read_text().splitlines() == ["job_id", "a"], err


def test_a_file_that_is_not_parquet_is_left_out_with_a_warning(tmp_path, capsys):
    warehouse = tmp_path / "wh"
    _fill(str(warehouse))
    damaged = []
    for day in ("2026-01-03", "2026-01-04"):  # two more committed days, their files then damaged
        write_day(str(warehouse), "sim_results", day, from_rows("sim_results", [_sim_row("c", "Ring", 8, 7)]))
        damaged += (warehouse / "tables" / "sim_results" / "data" / f"date={day}").glob("*.parquet")
    damaged[0].write_text("not parquet")
    damaged[1].unlink()
    os.mkfifo(damaged[1])
    code, out, err = _query(capsys, "--warehouse", str(warehouse), "--json", "SELECT count(*) n FROM sim_results")
    assert code == 0 and json.loads(out) == [{"n": 3}]
    assert f"{damaged[0].name}: not a Parquet file" in err and f"{damaged[1].name}: is a FIFO" in err


def test_snapshots_re_runs_as_of_and_columns_added_later(tmp_path, capsys):
    """A re-run replaces its day and nothing else; the earlier state reads with --as-of (a time or
    the night's run id); a column the table gains later reads as null on older days."""
    import datetime as dt
    import time

    import pyarrow as pa

    from chakra_core.warehouse import catalog, commit, parts, snapshots

    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    time.sleep(0.01)
    before = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    time.sleep(0.01)
    write_day(warehouse, "sim_results", "2026-01-01", from_rows("sim_results", [_sim_row("z", "Ring", 8, 9)]))
    count = "SELECT date::VARCHAR d, count(*) n FROM sim_results GROUP BY d ORDER BY d"
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json", count)
    assert json.loads(out) == [{"d": "2026-01-01", "n": 1}, {"d": "2026-01-02", "n": 1}]
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json", "--as-of", before, count)
    assert json.loads(out) == [{"d": "2026-01-01", "n": 2}, {"d": "2026-01-02", "n": 1}]
    code, _, err = _query(capsys, "--warehouse", warehouse, "--as-of", "abcdef123456", count)
    assert code == 2 and err.count("\n") == 1 and "no night with that run id" in err
    # a column declared later: the table evolves, the older days read it as null
    wider = SCHEMAS["rejects"].append(pa.field("severity", pa.int32()))
    url = parts.write_part(warehouse, "rejects", "2026-01-05", "r1", pa.table({
        **{name: [None] for name in wider.names}, "job_id": ["y"], "file": ["y/f"], "bytes": [1], "stage": ["s"],
        "reason": ["r"], "run_id": ["aaaaaa"], "severity": [3]}), wider)
    commit.commit_day(warehouse, "2026-01-05", {"rejects": [url]}, {"rejects": wider}, "bbbbbbbbbbbb")
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json",
                          "SELECT job_id, severity FROM rejects ORDER BY job_id")
    assert json.loads(out) == [{"job_id": "x", "severity": None}, {"job_id": "y", "severity": 3}]
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json", "--as-of", "bbbbbbbbbbbb",
                          "SELECT count(*) n FROM rejects")
    assert json.loads(out) == [{"n": 2}]
    # the metadata alone (pyiceberg, no code of this project's) says the same
    from pyiceberg.table import StaticTable

    iceberg = catalog.load(catalog.open_catalog(warehouse), "sim_results")
    assert StaticTable.from_metadata(iceberg.metadata_location).scan().to_arrow().num_rows == 2
    assert snapshots.read_day(warehouse, "sim_results", "2026-01-01").column("job_id").to_pylist() == ["z"]


@pytest.mark.usefixtures("s3")
def test_an_s3_warehouse_is_confined_too(s3, tmp_path, capsys):
    s3.mkdir("confined-wh")
    s3.pipe_file("confined-wh/secret.csv", b"key\nTOP-SECRET\n")
    _fill("s3://confined-wh/warehouse")
    (tmp_path / "local.csv").write_text("key\nLOCAL-SECRET\n")
    for target in ("s3://confined-wh/secret.csv", str(tmp_path / "local.csv")):
        code, out, err = _query(capsys, "--warehouse", "s3://confined-wh/warehouse",
                                f"SELECT * FROM read_csv('{target}')")
        assert code == 2 and "SECRET" not in out + err and err.count("\n") == 1, err


def test_a_value_bigger_than_the_memory_limit_is_one_line_within_the_bound(tmp_path):
    """Issue 47: `SELECT length(repeat('x', 4000000000))` peaked at 7.9 GB with the default 2 GB
    --memory-limit (which bounds DuckDB's buffers, not a value a query builds)."""
    import resource

    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "query", "--warehouse", warehouse,
                          "SELECT length(repeat('x', 4000000000))"], capture_output=True, text=True, timeout=120)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "Out of Memory Error" in run.stderr and "--memory-limit raises the limit" in run.stderr
    assert peak_mib < 2048 + 1024
