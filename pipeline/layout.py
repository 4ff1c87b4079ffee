"""Where things live in object storage (any fsspec URL; docs/pipeline.md, 'Where things live').

SOURCE/<YYYY-MM-DD>/<job_id>/...                      a day's drop
WAREHOUSE/traces/date=<d>/job=<id>/<id>.<R>.et       converted, one per rank
WAREHOUSE/tables/<table>/date=<d>/part-0.parquet     one file per table and day
WAREHOUSE/tables/sweep_results/sweep=<name>/date=<d>/part-0.parquet   an ad hoc sweep
"""

from __future__ import annotations

import fsspec


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def filesystem(url: str):
    """(fsspec filesystem, path) of a URL; s3 endpoint and credentials come from the environment."""
    return fsspec.core.url_to_fs(url)


def day_url(source: str, date: str) -> str:
    return join(source, date)


def traces_dir(warehouse: str, date: str, job_id: str) -> str:
    return join(warehouse, "traces", f"date={date}", f"job={job_id}")


def table_dir(warehouse: str, table: str, date: str, sweep: str | None = None) -> str:
    """tables/<table>/date=<d>, or tables/<table>/sweep=<name>/date=<d> for an ad hoc sweep."""
    return join(warehouse, "tables", table, *([f"sweep={sweep}"] if sweep else []), f"date={date}")
