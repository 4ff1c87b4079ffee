"""Figures about traces and the fleet: `chakra stats` per trace and job, `chakra query` over
the pipeline's warehouse."""

from __future__ import annotations

import sys

from chakra_core import limits
from chakra_core.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    memory_bytes,
    memory_size,
    per_file,
    print_json,
    seconds,
)
from chakra_core.cli.stragglers import straggler_line
from chakra_core.terminal import console, human_bytes, plain_table

COMMANDS = {
    "stats": "statistics per trace (and per job for <prefix>.<rank>.et files)",
    "query": "SQL over the fleet pipeline's Parquet tables (DuckDB, any fsspec URL)",
}


def cmd_stats(args) -> int:
    from chakra_core.analysis import step_work
    from chakra_core.analysis.facade import read_trace
    from chakra_core.analysis.predicted import PREDICTION_SYSTEM, prediction_system

    args.system = args.system or PREDICTION_SYSTEM
    system = prediction_system(args.system)[0]  # a bad system file is bad input before any trace is read
    tables, failed = per_file(_trace_urls(args.inputs), "stats", "statistics of traces",
                              lambda url: read_trace(url, system))
    by_url, jobs, notes = {}, [], []
    for prefix, analysis, urls in _analyses(dict(tables), args.system):
        gpu = analysis.gpu()
        if analysis.device_ranks and analysis.prediction_error:
            why = analysis.prediction_error if analysis.predict else "give every rank of the job"
            notes.append(f"chakra stats: {prefix}: no predicted device time: {why}")
        for row in analysis.trace_rows():
            rank = row.pop("rank")
            own = analysis.steps_of(rank)
            by_url[urls[rank]] = {"path": urls[rank], **row, "gpu": gpu.get(rank), "recorded_steps": own.to_pylist()}
            notes += [note for note in [step_work.note(urls[rank], own)] if note]
        if len(urls) > 1:
            cross = analysis.straggler_report
            jobs.append({"job": prefix, **analysis.summary_figures(), "critical_path_step_ns": cross["step_ns"],
                         "stragglers": cross["stragglers"]})
    rows = [by_url[url] for url, _ in tables]
    for row in rows:
        _note_set_aside(row)
    for note in notes:
        print(note, file=sys.stderr)
    status = EXIT_BAD_INPUT if failed else EXIT_OK
    if args.json:
        print_json({"traces": rows, "jobs": jobs})
    elif args.csv:
        _print_csv([{k: v for k, v in row.items() if k not in ("gpu", "recorded_steps")} for row in rows])
    elif rows:  # (when no trace could be read, its one line each is all there is to say)
        _print_stats(rows, jobs)
        _print_device(rows, jobs)
    return status


def _trace_urls(inputs: list[str]) -> list[str]:
    """The traces the arguments name, as `diff` and `simulate` take jobs: a file as it is, a job's
    prefix as its rank files <prefix>.<rank>.et, a folder as the rank files of every job in it.
    What is none of these stays as it is, for its one-line error."""
    import fsspec

    from chakra_core.errors import ChakraError
    from chakra_core.format.job import rank_files, split_rank_url

    urls = []
    for url in inputs:
        fs, path = fsspec.core.url_to_fs(url)
        if fs.isdir(path):  # its files named as the folder was given
            inside = [f"{url.rstrip('/')}/{p.rstrip('/').rsplit('/', 1)[-1]}" for p in fs.ls(path, detail=False)]
            urls += sorted((u for u in inside if split_rank_url(u)), key=split_rank_url) or [url]
            continue
        try:
            urls += [url] if fs.exists(path) else rank_files(url)
        except ChakraError:  # no rank files either: "no such file"
            urls.append(url)
    return urls


