"""Nights of the nightly's own run_day on local Ray, one after the other on one warehouse, each
committed as the flow commits it: what the tests of the fleet's memory (test_history.py,
test_impact.py) run over days they drop themselves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

ONE_SYSTEM_SWEEP = "systems:\n  - {name: ring-native, network: native-ring, system: reference}\n"


def run_nights(root: Path, days: dict[str, bool], drop_day: Callable[[Path, str, bool], None]):
    """(warehouse, drops, {date: DayResult}): `drop_day(drops, date, inject)` then the night, for
    each of `days` ({date: inject}) in order, on a sweep of the reference system alone."""
    import ray

    from pipeline import tables
    from pipeline.cluster import start_ray
    from pipeline.nightly.run import run_day
    from pipeline.simulation import load_sweep

    source, warehouse = root / "drops", root / "warehouse"
    sweep = root / "sweep.yaml"
    sweep.write_text(ONE_SYSTEM_SWEEP)
    ray.shutdown()
    start_ray(num_cpus=2)
    nights = {}
    try:
        for date, inject in days.items():
            drop_day(source, date, inject)
            day = run_day(date, source.as_uri(), warehouse.as_uri(), load_sweep(str(sweep)), synthetic_jobs=0)
            tables.commit_night(warehouse.as_uri(), date, day.files, day.run_id)
            nights[date] = day
    finally:
        ray.shutdown()
    return warehouse, source, nights
