"""Figures about traces and the fleet: `chakra stats` per trace and job, `chakra query` over
the pipeline's warehouse."""

from __future__ import annotations

import sys

from chakra_core.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    human_bytes,
    per_file,
    print_json,
)
from chakra_core.terminal import console, plain_table

COMMANDS = {
    "stats": "statistics per trace (and per job for <prefix>.<rank>.et files)",
    "query": "SQL over the fleet pipeline's Parquet tables (DuckDB, any fsspec URL)",
}


def cmd_stats(args) -> int:
    import pyarrow as pa

    from chakra_core.analysis.stats import collective_rows, job_stats, trace_row
    from chakra_core.format.etfile import read_table
    from chakra_core.format.job import split_rank_url

    def statistics(url: str) -> tuple[dict, pa.Table]:
        table = read_table(url)
        return {"path": url, **trace_row(table)}, collective_rows(table)

    measured, failed = per_file(args.inputs, "stats", "statistics of traces", statistics)
    rows, by_job = [row for _, (row, _) in measured], {}
    for url, (row, collectives) in measured:
        _note_set_aside(row)
        if rank_file := split_rank_url(url):
            by_job.setdefault(rank_file[0], {})[rank_file[1]] = (row, collectives)
    status = EXIT_BAD_INPUT if failed else EXIT_OK
    jobs = [{"job": prefix, **job_stats({r: v[0] for r, v in ranks.items()}, {r: v[1] for r, v in ranks.items()})}
            for prefix, ranks in sorted(by_job.items()) if len(ranks) > 1]
    if args.json:
        print_json({"traces": rows, "jobs": jobs})
    elif args.csv:
        _print_csv(rows)
    else:
        _print_stats(rows, jobs)
    return status


def _print_csv(rows: list[dict]) -> None:
    import csv

    if rows:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _print_stats(rows: list[dict], jobs: list[dict]) -> None:
    out = console()
    table = plain_table("trace", "nodes", "compute (µs)", "collectives", "bytes", "msg p50/p99 (B)",
                        "critical path (µs)", "comm share", "depth", "width")
    for row in rows:
        table.add_row(row["path"], f"{row['nodes']:,}", f"{row['compute_micros']:,}",
                      f"{row['collective_nodes'] + row['p2p_nodes']:,}", human_bytes(row["collective_bytes"] + row["p2p_bytes"]),
                      f"{row['message_p50']:,} / {row['message_p99']:,}", f"{row['critical_path_micros']:,}",
                      f"{row['critical_path_comm_share']:.0%}", f"{row['depth']:,}", f"{row['width']:,}")
    out.print(table)
    for job in jobs:
        b, c = job["bytes_imbalance"], job["count_imbalance"]
        out.print(f"{job['job']}: {job['ranks']} ranks; communication bytes max/mean {b['max_over_mean']:.2f} "
                  f"(rank {b['max_rank']}), counts max/mean {c['max_over_mean']:.2f}; stragglers by compute: "
                  f"{job['stragglers'] or 'none'}")


def _note_set_aside(row: dict) -> None:
    """What the statistics of an imperfect trace left out, on stderr."""
    if row["cycle_edges_set_aside"]:
        print(f"{row['path']}: the dependency graph has cycles; {row['cycle_edges_set_aside']:,} edge(s) closing "
              "them were set aside for the critical path (chakra validate names the cycles)", file=sys.stderr)
    if row["missing_parents"]:
        print(f"{row['path']}: {row['missing_parents']:,} dependencies on node ids the trace does not hold "
              "were left out", file=sys.stderr)


def cmd_query(args) -> int:
    from chakra_core.analysis.warehouse import open_warehouse, run_query, table_counts

    con, files_by_table, warnings = open_warehouse(args.warehouse, args.unsafe_full_engine)
    for warning in warnings:
        print(f"chakra query: warning: {warning}", file=sys.stderr)
    if args.sql is None:
        rows, columns = table_counts(con, files_by_table), ["table", "days", "rows", "files"]
    else:
        result = run_query(con, args.sql, args.unsafe_full_engine)
        rows, columns = ([], []) if result is None else (result.to_pylist(), result.column_names)
    if args.json:
        print_json(rows, default=str)
    elif args.csv:
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows([row[c] for c in columns] for row in rows)
    else:
        table = plain_table(*columns)
        for row in rows:
            table.add_row(*("" if row[c] is None else f"{row[c]:,}" if isinstance(row[c], int) and not
                            isinstance(row[c], bool) else str(row[c]) for c in columns))
        out = console()
        out.print(table)
        out.print(f"{len(rows):,} row(s)")
    return EXIT_OK


def add_parsers(sub) -> None:
    p = sub.add_parser("stats", help=COMMANDS["stats"],
                       description="Per trace: node counts by type, compute time and operations by operator "
                       "class, communication counts and bytes by type and process group, message-size quantiles, "
                       "the critical path (length, share of compute and communication) and the graph's depth and "
                       "width. For several <prefix>.<rank>.et files of one job: communication imbalance across "
                       "ranks and straggler ranks. A readable table by default.")
    p.add_argument("inputs", nargs="+", metavar="IN.et")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON document {traces: [...], jobs: [...]}")
    form.add_argument("--csv", action="store_true", help="one CSV row per trace")
    p.set_defaults(run=cmd_stats)

    p = sub.add_parser("query", help=COMMANDS["query"],
                       description="Open the warehouse the nightly flow writes (a local folder, file:// or s3://) "
                       "in DuckDB with one view per table (ingest_log, rejects, traces, collectives, sim_results, "
                       "representatives, synthetic_traces, fidelity, sweep_results, ...), each with its date column "
                       "(and sweep for sweep_results), and run SQL over them. Without SQL, list the tables with "
                       "their days and rows. s3:// is read through s3fs (no DuckDB extension needed). The query "
                       "is one read-only statement (SELECT, WITH, FROM, SHOW, DESCRIBE, SUMMARIZE) and reads only "
                       "the warehouse's tables: no COPY TO, ATTACH, INSTALL, SET or files elsewhere, unless "
                       "--unsafe-full-engine. A file under tables/ that is not Parquet is left out with a warning.")
    p.add_argument("sql", nargs="?", metavar="SQL", help="the query (default: list the tables)")
    p.add_argument("--warehouse", default="out/warehouse", metavar="URL",
                   help="the warehouse folder or URL (default out/warehouse)")
    p.add_argument("--unsafe-full-engine", action="store_true",
                   help="run any SQL with all of DuckDB's powers: several statements, writes (COPY TO), any file "
                   "on the machine, ATTACH, INSTALL from the network; for a trusted user only")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the rows as a JSON list of objects")
    form.add_argument("--csv", action="store_true", help="the rows as CSV with a header")
    p.set_defaults(run=cmd_query)
