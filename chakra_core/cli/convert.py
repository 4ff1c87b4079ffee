"""Traces to Chakra: convert (PyTorch traces, FlexFlow task graphs, ASTRA-sim 1.0 text workloads),
split (a multi-rank job) and link (one rank with Kineto)."""

from __future__ import annotations

import sys

from chakra_core.cli.common import EXIT_FINDINGS, EXIT_OK, listed, print_json
from chakra_core.convert import sources
from chakra_core.terminal import Progress, console, plain_table, printable

COMMANDS = {
    "convert": "convert PyTorch execution traces (+ Kineto), a FlexFlow task graph or an ASTRA-sim 1.0 text "
               "workload to one Chakra ET per rank",
    "split": "split a multi-rank input into one Chakra ET per NPU, checking collectives",
    "link": "link one rank's PyTorch ET with its Kineto trace into a Chakra ET",
}


def _note(what: str, note: str) -> None:
    """A line of the conversion's notes on stderr: names from the traces (kernels, files) are
    data, their control and bidirectional characters shown as escapes."""
    print(f"{what}: {printable(note)}", file=sys.stderr)


def _convert_job(args):
    from chakra_core.cli.heap import keep_freed_heap
    from chakra_core.convert.common.result import tables_not_kept
    from chakra_core.convert.sources import OPTIONS, SourceOptions, convert_source

    options = SourceOptions(**{name: getattr(args, name) for name in OPTIONS})
    keep_freed_heap()  # batches free and reallocate tens of MB: keep those pages (cli/heap.py)
    with Progress() as progress, tables_not_kept():  # written, then only summarised
        return convert_source(args.src, args.out, args.prefix, args.source_format, options, progress=progress)


def cmd_convert(args) -> int:
    from chakra_core.convert.common.source_file import JobInputError

    try:
        result = _convert_job(args)
    except JobInputError:
        _refuse_folder_of_jobs(args.src, args.out)
        raise
    return _print_conversion(result, args.json)


def _refuse_folder_of_jobs(src: str, out: str) -> None:
    """A folder that holds jobs (or JAX runs) in its subfolders rather than one job: one line
    saying to convert them one by one, or to run the nightly over them as a day's drop."""
    import fsspec

    from chakra_core.convert.common.source_file import JobInputError

    fs, path = fsspec.core.url_to_fs(src)
    if not fs.isdir(path):
        return
    jobs = sorted(name for name in (entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(path, detail=False)
                              if fs.isdir(entry)) if _is_job(f"{src.rstrip('/')}/{name}"))
    if jobs:
        raise JobInputError(f"{src}: a folder of {len(jobs)} jobs ({listed(jobs)}), not one job: convert one at a time "
                            f"(chakra convert {src.rstrip('/')}/{jobs[0]} -o {out}/{jobs[0]}), or all of them as a "
                            "day's drop with the nightly flow, SOURCE/<date>/<job>/ (docs/pipeline.md)")


def _is_job(folder: str) -> bool:
    """Whether the folder is one job that convert takes: PyTorch rank traces, or a run of another source."""
    import fsspec

    if sources.detect_format(folder) != sources.DEFAULT:
        return True
    fs, path = fsspec.core.url_to_fs(folder)
    pytorch = sources.source("pytorch").trace
    return any(pytorch.rank(entry.rstrip("/").rsplit("/", 1)[-1]) is not None for entry in fs.ls(path, detail=False))


def cmd_split(args) -> int:
    from chakra_core.convert.common.source_file import JobInputError

    result = _convert_job(args)
    if len(result.ranks) < 2:
        raise JobInputError(f"{args.src} describes one rank; `chakra convert` converts a single trace")
    return _print_conversion(result, args.json)


def _print_conversion(result, as_json: bool) -> int:
    if as_json:
        print_json(result.summary())
    elif result.source:
        _print_source_conversion(result)
    else:
        out = console()
        table = plain_table("rank", "host nodes", "operators", "communication", "kernels", "collapsed", "cut/notes")
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
                _note(f"rank {report['rank']}", note)
        for note in result.inference_notes:
            _note("groups", note)
        for note in [*result.input_notes, *result.set_aside.values()]:
            _note("input", note)
        out.print(_wrote(result, "rank"))
        if len(result.ranks) > 1 and not result.mismatches:
            out.print("collectives match across ranks")
    for problem in result.mismatches:
        _note("mismatch", problem)
    return EXIT_FINDINGS if result.mismatches else EXIT_OK


