"""An ad hoc what-if sweep over traces the nightly flow already converted.

    python -m flows.sweep --date YYYY-MM-DD --sweep FILE [--name NAME] [--warehouse URL] [--num-cpus N]

Every converted job of the day (its `traces` table) is simulated on every system of the sweep
file (the format of pipeline/sweeps/default.yaml); the rows land in
WAREHOUSE/tables/sweep_results/sweep=<name>/date=<d>/, replacing an earlier run of the same
sweep and day, leaving the nightly tables untouched.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from flows.nightly import DEFAULT_WAREHOUSE, STORAGE_RETRIES  # noqa: E402
from pipeline import tables  # noqa: E402
from pipeline.run import start_ray, sweep_day  # noqa: E402
from pipeline.sweep import load_sweep  # noqa: E402


@task(name="simulate day on Ray", cache_policy=NO_CACHE)
def simulate_day(date: str, warehouse: str, sweep: str):
    return sweep_day(date, warehouse, load_sweep(sweep))


@task(name="write sweep table", retries=STORAGE_RETRIES, retry_delay_seconds=[1, 4, 10], cache_policy=NO_CACHE)
def write_sweep(warehouse: str, date: str, name: str, data) -> str:
    return tables.write_day(warehouse, "sweep_results", date, data, sweep=name)


@flow(name="sweep")
def sweep(date: str, sweep: str, name: str | None = None, warehouse: str = DEFAULT_WAREHOUSE,
          num_cpus: int | None = None) -> dict:
    """Returns {"table": URL, "rows": n, "ok": simulated rows}."""
    name = name or Path(sweep).stem
    start_ray(num_cpus)
    rows = simulate_day(date, warehouse, sweep)
    url = write_sweep(warehouse, date, name, rows)
    return {"table": url, "rows": rows.num_rows, "ok": sum(1 for s in rows.column("status").to_pylist() if s == "ok")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--date", required=True, help="a day the nightly flow processed, YYYY-MM-DD")
    parser.add_argument("--sweep", required=True, help="sweep file: systems: [{name, network, system}]")
    parser.add_argument("--name", help="the sweep's name in the table path (default: the file's stem)")
    parser.add_argument("--warehouse", default=DEFAULT_WAREHOUSE)
    parser.add_argument("--num-cpus", type=int)
    args = parser.parse_args(argv)
    result = sweep(args.date, args.sweep, args.name, args.warehouse, args.num_cpus)
    print(f"{result['rows']} simulations ({result['ok']} ok) -> {result['table']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
