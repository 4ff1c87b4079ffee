"""`chakra diff`: what changed between two versions of a job, by the nightly detection's engine
(chakra_core/analysis/jobdiff.py)."""

from __future__ import annotations

import datetime as dt
import sys

from chakra_core.cli.common import EXIT_BAD_INPUT, EXIT_OK, listed, print_json
from chakra_core.days import iso_day
from chakra_core.errors import ChakraError
from chakra_core.terminal import console, plain_table

COMMANDS = {"diff": "what changed between two versions of a job: two converted jobs, or one job on two days"}
SHOWN_KERNELS = 15


class NoSuchDay(ChakraError):
    """A job or a day that the warehouse does not hold; the message lists what it holds."""


def cmd_diff(args) -> int:
    from chakra_core.analysis import jobdiff

    if args.warehouse:
        if not args.job or args.prefixes:
            print("chakra diff: with --warehouse give --job (--date: default its last day; --against: default the "
                  "day before) and no prefixes", file=sys.stderr)
            return EXIT_BAD_INPUT
        from chakra_core.warehouse.query import open_warehouse

        con, _, _ = open_warehouse(args.warehouse)
        days = _days(con, args.job, *(d and dt.date.fromisoformat(d) for d in (args.date, args.against)))
        before, after = (jobdiff.side_of_day(con, args.job, str(d)) for d in days)
    else:
        if len(args.prefixes) != 2 or args.job or args.date or args.against:
            print("chakra diff: give two job prefixes (BEFORE AFTER), or --warehouse with --job", file=sys.stderr)
            return EXIT_BAD_INPUT
        before, after = (jobdiff.side_of_traces(p) for p in args.prefixes)
    result = jobdiff.diff(before, after)
    if args.json:
        print_json(result.to_dict())
    else:
        _print(result, args.all)
    return EXIT_OK


def _days(con, job: str, date: dt.date | None, against: dt.date | None) -> tuple[dt.date, dt.date]:
    """(the earlier day, the later day) of the job: --date by default its last day in the
    warehouse, --against the day before it there (the nightly's baseline); a job or a day the
    warehouse does not hold is one line listing those it does."""
    from difflib import get_close_matches

    from chakra_core.analysis import jobdiff

    days = jobdiff.days_of_job(con, job)
    if not days:
        jobs = jobdiff.jobs_in_history(con)
        if not jobs:
            raise NoSuchDay("the warehouse's job_history holds no job yet: run the nightly flow first")
        close = get_close_matches(job, jobs, n=1)
        raise NoSuchDay(f"no job {job!r} in the warehouse" + (f": did you mean {close[0]}?" if close else "")
                        + f" (its jobs: {listed(jobs)})")
    date = date or days[-1]
    against = against or max((d for d in days if d < date), default=None)
    missing = [day for day in (date, against) if day is not None and day not in days]
    if missing:
        raise NoSuchDay(f"job {job} has no figures on {missing[0]} (its days: {listed(days)})")
    if against is None:
        raise NoSuchDay(f"job {job} has no day before {date} to compare with (its days: {listed(days)})")
    return against, date


def _print(result, everything: bool) -> None:
    from rich.markup import escape

    from chakra_core.analysis.history import shown

    out = console()
    out.print(escape(f"{result.before.label} -> {result.after.label}"))
    if result.before.fingerprint != result.after.fingerprint:
        out.print("the program changed (other operators, collectives or ranks): figures compare unlike programs")
    table = plain_table("metric", "before", "after", "change", "flagged", "cause")
    for c in result.changes:
        if everything or c.kind != "same":
            table.add_row(escape(c.metric), shown(c.metric, c.before), shown(c.metric, c.after), _percent(c.change),
                          f"{c.kind}" if c.flagged else "", escape(c.cause) if c.flagged else "")
    out.print(table)
    kernels = [k for k in result.kernels if everything or k["status"] != "same"][:None if everything else SHOWN_KERNELS]
    if kernels:
        table = plain_table("kernel", "family", "count", "time before", "time after", "change", "status")
        for k in kernels:
            table.add_row(escape(k["name"]), k["family"], f"{k['count_before']:,} -> {k['count_after']:,}",
                          shown("total_ns", k["ns_before"]), shown("total_ns", k["ns_after"]), _percent(k["change"]),
                          k["status"])
        out.print(table)
    if result.messages:
        table = plain_table("collective", "bytes", "count before", "count after")
        for m in result.messages:
            table.add_row(escape(str(m["kind"])), f"{m['bytes']:,}", f"{m['count_before']:,}", f"{m['count_after']:,}")
        out.print(table)


def _percent(change: float | None) -> str:
    return "" if change is None else f"{change:+.1%}"


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "diff", help=COMMANDS["diff"],
        description="Compare two versions of one job with the engine of the nightly detection: step time as "
        "recorded and predicted, the simulated finish on the reference system and its parts, device time by kernel "
        "family, idle by cause, host time, communication bytes and counts by kind, kernels by name (count, time; "
        "added and vanished) and messages by kind and size. A change is flagged beyond the metric's floor, or "
        "beyond the job's own day-to-day noise when a warehouse holds its history; a flagged headline names the "
        "part that explains most of it. Either two converted jobs (PREFIX.<rank>.et files), or one job on two "
        "days of the nightly warehouse (its job_history, kernels and collectives tables: no trace is read).")
    p.add_argument("prefixes", nargs="*", metavar="PREFIX", help="two converted jobs: BEFORE AFTER")
    p.add_argument("--warehouse", metavar="URL", help="the nightly warehouse (with --job)")
    p.add_argument("--job", metavar="JOB_ID", help="the job to compare across days")
    p.add_argument("--date", metavar="YYYY-MM-DD", type=iso_day,
                   help="the later day (default: the job's last day in the warehouse)")
    p.add_argument("--against", metavar="YYYY-MM-DD", type=iso_day,
                   help="the earlier day (default: the job's day before --date in the warehouse)")
    p.add_argument("--all", action="store_true", help="every metric and kernel, unchanged ones included")
    p.add_argument("--json", action="store_true", help="one JSON document: changes, kernels, messages")
    p.set_defaults(run=cmd_diff)
