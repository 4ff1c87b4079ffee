"""Commands on trace files as they are: info, jsonize, unjsonize, validate, survey."""

from __future__ import annotations

import sys

from chakra_core.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_OK,
    per_file,
    print_json,
)
from chakra_core.terminal import Progress, console, for_a_person, human_bytes, plain_table, printable

COMMANDS = {
    "info": "summarise a trace: node counts by type, collectives by type and bytes, metadata",
    "jsonize": "convert a .et file to lossless, human-readable JSON",
    "unjsonize": "convert JSON (from jsonize, or the reference chakra_jsonizer) to .et",
    "validate": "check traces for graph and attribute problems (exit 1 on errors)",
    "survey": "decode, validate and summarise every trace under folders into Parquet",
}


def cmd_info(args) -> int:
    from chakra_core.analysis.info import summarize

    summarized, failed = per_file(args.inputs, "info", "summarising traces", summarize)
    summaries = [s for _, s in summarized]
    status = EXIT_BAD_INPUT if failed else EXIT_OK
    if args.json:
        print_json(summaries[0] if len(args.inputs) == 1 and summaries else summaries)
        return status
    from rich.text import Text

    out = console()
    for s in summaries:
        meta = s["metadata"]
        out.print(Text(printable(s["path"]), style="bold"))
        out.print(f"  schema version: {meta['version'] or '(empty)'}")
        for name, value in meta["attributes"].items():
            text = str(value)
            shown = text if len(text) <= 100 or not for_a_person() else text[:97] + "..."
            out.print(f"  {name}: {shown}")
        out.print(f"  nodes: {s['nodes']:,}  dependencies: {s['dependencies']:,}  "
                  f"total duration: {s['total_duration_micros']:,} us")
        types = plain_table("node type", "count")
        for name, count in s["node_types"].items():
            types.add_row(name, f"{count:,}")
        out.print(types)
        if s["collectives"] or s["point_to_point"]:
            comm = plain_table("communication", "count", "bytes")
            for name, row in {**s["collectives"], **s["point_to_point"]}.items():
                comm.add_row(name, f"{row['count']:,}", f"{row['bytes']:,} ({human_bytes(row['bytes'])})")
            out.print(comm)
    return status


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
        print_json({
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


def add_parsers(sub) -> None:
    p = sub.add_parser("info", help=COMMANDS["info"],
                       description="Summarise one or more .et files: node counts by type, collectives and "
                       "send/recv by type with bytes, and the global metadata.")
    p.add_argument("inputs", nargs="+", metavar="IN.et", help="trace file(s)")
    p.add_argument("--json", action="store_true", help="print JSON (one object, or a list for several files)")
    p.set_defaults(run=cmd_info)

    p = sub.add_parser("jsonize", help=COMMANDS["jsonize"],
                       description="Convert IN.et to one JSON document {global_metadata, nodes: [...]} using the "
                       "protobuf JSON mapping; `chakra unjsonize` turns it back into the identical .et.")
    p.add_argument("input", metavar="IN.et")
    p.add_argument("output", metavar="OUT.json")
    p.set_defaults(run=cmd_jsonize)

    p = sub.add_parser("unjsonize", help=COMMANDS["unjsonize"],
                       description="Convert a JSON trace written by `chakra jsonize` (or the concatenated objects "
                       "of the reference chakra_jsonizer) back to a .et file; OUT ending in .gz is gzipped.")
    p.add_argument("input", metavar="IN.json")
    p.add_argument("output", metavar="OUT.et")
    p.set_defaults(run=cmd_unjsonize)

    p = sub.add_parser("validate", help=COMMANDS["validate"],
                       description="Check each trace for duplicate ids, missing or self dependencies, cycles, "
                       "unknown node types, communication nodes missing what ASTRA-sim needs, and metadata "
                       "problems. Prints every finding with file and node ids. Exit 0 when no errors (warnings "
                       "are printed but pass unless --strict), 1 with errors, 2 on unusable input.")
    p.add_argument("inputs", nargs="+", metavar="IN.et", help="trace file(s)")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON document")
    p.add_argument("--strict", action="store_true", help="warnings also make the exit status 1")
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("survey", help=COMMANDS["survey"],
                       description="Find every .et/.et.gz file under the given folders (or URLs), validate and "
                       "summarise each, and write OUT/traces.parquet (one row per file), OUT/findings.parquet "
                       "(one row per validation finding) and OUT/nodes/*.parquet (each file's node table). "
                       "Unreadable files are recorded, not fatal.")
    p.add_argument("roots", nargs="+", metavar="DIR", help="folders or files to survey")
    p.add_argument("-o", "--out", required=True, metavar="OUT_DIR", help="output folder (local)")
    p.set_defaults(run=cmd_survey)
