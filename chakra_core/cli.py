"""The `chakra` command.

Every path argument is an fsspec URL (a local path, file://, memory://, s3://...; gzip is
detected on read). Exit status: 0 success, 1 validation findings, 2 bad input or usage.
Bad input is reported as one line on stderr, never as a traceback (set CHAKRA_DEBUG=1 to
see one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from chakra_core.terminal import Progress, console, for_a_person

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


def _print_json(document) -> None:
    json.dump(document, sys.stdout, indent=1)
    sys.stdout.write("\n")


def _per_file(urls: list[str], command: str, label: str, work: Callable[[str], object]) -> tuple[list, int]:
    """[(url, work(url))] for the files that work, and how many did not: each of those is
    reported as one line on stderr and the others go on."""
    from chakra_core.errors import ChakraError

    done_ok, failed = [], 0
    with Progress(items=True) as progress:
        for done, url in enumerate(urls):
            progress(label, done, len(urls))
            try:
                done_ok.append((url, work(url)))
            except ChakraError as exc:
                print(f"chakra {command}: {exc}", file=sys.stderr)
                failed += 1
    return done_ok, failed


def cmd_info(args) -> int:
    from rich.table import Table

    from chakra_core.analysis.info import summarize

    summarized, failed = _per_file(args.inputs, "info", "summarising traces", summarize)
    summaries = [s for _, s in summarized]
    status = EXIT_BAD_INPUT if failed else EXIT_OK
    if args.json:
        _print_json(summaries[0] if len(args.inputs) == 1 and summaries else summaries)
        return status
    out = console()
    for s in summaries:
        meta = s["metadata"]
        out.print(f"[bold]{s['path']}[/bold]")
        out.print(f"  schema version: {meta['version'] or '(empty)'}")
        for name, value in meta["attributes"].items():
            text = str(value)
            shown = text if len(text) <= 100 or not for_a_person() else text[:97] + "..."
            out.print(f"  {name}: {shown}")
        out.print(f"  nodes: {s['nodes']:,}  dependencies: {s['dependencies']:,}  "
                  f"total duration: {s['total_duration_micros']:,} us")
        types = Table("node type", "count", title=None, box=None, pad_edge=False)
        for name, count in s["node_types"].items():
            types.add_row(name, f"{count:,}")
        out.print(types)
        if s["collectives"] or s["point_to_point"]:
            comm = Table("communication", "count", "bytes", box=None, pad_edge=False)
            for name, row in {**s["collectives"], **s["point_to_point"]}.items():
                comm.add_row(name, f"{row['count']:,}", f"{row['bytes']:,} ({_human_bytes(row['bytes'])})")
            out.print(comm)
    return status


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_jsonize(args) -> int:
    from chakra_core.format.jsonio import et_to_json

    count = et_to_json(args.input, args.output)
    print(f"wrote {count:,} nodes to {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_unjsonize(args) -> int:
    from chakra_core.format.jsonio import json_to_et

    count = json_to_et(args.input, args.output)
    print(f"wrote {count:,} nodes to {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_validate(args) -> int:
    from chakra_core.analysis.validate import validate_file

    findings = [f for url in args.inputs for f in validate_file(url)]
    errors = [f for f in findings if f.severity == "error"]
    failing = findings if args.strict else errors
    if args.json:
        _print_json({
            "files": args.inputs,
            "errors": len(errors),
            "warnings": len(findings) - len(errors),
            "findings": [f.to_dict() for f in findings],
        })
    else:
        for f in findings:
            print(f"{f.severity}: [{f.code}] {f.message}")
        clean = len(args.inputs) - len({f.path for f in failing})
        print(f"{len(args.inputs)} file(s): {clean} clean, {len(errors)} error(s), "
              f"{len(findings) - len(errors)} warning(s)", file=sys.stderr)
    return EXIT_FINDINGS if failing else EXIT_OK


def cmd_survey(args) -> int:
    from chakra_core.analysis.survey import survey

    with Progress(items=True) as progress:
        result = survey(args.roots, args.out, progress=lambda done, total, url: progress("surveying traces", done, total))
    print(f"surveyed {result['files']} trace(s): {result['nodes']:,} nodes, {result['unreadable']} unreadable, "
          f"{result['errors']} validation error(s), {result['warnings']} warning(s)")
    print(f"tables: {result['traces_table']}\n        {result['findings_table']}\n        {result['node_tables']}/")
    return EXIT_OK


def _npu_speeds(spec: list[str] | None, network_url: str) -> list[float] | None:
    """--npu-speed 3=0.5 --npu-speed 7=0.8 -> one factor per NPU (1.0 elsewhere)."""
    if not spec:
        return None
    from chakra_core.sim.config import load_network

    speeds = [1.0] * load_network(network_url).npus
    for item in spec:
        npu, _, factor = item.partition("=")
        try:
            speeds[int(npu)] = float(factor)
        except (ValueError, IndexError):
            raise ValueError(f"--npu-speed {item!r}: expected NPU=FACTOR with NPU below {len(speeds)}") from None
    return speeds


def cmd_simulate(args) -> int:
    from rich.table import Table

    from chakra_core.sim.engine import SimulationDeadlock
    from chakra_core.sim.workload import simulate_files

    try:
        with Progress(items=True) as progress:
            result, assumptions = simulate_files(args.workload, args.network, args.system, args.comm_group,
                                                 args.mode, args.traced_npus, args.scaling,
                                                 compute_scale=args.compute_scale, comm_scale=args.comm_scale,
                                                 npu_speed=_npu_speeds(args.npu_speed, args.network),
                                                 progress=progress)
    except SimulationDeadlock as exc:
        if args.json:
            _print_json({**exc.partial.to_dict(), "deadlock": {str(k): v for k, v in exc.report.items()}})
        print(f"chakra simulate: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    for line in assumptions:
        print(f"what-if: {line}", file=sys.stderr)
    for line in result.notes:
        print(f"note: {line}", file=sys.stderr)
    if args.json:
        _print_json({**result.to_dict(), "what_if": assumptions})
        return EXIT_OK
    table = Table("NPU", "finish (ns)", "compute (ns)", "host (ns)", "exposed comm (ns)", "idle (ns)",
                  "communication (ns)", box=None, pad_edge=False)
    for npu in result.npus:
        comm = ", ".join(f"{op} {ns:,}" for op, ns in sorted(npu.comm_ns.items())) or "-"
        spent = npu.time_by_category  # adds up to the finish; memory time shows as its own line below
        table.add_row(str(npu.npu), f"{npu.finish_ns:,}", f"{spent['compute']:,}", f"{spent['host']:,}",
                      f"{spent['communication']:,}", f"{spent['idle']:,}", comm)
    out = console()
    out.print(table)
    memory = [n for n in result.npus if n.time_by_category["memory"]]
    if memory:
        out.print("memory (ns): " + ", ".join(f"NPU {n.npu} {n.time_by_category['memory']:,}" for n in memory))
    out.print(f"job finishes at {result.finish_ns:,} ns ({result.mode} network)")
    return EXIT_OK


def cmd_stats(args) -> int:
    import csv
    import re

    import pyarrow as pa
    from rich.table import Table

    from chakra_core.analysis.stats import collective_rows, job_stats, trace_row
    from chakra_core.format.etfile import read_table

    def statistics(url: str) -> tuple[dict, pa.Table]:
        table = read_table(url)
        return {"path": url, **trace_row(table)}, collective_rows(table)

    measured, failed = _per_file(args.inputs, "stats", "statistics of traces", statistics)
    rows, by_job = [row for _, (row, _) in measured], {}
    for url, (row, collectives) in measured:
        _note_set_aside(row)
        match = re.match(r"^(.*)\.(\d+)\.et(\.gz)?$", url)
        if match:
            by_job.setdefault(match.group(1), {})[int(match.group(2))] = (row, collectives)
    status = EXIT_BAD_INPUT if failed else EXIT_OK
    jobs = [{"job": prefix, **job_stats({r: v[0] for r, v in ranks.items()}, {r: v[1] for r, v in ranks.items()})}
            for prefix, ranks in sorted(by_job.items()) if len(ranks) > 1]
    if args.json:
        _print_json({"traces": rows, "jobs": jobs})
        return status
    if args.csv:
        if rows:
            writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return status
    out = console()
    table = Table("trace", "nodes", "compute (µs)", "collectives", "bytes", "msg p50/p99 (B)", "critical path (µs)",
                  "comm share", "depth", "width", box=None, pad_edge=False)
    for row in rows:
        table.add_row(row["path"], f"{row['nodes']:,}", f"{row['compute_micros']:,}",
                      f"{row['collective_nodes'] + row['p2p_nodes']:,}", _human_bytes(row["collective_bytes"] + row["p2p_bytes"]),
                      f"{row['message_p50']:,} / {row['message_p99']:,}", f"{row['critical_path_micros']:,}",
                      f"{row['critical_path_comm_share']:.0%}", f"{row['depth']:,}", f"{row['width']:,}")
    out.print(table)
    for job in jobs:
        b, c = job["bytes_imbalance"], job["count_imbalance"]
        out.print(f"{job['job']}: {job['ranks']} ranks; communication bytes max/mean {b['max_over_mean']:.2f} "
                  f"(rank {b['max_rank']}), counts max/mean {c['max_over_mean']:.2f}; stragglers by compute: "
                  f"{job['stragglers'] or 'none'}")
    return status


def _note_set_aside(row: dict) -> None:
    """What the statistics of an imperfect trace left out, on stderr."""
    if row["cycle_edges_set_aside"]:
        print(f"{row['path']}: the dependency graph has cycles; {row['cycle_edges_set_aside']:,} edge(s) closing "
              "them were set aside for the critical path (chakra validate names the cycles)", file=sys.stderr)
    if row["missing_parents"]:
        print(f"{row['path']}: {row['missing_parents']:,} dependencies on node ids the trace does not hold "
              "were left out", file=sys.stderr)


def _print_conversion(result, as_json: bool) -> int:
    from rich.table import Table

    if as_json:
        _print_json(result.summary())
    else:
        out = console()
        table = Table("rank", "host nodes", "operators", "communication", "kernels", "collapsed", "cut/notes",
                      box=None, pad_edge=False)
        for report in result.reports:
            counts = report["counts"]
            comm = ", ".join(f"{k.split(': ', 1)[1]} {v}" for k, v in sorted(counts.items())
                             if k.startswith("communication: ")) or "-"
            collapsed = sum(v for k, v in counts.items() if "collapsed" in k or "dropped" in k)
            cut = counts.get("parent cycle cut", 0)
            table.add_row(str(report["rank"]), f"{report['host_nodes']:,}", f"{counts.get('operators', 0):,}", comm,
                          f"{counts.get('device kernels', 0):,}", f"{collapsed:,}", f"{cut} cut, {len(report['notes'])} notes")
        out.print(table)
        for report in result.reports:
            for note in report["notes"]:
                print(f"rank {report['rank']}: {note}", file=sys.stderr)
        for note in result.inference_notes:
            print(f"groups: {note}", file=sys.stderr)
        out.print(f"wrote {len(result.et_files)} trace(s) ({result.nodes:,} nodes) as "
                  f"{result.out_dir}/{result.prefix}.<rank>.et, communicator groups in {result.comm_group_file},"
                  f" report in {result.report_file}")
        if len(result.ranks) > 1 and not result.mismatches:
            out.print("collectives match across ranks")
    for problem in result.mismatches:
        print(f"mismatch: {problem}", file=sys.stderr)
    return EXIT_FINDINGS if result.mismatches else EXIT_OK


def cmd_convert(args) -> int:
    from chakra_core.convert.job import convert_job

    with Progress() as progress:
        result = convert_job(args.src, args.out, args.prefix, progress=progress)
    return _print_conversion(result, args.json)


def cmd_split(args) -> int:
    from chakra_core.convert.job import JobInputError, convert_job

    with Progress() as progress:
        result = convert_job(args.src, args.out, args.prefix, progress=progress)
    if len(result.ranks) < 2:
        raise JobInputError(f"{args.src} describes one rank; `chakra convert` converts a single trace")
    return _print_conversion(result, args.json)


def cmd_link(args) -> int:
    from chakra_core.convert.kineto import rank_of, read_kineto
    from chakra_core.convert.pytorch import RankConversion
    from chakra_core.convert.pytorch_et import read_host_trace
    from chakra_core.format.etfile import write_table

    host = read_host_trace(args.host)
    kineto = read_kineto(args.kineto)
    conversion = RankConversion(host, kineto, rank_of(args.host, kineto, args.rank))
    table, metadata = conversion.emit()
    write_table(table, args.output, metadata)
    report = conversion.linked.report
    if args.json:
        _print_json({"output": args.output, "nodes": table.num_rows, **report.__dict__,
                     "conversion": conversion.report.to_dict()})
    else:
        for line in report.lines():
            print(line)
        print(f"wrote {table.num_rows:,} nodes to {args.output}")
    return EXIT_OK


def cmd_generate(args) -> int:
    from chakra_core.generate.workloads import generate

    # the workload options given (as strings; generate parses them and refuses another workload's)
    options = {key[4:]: value for key, value in vars(args).items() if key.startswith("opt_")}
    job = generate(args.workload, args.npus, **options)
    name = args.name or args.workload
    files = job.write(args.out, name)
    summary = {"workload": args.workload, "name": name, **job.summary(), "files": files}
    if args.json:
        _print_json(summary)
        return EXIT_OK
    nodes = summary["nodes_per_rank"]
    per_rank = f"{nodes['min']:,}" + (f"-{nodes['max']:,}" if nodes["max"] != nodes["min"] else "")
    print(f"{args.workload} on {job.npus} NPUs: {per_rank} nodes per rank ({nodes['total']:,} in all)")
    for kind, row in summary["communication"].items():
        print(f"  {kind:<15} {row['count']:>7,} nodes  {_human_bytes(row['bytes']):>10} (all ranks)")
    groups = summary["comm_groups"]
    limit = 4 if for_a_person() else len(groups)  # a pipe or log gets every group and file
    shown = ", ".join(f"{g}: {members}" for g, members in list(groups.items())[:limit])
    print(f"  communicator groups: {len(groups)}" + (f" ({shown}{', ...' if len(groups) > limit else ''})"
                                                      if groups else " (all collectives over all NPUs)"))
    if len(files) > 1 and for_a_person():
        print(f"  wrote {len(files)} files: {files[0]} ... {files[-1]}")
    else:
        print(f"  wrote {len(files)} file(s):", *files, sep="\n    ")
    return EXIT_OK


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """WORKLOAD, the job's size and place, and every workload's options (help lists whose they are)."""
    from chakra_core.generate.workloads import WORKLOADS

    p.add_argument("workload", choices=list(WORKLOADS), metavar="WORKLOAD", help=", ".join(WORKLOADS))
    p.add_argument("--npus", type=int, required=True, metavar="N", help="NPUs (ranks) of the job")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (any fsspec URL)")
    p.add_argument("--name", metavar="NAME", help="output names NAME.<rank>.et (default: the workload)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    by_option: dict[str, list] = {}
    for workload in WORKLOADS.values():
        for name, option in workload.options.items():
            by_option.setdefault(name, []).append((workload.name, option))
    group = p.add_argument_group("workload options (strings like 512,256 for lists)")
    for name, uses in by_option.items():
        texts = {option.help for _, option in uses}
        defaults = "; ".join(f"{w} {'derived' if o.default is None else _option_text(o.default)}" for w, o in uses)
        if len(texts) == 1:
            text = f"{texts.pop()} (default: {defaults})"
        else:
            text = "; ".join(f"{w}: {o.help}" for w, o in uses) + f" (default: {defaults})"
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"opt_{name}", default=argparse.SUPPRESS,
                           metavar=name.split("_")[0].upper(), help=text.replace("%", "%%"))


def _option_text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else f"{value:g}" if isinstance(value, float) \
        else str(value)


def cmd_synthesize(args) -> int:
    from chakra_core.synth.fidelity import TARGETS
    from chakra_core.synth.synthesize import synthesize

    with Progress(items=True) as progress:
        summary = synthesize(args.out, args.npus, args.jobs, train=args.train or (), model_in=args.model,
                             model_out=args.model_out, seed=args.seed, progress=progress)
    for skipped in summary["skipped"]:  # jobs the training could not use, each with its reason
        where = f" {skipped['job']}" if skipped["job"] else ""
        print(f"skipped{where}: {skipped['reason']}", file=sys.stderr)
    broken = [job for job in summary["jobs"] if job["problems"]]
    if args.json:
        _print_json(summary)
    else:
        from rich.table import Table

        table = Table("job", "cluster", "NPUs", "nodes", "ops/rank", "simulated (ms)", "exposed comm (ms)",
                      box=None, pad_edge=False)
        for job in summary["jobs"]:
            ms = (lambda ns: "-" if ns is None else f"{ns / 1e6:,.3f}")
            table.add_row(job["job"], str(job["cluster"]), str(job["npus"]), f"{job['nodes']:,}",
                          f"{job['operations_per_rank']:,}", ms(job["finish_ns"]), ms(job["exposed_comm_ns"]))
        out = console()
        out.print(table)
        checks = summary["checks"]
        if checks:
            ks, tv, it = checks["message_size_ks"], checks["composition_tv"], checks["iteration_time_relative_error"]
            fmt = (lambda v: "-" if v is None else f"{v:.3f}")
            out.print(f"fidelity against the real jobs of the same clusters at {args.npus} NPUs: message-size KS "
                      f"worst {fmt(ks['worst'])} (target {TARGETS['message_size_ks']:g}), composition TV "
                      f"{fmt(tv['value'])} (target {TARGETS['composition_tv']:g}), iteration time error worst "
                      f"{fmt(it['worst'])} (target {TARGETS['iteration_time_relative_error']:g})")
        else:
            out.print(f"fidelity: {summary['note']}")
        out.print(f"wrote {len(summary['jobs'])} job(s) under {summary['out_dir']}/, the report "
                  f"{summary['fidelity']}" + (f" and the model {summary['model']}" if summary["model"] else ""))
    for job in broken:
        for problem in job["problems"]:
            print(f"{job['job']}: {problem}", file=sys.stderr)
    return EXIT_FINDINGS if broken else EXIT_OK


def cmd_select(args) -> int:
    from chakra_core.analysis.fleet import find_jobs, load_job
    from chakra_core.analysis.select import (
        DEFAULT_MAX_ERROR,
        select_representatives,
        summarize_job,
    )
    from chakra_core.errors import ChakraError

    jobs, skipped = find_jobs(args.dirs)
    summaries = []
    with Progress(items=True) as progress:
        for done, job in enumerate(jobs):
            progress("simulating jobs on the reference system", done, len(jobs))
            try:
                summaries.append(summarize_job(job.job_id, *load_job(job)))
            except ChakraError as exc:  # a job that cannot be read or simulated is reported, not chosen
                skipped.append(f"{job.folder}: {exc}")
    if not summaries:
        raise ChakraError("no job could be summarised: " + "; ".join(skipped or ["no jobs found"]))
    target = DEFAULT_MAX_ERROR if args.max_error is None else args.max_error
    selection = select_representatives(summaries, args.k, target)
    document = {**selection.to_dict(), "skipped": skipped}
    if args.output:
        from chakra_core.outputs import open_output

        with open_output(args.output, "w") as f:
            json.dump(document, f, indent=1)
    if args.json:
        _print_json(document)
        return EXIT_OK
    from rich.table import Table

    chosen = Table("cluster", "representative", "weight", "jobs nearest", "share of fleet time",
                   title=f"{selection.k} representative(s) of {len(summaries)} job(s)")
    for c in selection.clusters:
        chosen.add_row(str(c["cluster"]), c["representative"], f"{c['weight']:.3f}", str(c["jobs"]),
                       f"{c['time_share']:.1%}")
    estimates = Table("metric", "key", "fleet", "estimate", "error",
                      title=f"what the subset estimates (largest group error {selection.error:.1%})")
    for row in selection.estimates:
        error = "-" if row["error"] is None else f"{row['error']:.1%}"
        estimates.add_row(row["group"], row["key"], f"{row['actual']:,.0f}", f"{row['estimate']:,.0f}", error)
    out = console()
    out.print(chosen)
    out.print(estimates)
    out.print("error per group: " + ", ".join(f"{g} {e:.1%}" for g, e in selection.errors.items()))
    for line in selection.notes + [f"skipped: {s}" for s in skipped]:
        print(line, file=sys.stderr)
    return EXIT_OK


def cmd_query(args) -> int:
    from chakra_core.analysis.warehouse import open_warehouse, run_query, table_counts

    con, files_by_table = open_warehouse(args.warehouse)
    if args.sql is None:
        rows, columns = table_counts(con, files_by_table), ["table", "days", "rows", "files"]
    else:
        result = run_query(con, args.sql)
        rows, columns = ([], []) if result is None else (result.to_pylist(), result.column_names)
    if args.json:
        json.dump(rows, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    elif args.csv:
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows([row[c] for c in columns] for row in rows)
    else:
        from rich.table import Table

        table = Table(*columns, box=None, pad_edge=False)
        for row in rows:
            table.add_row(*("" if row[c] is None else f"{row[c]:,}" if isinstance(row[c], int) and not
                            isinstance(row[c], bool) else str(row[c]) for c in columns))
        out = console()
        out.print(table)
        out.print(f"{len(rows):,} row(s)")
    return EXIT_OK


def cmd_replay(args) -> int:
    from chakra_core.replay.launch import replay_job
    from chakra_core.sim.config import load_comm_groups

    groups = load_comm_groups(args.comm_group) if args.comm_group else None
    result = replay_job(args.workload, groups, iterations=args.iterations, warmup=args.warmup, backend=args.backend,
                        compute=args.compute, timeout_s=args.timeout)
    if args.json:
        _print_json(result)
        return EXIT_OK
    from rich.table import Table

    by_kind: dict[tuple, list[int]] = {}
    for node in result["nodes"]:
        by_kind.setdefault((node["rank"], node["kind"]), []).append(node["median_ns"])
    table = Table("rank", "communication", "nodes", "time per iteration (ms)", box=None, pad_edge=False)
    for (rank, kind), times in sorted(by_kind.items()):
        table.add_row(str(rank), kind, str(len(times)), f"{sum(times) / 1e6:,.3f}")
    out = console()
    out.print(table)
    iterations = ", ".join(f"{ns / 1e6:,.3f}" for ns in result["iterations_ns"])
    recorded = result["recorded_ns"]
    compared = "" if not recorded else (f"; the trace recorded {recorded / 1e6:,.3f} ms "
                                        f"({result['median_ns'] / recorded - 1:+.1%})")
    out.print(f"{result['ranks']} ranks, iterations (ms): {iterations}; median {result['median_ns'] / 1e6:,.3f} ms"
              + compared)
    return EXIT_OK


def cmd_calibrate(args) -> int:
    from chakra_core.replay.calibrate import (
        compute_scale,
        fit,
        measure,
        samples_from_jobs,
        write_calibration,
    )

    samples = samples_from_jobs(args.workloads, args.comm_group)
    if args.measure:
        samples += measure(args.npus)
    result = fit(samples)
    if args.measured_ms is not None:
        if not args.workloads:
            raise ValueError("--measured-ms needs a job (PREFIX) whose traces it measured")
        result["compute_scale"] = compute_scale(args.workloads[0], args.measured_ms * 1e6)
    paths = write_calibration(args.out, args.npus, result)
    if args.json:
        _print_json({**result, **paths})
        return EXIT_OK
    print(f"fitted on {len(result['samples'])} measurement(s): latency {result['latency_ns']:,.0f} ns, "
          f"bandwidth {result['bandwidth_gbps']:,.3f} GB/s (1 GB = 2^30 B); median error "
          f"{result['median_abs_error']:.1%}")
    if "compute_scale" in result:
        print(f"compute ran {result['compute_scale']:.3f}x its recorded time: simulate with --compute-scale "
              f"{result['compute_scale']:.3f}")
    print(f"wrote {paths['network']}, {paths['system']} (for {args.npus} NPUs) and {paths['calibration']}")
    return EXIT_OK


class _VersionAction(argparse.Action):
    """--version, looked up only when asked for: reading the package metadata costs every
    other command ~25 ms of start-up."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = f"chakra-fleet {version('chakra-fleet')}"
        except PackageNotFoundError:  # run from a source tree that was never installed
            text = "chakra-fleet (not installed)"
        print(text)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chakra",
        description="Read, check and convert Chakra execution traces (.et). Paths may be any fsspec URL "
        "(local, file://, s3://, memory://); gzip input is detected automatically.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", help="summarise a trace: node counts by type, collectives by type and bytes, metadata",
                       description="Summarise one or more .et files: node counts by type, collectives and "
                       "send/recv by type with bytes, and the global metadata.")
    p.add_argument("inputs", nargs="+", metavar="IN.et", help="trace file(s)")
    p.add_argument("--json", action="store_true", help="print JSON (one object, or a list for several files)")
    p.set_defaults(run=cmd_info)

    p = sub.add_parser("jsonize", help="convert a .et file to lossless, human-readable JSON",
                       description="Convert IN.et to one JSON document {global_metadata, nodes: [...]} using the "
                       "protobuf JSON mapping; `chakra unjsonize` turns it back into the identical .et.")
    p.add_argument("input", metavar="IN.et")
    p.add_argument("output", metavar="OUT.json")
    p.set_defaults(run=cmd_jsonize)

    p = sub.add_parser("unjsonize", help="convert JSON (from jsonize, or the reference chakra_jsonizer) to .et",
                       description="Convert a JSON trace written by `chakra jsonize` (or the concatenated objects "
                       "of the reference chakra_jsonizer) back to a .et file; OUT ending in .gz is gzipped.")
    p.add_argument("input", metavar="IN.json")
    p.add_argument("output", metavar="OUT.et")
    p.set_defaults(run=cmd_unjsonize)

    p = sub.add_parser("validate", help="check traces for graph and attribute problems (exit 1 on errors)",
                       description="Check each trace for duplicate ids, missing or self dependencies, cycles, "
                       "unknown node types, communication nodes missing what ASTRA-sim needs, and metadata "
                       "problems. Prints every finding with file and node ids. Exit 0 when no errors (warnings "
                       "are printed but pass unless --strict), 1 with errors, 2 on unusable input.")
    p.add_argument("inputs", nargs="+", metavar="IN.et", help="trace file(s)")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON document")
    p.add_argument("--strict", action="store_true", help="warnings also make the exit status 1")
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("survey", help="decode, validate and summarise every trace under folders into Parquet",
                       description="Find every .et/.et.gz file under the given folders (or URLs), validate and "
                       "summarise each, and write OUT/traces.parquet (one row per file), OUT/findings.parquet "
                       "(one row per validation finding) and OUT/nodes/*.parquet (each file's node table). "
                       "Unreadable files are recorded, not fatal.")
    p.add_argument("roots", nargs="+", metavar="DIR", help="folders or files to survey")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="output folder (local)")
    p.set_defaults(run=cmd_survey)

    p = sub.add_parser("simulate", help="replay one ET per NPU on an ASTRA-sim network/system model",
                       description="Simulate <PREFIX>.<npu>.et for every NPU of the network (as ASTRA-sim does) "
                       "with ASTRA-sim's analytical model: network YAML (Ring, FullyConnected, Switch per "
                       "dimension) and system JSON (collective algorithms, chunking, queues, endpoint delay, "
                       "roofline). Prints per-NPU finish, compute and exposed communication times. Exit 1 "
                       "with a report of what each NPU waits for if the job can never finish.")
    p.add_argument("--workload", required=True, metavar="PREFIX", help="files PREFIX.0.et, PREFIX.1.et, ...")
    p.add_argument("--network", required=True, metavar="NET.yml", help="ASTRA-sim analytical network YAML")
    p.add_argument("--system", required=True, metavar="SYS.json", help="ASTRA-sim system JSON")
    p.add_argument("--comm-group", metavar="FILE", help="ASTRA-sim communicator-group JSON")
    p.add_argument("--mode", choices=["unaware", "aware"], default="unaware",
                   help="congestion-unaware (default) or congestion-aware network")
    p.add_argument("--traced-npus", type=int, metavar="N",
                   help="what-if: the workload has files for N NPUs; run it on the network's NPU count "
                   "(assumptions are printed)")
    p.add_argument("--scaling", choices=["weak", "strong"], default="weak",
                   help="what-if: keep each NPU's compute (weak, default) or divide it by M/N (strong)")
    p.add_argument("--compute-scale", type=float, default=1.0, metavar="X",
                   help="multiply every compute time by X (e.g. 0.5: compute twice as fast)")
    p.add_argument("--comm-scale", type=float, default=1.0, metavar="X",
                   help="multiply every communication time by X (e.g. 0.5: network twice as fast)")
    p.add_argument("--npu-speed", action="append", metavar="NPU=FACTOR",
                   help="NPU's compute speed factor (0.5: a straggler at half speed); repeatable")
    p.add_argument("--json", action="store_true", help="one JSON document; npus[i].finish_ns per NPU")
    p.set_defaults(run=cmd_simulate)

    p = sub.add_parser("stats", help="statistics per trace (and per job for <prefix>.<rank>.et files)",
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

    from chakra_core.viz.graph import add_visualize_parser
    from chakra_core.viz.plots import add_plot_parser
    from chakra_core.viz.timeline import add_timeline_parser

    add_visualize_parser(sub)
    add_timeline_parser(sub)
    add_plot_parser(sub)

    def add_job_arguments(p) -> None:
        p.add_argument("src", metavar="SRC")
        p.add_argument("-o", "--out", required=True, metavar="DSTDIR", help="output folder (any fsspec URL)")
        p.add_argument("--prefix", default="trace", metavar="NAME", help="output names NAME.<rank>.et (default trace)")
        p.add_argument("--json", action="store_true", help="print the conversion report as JSON")

    p = sub.add_parser("convert", help="convert PyTorch execution traces (+ Kineto) to one Chakra ET per rank",
                       description="Convert SRC, one PyTorch ET JSON file (any schema seen in the wild, gzip ok) or "
                       "a folder / .tar / .zip holding rank<R>.et.json[.gz] with optional rank<R>.kineto.json[.gz] "
                       "beside them, or a multi-rank JSON {\"<rank>\": <ET>}, into DSTDIR/NAME.<R>.et per rank, "
                       "DSTDIR/NAME.comm_groups.json (ASTRA-sim --comm-group-configuration) and "
                       "DSTDIR/NAME.report.json. Prints what was kept, collapsed and cut per rank. Exit 1 when "
                       "collectives do not match across ranks, 2 on unreadable input.")
    add_job_arguments(p)
    p.set_defaults(run=cmd_convert)

    p = sub.add_parser("split", help="split a multi-rank input into one Chakra ET per NPU, checking collectives",
                       description="Like convert, for an input that describes several ranks (a folder of per-rank "
                       "traces, a multi-rank JSON, a .tar/.zip job bundle): writes DSTDIR/NAME.<R>.et per NPU and "
                       "checks that every process group's members issue the same collectives in the same order, "
                       "type and size, and that sends meet receives; the first mismatch per group is printed. "
                       "Exit 1 on a mismatch.")
    add_job_arguments(p)
    p.set_defaults(run=cmd_split)

    p = sub.add_parser("link", help="link one rank's PyTorch ET with its Kineto trace into a Chakra ET",
                       description="Match host operators to Kineto CPU events (record-function id, or External id "
                       "and operator order in older traces), attach the device kernels each launched (by "
                       "correlation), and write one Chakra ET with measured CPU and kernel durations. Prints how "
                       "much was linked.")
    p.add_argument("host", metavar="HOST.et.json")
    p.add_argument("kineto", metavar="KINETO.json")
    p.add_argument("-o", "--output", required=True, metavar="OUT.et")
    p.add_argument("--rank", type=int, help="the rank (default: Kineto's distributedInfo, else 0)")
    p.add_argument("--json", action="store_true", help="print the link report as JSON")
    p.set_defaults(run=cmd_link)

    p = sub.add_parser("generate", help="generate a training job (mlp, dlrm, transformer) as one Chakra ET per NPU",
                       description="Write DIR/NAME.<rank>.et for every NPU of a canned workload sized from model "
                       "dimensions and a parallelism description, plus DIR/NAME.comm_groups.json (ASTRA-sim "
                       "--comm-group-configuration) when it uses sub-groups; print ranks, nodes, collectives by "
                       "type and bytes, groups and files. mlp: --parallelism dp | mp | dp-mp (data-parallel groups "
                       "on inner, contiguous ranks, model-parallel on outer, strided ones; --mp sets the MP degree) | "
                       "mp-dp (the reverse). dlrm: embedding tables spread over the NPUs (all-to-all), "
                       "data-parallel MLPs. transformer: --tp tensor parallel (inner ranks) x --pp pipeline stages "
                       "(send/recv of micro-batches) x ZeRO-2 data parallel over the remaining npus/(tp*pp). "
                       "The global batch is fixed. Options of another workload are refused.")
    add_generate_arguments(p)
    p.set_defaults(run=cmd_generate)
    p = sub.add_parser("synthesize", help="fit a generative model on a fleet and write synthetic, obfuscated jobs",
                       description="Fit the synthesizer on the training jobs (each DIR holds one job's "
                       "<name>.<rank>.et files, or subfolders that each hold one; unreadable, invalid or inconsistent "
                       "jobs are reported and skipped), or load a saved model, then sample K jobs of N NPUs (any N, "
                       "also one never seen in training) into OUT/<job>/<job>.<rank>.et (+ <job>.comm_groups.json). "
                       "Every job is validated and simulated on the reference system (a Ring of N NPUs, 50 GB/s, "
                       "500 ns); OUT/fidelity.json compares them with the real jobs of the same cluster and NPU "
                       "count (message-size KS, composition TV, iteration time). Exit 1 if a job fails its checks.")
    p.add_argument("--train", nargs="+", metavar="DIR", help="training job folder(s), or folders of job folders")
    p.add_argument("--npus", type=int, required=True, metavar="N", help="NPUs of each synthetic job")
    p.add_argument("--jobs", type=int, required=True, metavar="K", help="synthetic jobs to write")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (any fsspec URL)")
    p.add_argument("--seed", type=int, default=0, help="seed of fitting and sampling (default 0)")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model-out", metavar="FILE", help="where to save the fitted model (default OUT/model.json)")
    model.add_argument("--model", metavar="FILE", help="sample from this saved model instead of fitting (no --train)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=cmd_synthesize)
    p = sub.add_parser("select", help="choose representative jobs of a fleet, with weights and estimate errors",
                       description="Choose representatives one at a time, each the job that most lowers the "
                       "largest error of the subset's weighted estimate of the fleet (jobs, simulated time on the "
                       "reference system, exposed communication, time per family, bytes per collective kind); "
                       "weights are calibrated by a linear program. Prints the representatives, their weights and, "
                       "per metric, the fleet's value, the estimate and the error. A DIR holds one job's "
                       "<name>.<rank>.et files, or subfolders that each hold one job.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="job folder(s), or folders of job folders")
    size = p.add_mutually_exclusive_group()
    size.add_argument("-k", type=int, help="number of representatives (default: the fewest meeting --max-error)")
    size.add_argument("--max-error", type=float, metavar="E",
                      help="without -k: the largest group error allowed, as a fraction (default 0.05)")
    p.add_argument("-o", "--output", metavar="OUT.json", help="also write the selection as JSON here")
    p.add_argument("--json", action="store_true", help="print the selection as JSON")
    p.set_defaults(run=cmd_select)

    p = sub.add_parser("replay", help="replay a job on a real torch.distributed runtime and time it",
                       description="Run one process per rank (torch.distributed: gloo on CPUs, nccl on GPUs), each "
                       "walking its <PREFIX>.<rank>.et in dependency order: every collective and send/recv with its "
                       "recorded size and process group, compute nodes for their recorded duration (sleep or spin; "
                       "none: skipped, to time communication alone). Prints the iteration times (the slowest rank's), "
                       "their median against the time the trace itself recorded, and communication time per kind "
                       "and rank; --json gives every communication node. Needs the torch extra.")
    p.add_argument("workload", metavar="PREFIX", help="files PREFIX.0.et, PREFIX.1.et, ...")
    p.add_argument("--comm-group", metavar="FILE", help="ASTRA-sim communicator-group JSON (sub-groups)")
    p.add_argument("--iterations", type=int, default=3, metavar="N", help="timed iterations (default 3)")
    p.add_argument("--warmup", type=int, default=1, metavar="W", help="untimed iterations first (default 1)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo", help="torch.distributed backend")
    p.add_argument("--compute", choices=["sleep", "spin", "none"], default="sleep",
                   help="how compute nodes take their recorded time (default sleep)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds a rank may wait for its peers before the replay fails (default 60)")
    p.add_argument("--json", action="store_true", help="one JSON document with every communication node")
    p.set_defaults(run=cmd_replay)

    p = sub.add_parser("calibrate", help="fit the network model to measured communication; write ASTRA-sim configs",
                       description="Fit latency and bandwidth of a ring network to measured collectives: the linked "
                       "durations in the given jobs' traces (PREFIX.<rank>.et) and, with --measure, a sweep of "
                       "all-reduce from 1 KiB to 64 MiB run here on torch.distributed (gloo). Writes "
                       "DIR/network.yml and DIR/system.json for N NPUs, which chakra simulate takes as they are, and "
                       "DIR/calibration.json with the fit and every sample's residual.")
    p.add_argument("workloads", nargs="*", metavar="PREFIX", help="jobs whose traces carry measured durations")
    p.add_argument("--npus", type=int, required=True, metavar="N", help="NPUs of the network to write")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--comm-group", metavar="FILE", help="communicator groups (default PREFIX.comm_groups.json)")
    p.add_argument("--measure", action="store_true", help="also measure a collective sweep on N gloo ranks here")
    p.add_argument("--measured-ms", type=float, metavar="MS",
                   help="the first job's recorded steps measured with the profiler off: gives the compute scale")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    p.set_defaults(run=cmd_calibrate)

    p = sub.add_parser("query", help="SQL over the fleet pipeline's Parquet tables (DuckDB, any fsspec URL)",
                       description="Open the warehouse the nightly flow writes (a local folder, file:// or s3://) "
                       "in DuckDB with one view per table (ingest_log, rejects, traces, collectives, sim_results, "
                       "representatives, synthetic_traces, fidelity, sweep_results, ...), each with its date column "
                       "(and sweep for sweep_results), and run SQL over them. Without SQL, list the tables with "
                       "their days and rows. s3:// is read through s3fs (no DuckDB extension needed).")
    p.add_argument("sql", nargs="?", metavar="SQL", help="the query (default: list the tables)")
    p.add_argument("--warehouse", default="out/warehouse", metavar="URL",
                   help="the warehouse folder or URL (default out/warehouse)")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the rows as a JSON list of objects")
    form.add_argument("--csv", action="store_true", help="the rows as CSV with a header")
    p.set_defaults(run=cmd_query)
    return parser


def _run_guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, command: str) -> int:
    from chakra_core.errors import ChakraError

    try:
        return run(args)
    except ChakraError as exc:
        print(f"chakra {command}: {exc}", file=sys.stderr)
    except BrokenPipeError:  # e.g. `chakra info --json x.et | head`: the reader left, nothing to say
        raise
    except (OSError, ValueError) as exc:
        if os.environ.get("CHAKRA_DEBUG"):
            raise
        print(f"chakra {command}: {type(exc).__name__}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"chakra {command}: interrupted", file=sys.stderr)
    return EXIT_BAD_INPUT


def configure_arrow_memory() -> None:
    """The `chakra` process allocates Arrow buffers with jemalloc, which hands freed memory
    back sooner than pyarrow's default mimalloc: converting the ResNet trace peaks at 2.7x
    its JSON instead of 4.5x (tests/benchmarks/bench_convert.py). ARROW_DEFAULT_MEMORY_POOL,
    when set, wins; so does a build without jemalloc."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # pyarrow built without jemalloc
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_arrow_memory()
    try:
        return _run_guarded(args.run, args, args.command)
    except BrokenPipeError:
        sys.stderr.close()  # no second complaint from the interpreter at exit
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
