"""`chakra stragglers`: the critical path of a converted job across its ranks, and who holds it
back, why and at what cost (analysis/stragglers.py, docs/cli.md)."""

from __future__ import annotations

import sys

from chakra_core.cli.common import EXIT_BAD_INPUT, EXIT_OK, print_json
from chakra_core.terminal import console, plain_table

COMMANDS = {"stragglers": "the critical path of a job across its ranks, and its stragglers with cause and cost"}
PARTS_SHOWN = 8  # the critical path's largest parts printed


def cmd_stragglers(args) -> int:
    from chakra_core.analysis.predicted import prediction_system
    from chakra_core.analysis.rank_timeline import COLUMNS
    from chakra_core.analysis.stragglers import job_report, simulated_report
    from chakra_core.errors import ChakraError
    from chakra_core.format.job import Job

    try:
        system = prediction_system(args.system)[0] if args.simulated else None
        job = Job.read(args.prefix, columns=None if args.simulated else COLUMNS)  # the simulator reads more
        report = {"job": args.prefix, **job_report(job.tables)}
        if system is not None:
            report["simulated"] = simulated_report(job, system)
    except (ChakraError, OSError) as error:
        print(f"chakra stragglers: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print_json(report)
    else:
        _print_report(args.prefix, report)
        if "simulated" in report:
            _print_report(f"{args.prefix} (simulated)", report["simulated"])
    return EXIT_OK


def straggler_line(row: dict) -> str:
    """One straggler in words: rank, cause (class and operator for compute) and cost per step."""
    what = row["cause"]
    if row.get("family"):
        what += f" ({row['family']}, {row.get('operator')})"
    return f"rank {row['rank']}: {what}, costs {row['cost_ns'] / 1e6:.2f} ms a step ({row['share']:.0%})"


def _print_report(prefix: str, report: dict) -> None:
    out = console()
    if not report["steps"]:
        out.print(f"{prefix}: no timed steps (a generated or untimed trace): no critical path to walk")
        return
    replay = report["replay"]
    out.print(f"{prefix}: step {report['step_ns'] / 1e6:.2f} ms on the critical path over "
              f"{len(report['steps'])} step(s) (recorded {replay.get('recorded_step_ns', 0) / 1e6:.2f} ms a step, "
              f"replayed {replay.get('replayed_step_ns', 0) / 1e6:.2f} ms)")
    if report["stragglers"]:
        for row in report["stragglers"]:
            out.print("  straggler " + straggler_line(row))
    else:
        out.print(f"  no straggler above {report['floor_share']:.0%} of the step")
    table = plain_table("rank", "kind", "ms a step", "share")
    length = report["critical_path"]["length_ns"] or 1
    for part in report["critical_path"]["parts"][:PARTS_SHOWN]:
        table.add_row(str(part["rank"]), part["kind"], f"{part['ns'] / 1e6:.2f}", f"{part['ns'] / length:.0%}")
    out.print(table)
    for step in report["steps"]:
        closers = ", ".join(f"rank {r} x{n}" for r, n in step["closers"].items()) or "none crossed"
        out.print(f"  {step['step']}: {step['length_ns'] / 1e6:.2f} ms; joins closed by {closers}")


def add_parsers(sub) -> None:
    p = sub.add_parser("stragglers", help=COMMANDS["stragglers"],
                       description="Read a converted job (PREFIX.<rank>.et for every rank), match its collectives and "
                       "sends/receives across ranks, replay the ranks together and walk each step's critical path "
                       "across them (host work, compute by operator class, communication, the rank that closed each "
                       "join). A straggler is a rank the others wait for: its cause (compute, host, communication, "
                       "input) and its cost, the step time saved if its late work were its peers' median, measured "
                       "by replaying the job without it. Ranks below 5% of the step are not reported.")
    p.add_argument("prefix", metavar="PREFIX")
    p.add_argument("--simulated", action="store_true",
                   help="also the job as the simulator runs it on a Ring of its NPUs (JSON: `simulated`, the same "
                        "report), to compare the predicted path with the recorded one")
    p.add_argument("--system", metavar="SYS.json", default=None,
                   help="the system file of --simulated (default: the reference system, which replays the "
                        "recorded host times)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: step_ns, stragglers (biggest cost first), critical_path, steps, waits, replay")
    p.set_defaults(run=cmd_stragglers)
