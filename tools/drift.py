"""How make_drop's days differ: recorded and generated jobs drift within noise from day to day,
and one day a week carries an injected regression, so that the nightly flow's history has
something to find.

- **Drift.** Each job's times are scaled by a factor drawn from the date and the job's id,
  uniform in [1 - DRIFT, 1 + DRIFT]: a recorded job's Kineto events (start times scaled about
  the trace's first event, so nesting and order hold, and durations), a generated job's
  operator durations. Sizes, counts and the program never drift. The same date gives the same
  drop.
- **The injected regression** falls on every REGRESSION_WEEKDAY (Wednesday, ISO 3), on two jobs:
  GEMM_JOB's GEMM kernels (the `gemm` family of chakra_core.analysis.kernels) run 40% longer
  (`dur` x 1.4, starts unchanged), and BYTES_JOB's all-reduces move twice the bytes. The
  nightly must flag exactly these two jobs that day, naming `family:gemm` and
  `comm_bytes:all_reduce`.

    python -m tools.drift --demo-days [--before YYYY-MM-DD]

prints the two consecutive days `./run.sh` processes: the latest regression day on or before
`--before` (default: yesterday, UTC) and the day before it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import random
import sys

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.kernels import family
from chakra_core.format.nodetypes import COMP
from chakra_core.format.schema import et_def_pb2 as pb

DRIFT = 0.02
REGRESSION_WEEKDAY = 3
GEMM_JOB = "gpu-gpt"
GEMM_SLOWDOWN = 1.4
BYTES_JOB = "gen-dp-000-n8"


def is_regression_day(date: str) -> bool:
    return dt.date.fromisoformat(date).isoweekday() == REGRESSION_WEEKDAY


def factor(date: str, job_id: str) -> float:
    """The day's drift of a job's times."""
    return random.Random(f"drift:{date}:{job_id}").uniform(1 - DRIFT, 1 + DRIFT)


def drifted_kineto(data: bytes, scale: float, slowdown: float = 1.0, slowed: str = "gemm") -> bytes:
    """A gzipped Kineto trace with every event's time scaled about its first event, and the
    durations of the kernels of family `slowed` (GEMM by default) times `slowdown`."""
    trace = orjson.loads(gzip.decompress(data))
    events = trace.get("traceEvents", [])
    first = min((e["ts"] for e in events if isinstance(e.get("ts"), (int, float))), default=0)
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(first + (e["ts"] - first) * scale, 3)
        if isinstance(e.get("dur"), (int, float)):
            slower = slowdown if e.get("cat") == "kernel" and family(e.get("name", "")) == slowed else 1.0
            e["dur"] = round(e["dur"] * scale * slower, 3)
    return gzip.compress(orjson.dumps(trace), compresslevel=6, mtime=0)


def drifted_tables(tables: list[pa.Table], scale: float, bytes_factor: int = 1) -> list[pa.Table]:
    """A generated job's rank tables with compute durations scaled and all-reduce sizes times `bytes_factor`."""
    out = []
    for table in tables:
        comp = pc.equal(table.column("type"), COMP)
        duration = table.column("duration_micros")
        scaled = pc.cast(pc.round(pc.multiply(pc.cast(duration, pa.float64()), scale)), duration.type)
        table = table.set_column(table.column_names.index("duration_micros"), "duration_micros",
                                 pc.if_else(comp, scaled, duration))
        if bytes_factor != 1:
            size = table.column("comm_size")
            reduce = pc.fill_null(pc.equal(table.column("comm_type"), pb.ALL_REDUCE), False)
            table = table.set_column(table.column_names.index("comm_size"), "comm_size",
                                     pc.if_else(reduce, pc.multiply(size, bytes_factor), size))
        out.append(table)
    return out


def demo_days(before: str | None = None) -> tuple[str, str]:
    """(the day before, the latest regression day on or before `before`, default yesterday UTC)."""
    last = dt.date.fromisoformat(before) if before else dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)
    last -= dt.timedelta(days=(last.isoweekday() - REGRESSION_WEEKDAY) % 7)
    return (last - dt.timedelta(days=1)).isoformat(), last.isoformat()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.drift", description=__doc__.split("\n\n")[0])
    p.add_argument("--demo-days", action="store_true", required=True, help="print the two days ./run.sh processes")
    p.add_argument("--before", metavar="YYYY-MM-DD", help="the latest day to consider (default: yesterday, UTC)")
    args = p.parse_args(argv)
    try:
        print(*demo_days(args.before))
    except ValueError as exc:
        print(f"drift: --before: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