def _print_source_conversion(result) -> None:
    """Per NPU what a single-file source (or a copy of Chakra ETs) became, then the source's notes."""
    out = console()
    table = plain_table("npu", "nodes", "compute", "compute (us)", "sends", "receives", "collectives")
    for report in result.reports:
        collectives = ", ".join(f"{k.lower()} {v}" for k, v in report["collectives"].items()) or "-"
        table.add_row(str(report["rank"]), f"{report['nodes']:,}", f"{report['compute']:,}",
                      f"{report['compute_us']:,}", f"{report['sends']:,}", f"{report['recvs']:,}", collectives)
    out.print(table)
    source = result.source
    print(f"{source['format']}: {source['time']}", file=sys.stderr)
    for note in source["notes"]:
        _note(source["format"], note)
    out.print(_wrote(result, "npu"))


def _wrote(result, unit: str) -> str:
    groups = f", communicator groups in {result.comm_group_file}" if result.comm_group_file else ""
    report = f", report in {result.report_file}" if result.report_file else ""
    return (f"wrote {len(result.et_files)} trace(s) ({result.nodes:,} nodes) as {result.out_dir}/{result.prefix}"
            f".<{unit}>.et{groups}{report}")


def cmd_link(args) -> int:
    from chakra_core.convert.pytorch.discover import checked_rank
    from chakra_core.convert.pytorch.kineto import rank_of, read_kineto
    from chakra_core.convert.pytorch.conversion import RankConversion
    from chakra_core.convert.pytorch.et import read_host_trace
    from chakra_core.format.etfile import write_table

    host = read_host_trace(args.host)
    kineto = read_kineto(args.kineto)
    conversion = RankConversion(host, kineto, checked_rank(rank_of(args.host, kineto, args.rank), args.host))
    table, metadata = conversion.emit()
    write_table(table, args.output, metadata)
    report = conversion.linked.report
    if args.json:
        print_json({"output": args.output, "nodes": table.num_rows, **report.__dict__,
                    "conversion": conversion.report.to_dict()})
    else:
        for line in report.lines():
            print(line)
        print(f"wrote {table.num_rows:,} nodes to {args.output}")
    return EXIT_OK


def _add_job_arguments(p) -> None:
    p.add_argument("src", metavar="SRC")
    p.add_argument("-o", "--out", required=True, metavar="DSTDIR", help="output folder (any fsspec URL)")
    p.add_argument("--prefix", default="trace", metavar="NAME", help="output names NAME.<rank>.et (default trace)")
    p.add_argument("--json", action="store_true", help="print the conversion report as JSON")
    p.add_argument("--from", dest="source_format", choices=sources.names(),
                   help="the input's format (default: told from its content)")
    for source in sources.SOURCES:
        if source.options:
            group = p.add_argument_group(source.options_group)
            for name in source.options:
                option = sources.OPTIONS[name]
                group.add_argument(option.flag, dest=name, type=option.type, metavar=option.metavar,
                                   choices=option.choices, help=option.help,
                                   default=getattr(sources.SourceOptions(), name))


def add_parsers(sub) -> None:
    p = sub.add_parser("convert", help=COMMANDS["convert"],
                       description="Convert SRC, one PyTorch ET JSON file (any schema seen in the wild, gzip ok) or "
                       "a folder / .tar / .zip holding rank<R>.et.json[.gz] with optional rank<R>.kineto.json[.gz] "
                       "beside them, or a multi-rank JSON {\"<rank>\": <ET>}, or a FlexFlow task graph (graphviz), "
                       "or an ASTRA-sim 1.0 text workload (with --npus), or a JAX run folder (its profile under "
                       "plugins/profile/<run>/, the compiled HLO text, timing.json), into DSTDIR/NAME.<R>.et per rank, "
                       "DSTDIR/NAME.comm_groups.json (ASTRA-sim --comm-group-configuration) and "
                       "DSTDIR/NAME.report.json. Prints what was kept, collapsed and cut per rank. Exit 1 when "
                       "collectives do not match across ranks, 2 on unreadable input.")
    _add_job_arguments(p)
    p.set_defaults(run=cmd_convert)

    p = sub.add_parser("split", help=COMMANDS["split"],
                       description="Like convert, for an input that describes several ranks (a folder of per-rank "
                       "traces, a multi-rank JSON, a .tar/.zip job bundle): writes DSTDIR/NAME.<R>.et per NPU and "
                       "checks that every process group's members issue the same collectives in the same order, "
                       "type and size, and that sends meet receives; the first mismatch per group is printed. "
                       "Exit 1 on a mismatch.")
    _add_job_arguments(p)
    p.set_defaults(run=cmd_split)

    p = sub.add_parser("link", help=COMMANDS["link"],
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