def _analyses(tables: dict, system: str | None):
    """(prefix, JobAnalysis, rank -> url) per job of the traces given, in prefix order: the rank
    files of one job (<prefix>.<rank>.et) are analysed together, a file outside that layout alone.
    The predicted device time needs every rank of the job."""
    from chakra_core.analysis.facade import JobAnalysis
    from chakra_core.format.job import Job, groups_url, read_comm_groups, split_rank_url

    jobs: dict[str, dict[int, str]] = {}
    for url in tables:
        prefix, rank = split_rank_url(url) or (url, 0)
        jobs.setdefault(prefix, {})[rank] = url
    for prefix, urls in sorted(jobs.items()):
        ranks = sorted(urls)
        whole = _whole_job(prefix, urls)
        groups = groups_url(prefix)
        job = Job([tables[urls[r]] for r in ranks], read_comm_groups(groups) if whole and _exists(groups) else {})
        yield prefix, JobAnalysis(job, prefix, system, predict=whole, ranks=ranks), urls


def _whole_job(prefix: str, urls: dict[int, str]) -> bool:
    """Whether the files given are every rank of their job (a file outside the layout is one)."""
    from chakra_core.errors import ChakraError
    from chakra_core.format.job import find_ranks

    if list(urls.values()) == [prefix]:
        return True
    try:
        return sorted(urls) == list(range(find_ranks(prefix)))
    except ChakraError:
        return False


def _exists(url: str) -> bool:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs.exists(path)


def _print_csv(rows: list[dict]) -> None:
    import csv

    if rows:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
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
                  f"(rank {b['max_rank']}), counts max/mean {c['max_over_mean']:.2f}; critical path "
                  f"{job['critical_path_step_ns'] / 1e6:.2f} ms a step; stragglers (chakra stragglers): "
                  + ("; ".join(straggler_line(row) for row in job["stragglers"]) or "none"))


def _why_bounds_differ(bound: str) -> str:
    if bound == "host":
        return "the host issues its last work about when the device would finish it, so a faster device alone would " \
               "not shorten the step"
    if bound == "device":
        return "the host waits for the device (a synchronisation) more than the device waits for it"
    return "communication holds the path while the device computes beside it"


def _print_device(rows: list[dict], jobs: list[dict]) -> None:
    """The device section: per trace with device work, its time as recorded and as predicted."""
    traced = [row for row in rows if row.get("gpu")]
    if not traced:
        return
    out = console()
    first = traced[0]["gpu"]
    system = (first["predicted"] or {}).get("system", "not predicted")
    out.print(f"device time over the profiled steps ({', '.join(first['steps'])}), as recorded and as predicted "
              f"on {system}")
    table = plain_table("trace", "variant", "span (µs)", "busy", "idle: host launch / sync / comm / other (µs)",
                        "comm overlap", "launches", "launch→start p50/p90 (µs)", "bound")
    for row in traced:
        for variant, gpu in (("recorded", row["gpu"]), ("predicted", row["gpu"]["predicted"])):
            if gpu is None:
                continue
            idle = " / ".join(f"{gpu['idle_ns'][c] // 1000:,}" for c in ("host_launch", "synchronisation",
                                                                           "communication", "other"))
            overlap = "-" if gpu["overlap"] is None else f"{gpu['overlap']:.0%}"
            delay = "/".join("-" if v is None else f"{v / 1000:,.1f}" for v in gpu["launch_delay_ns"].values())
            table.add_row(row["path"] if variant == "recorded" else "", variant, f"{gpu['span_ns'] // 1000:,}",
                          f"{gpu['busy_share']:.1%}", idle, overlap, f"{gpu['launches']:,}",
                          delay, (gpu["recorded_bound"] if variant == "recorded" else gpu["bound"]) or "-")
    out.print(table)
    for row in traced:
        ahead = row["gpu"]["predicted"]
        if ahead and ahead.get("critical_path") and ahead["busy_bound"] != ahead["bound"]:
            path = ahead["critical_path"]
            out.print(f"{row['path']}: predicted {ahead['bound']}-bound by its critical path (host "
                      f"{path['host'] // 1000:,} µs, device {(path['device'] + path['waiting for the device']) // 1000:,} "
                      f"µs, communication {path['communication'] // 1000:,} µs), though the device's time goes mostly to "
                      f"{ahead['busy_bound']} work ({ahead['busy_share']:.0%} busy): "
                      f"{_why_bounds_differ(ahead['bound'])}")
    for row in traced:
        gpu = row["gpu"]
        total = sum(gpu["families"].values()) or 1
        families = ", ".join(f"{name} {ns / total:.0%}" for name, ns in
                             sorted(gpu["families"].items(), key=lambda kv: -kv[1]))
        out.print(f"{row['path']}: device work {total // 1000:,} µs by family: {families}")
        for k in gpu["top_kernels"][:5]:
            out.print(f"  {k['total_ns'] // 1000:>9,} µs  {k['count']:>5,}×  median {k['median_ns'] / 1000:,.1f} µs  "
                      f"{k['family']:<13} {k['name'][:90]}")


def _note_set_aside(row: dict) -> None:
    """What the statistics of an imperfect trace left out, on stderr."""
    if row["cycle_edges_set_aside"]:
        print(f"{row['path']}: the dependency graph has cycles; {row['cycle_edges_set_aside']:,} edge(s) closing "
              "them were set aside for the critical path (chakra validate names the cycles)", file=sys.stderr)
    if row["missing_parents"]:
        print(f"{row['path']}: {row['missing_parents']:,} dependencies on node ids the trace does not hold "
              "were left out", file=sys.stderr)


def cmd_query(args) -> int:
    from chakra_core.warehouse.query import address_space_bound, open_warehouse, run_query, table_counts

    con, files_by_table, warnings = open_warehouse(args.warehouse, args.unsafe_full_engine, args.memory_limit,
                                                   args.as_of)
    for warning in warnings:
        print(f"chakra query: warning: {warning}", file=sys.stderr)
    if args.sql is None:
        rows, columns = table_counts(con, files_by_table), ["table", "days", "rows", "files"]
    else:
        with address_space_bound(memory_bytes(args.memory_limit)):  # what DuckDB allocates beside its buffers too
            result = run_query(con, args.sql, args.unsafe_full_engine, args.timeout)
        rows, columns = ([], []) if result is None else (result.to_pylist(), result.column_names)
    if args.json:
        print_json(rows, default=str)
    elif args.csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")  # LF, as every other line printed
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
                       "ranks, the critical path's step time across them and the stragglers with cause and cost "
                       "(the engine of chakra stragglers). Traces with device kernels also get where device time goes "
                       "over their profiled steps (busy, idle by cause, work by family, top kernels, overlap, "
                       "what bounds the step), as recorded and as simulated with --system. A readable table by "
                       "default.")
    p.add_argument("inputs", nargs="+", metavar="IN.et",
                   help="trace files, jobs' prefixes (PREFIX for PREFIX.<rank>.et) or folders of them")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON document {traces: [...], jobs: [...]}")
    form.add_argument("--csv", action="store_true", help="one CSV row per trace")
    p.add_argument("--system", metavar="SYS.json", default=None,
                   help="the system file that predicts the device time of traces with device kernels without "
                        "the profiler (default: the shipped host-overhead model, docs/gpu.md)")
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
    p.add_argument("--as-of", metavar="WHEN", default=None,
                   help="read the tables as they were: an ISO 8601 UTC time (2026-03-02T04:00:00Z: the last commit "
                   "at or before it) or a night's run id (right after that night's commit); default: now")
    p.add_argument("--unsafe-full-engine", action="store_true",
                   help="run any SQL with all of DuckDB's powers: several statements, writes (COPY TO), any file "
                   "on the machine, ATTACH, INSTALL from the network; for a trusted user only")
    p.add_argument("--memory-limit", default=limits.QUERY_MEMORY, type=memory_size, metavar="SIZE",
                   help=f"DuckDB's memory for the query, beyond which it spills to a scratch folder of its own "
                   f"(default {limits.QUERY_MEMORY})")
    p.add_argument("--timeout", default=limits.QUERY_TIMEOUT_S, type=seconds, metavar="S",
                   help=f"stop a query still running after S seconds (default {limits.QUERY_TIMEOUT_S:g})")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the rows as a JSON list of objects")
    form.add_argument("--csv", action="store_true", help="the rows as CSV with a header")
    p.set_defaults(run=cmd_query)
