"""Checks before a night's work: each finds in a second, with one line, a mistake that would
otherwise fail every task minutes later, each with its traceback, leaving partial outputs.

- A local folder (`file://` or a plain path) as source or warehouse on a Ray cluster of more than
  one node: the other nodes do not see the driver's disk.
- Object storage (`s3://...`) that cannot be reached or read with the credentials of the
  environment: one cheap call on the bucket, on the driver and on every node of the cluster
  (tasks read storage themselves, with their node's credentials).
- A warehouse whose Iceberg catalog cannot be opened (on object storage, none set), which the
  night would find only at its commit.
"""

from __future__ import annotations

import fsspec

from chakra_core.warehouse.catalog import CatalogError, open_catalog


class PreflightError(Exception):
    """An operator's mistake, said in one line: printed without a traceback."""


def is_local(url: str) -> bool:
    return fsspec.core.split_protocol(url)[0] in (None, "file", "local")


def probe(url: str) -> str | None:
    """One call on the bucket (the first component of the URL's path); the problem, or None."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
        fs.info(path.split("/")[0], refresh=True)
    except Exception as e:  # noqa: BLE001 - whatever the store says, it is said in one line
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}"
    return None


def check(source: str, warehouse: str) -> None:
    """Raise PreflightError naming the first URL that cannot work on this Ray cluster."""
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    for role, url in (("source", source), ("warehouse", warehouse)):
        if is_local(url):
            if len(nodes) > 1:
                raise PreflightError(f"preflight: {role} {url} is a local folder, but the Ray cluster has {len(nodes)} "
                                     "nodes that do not see it: use storage every node reaches (s3://...)")
            continue
        problem = probe(url) or _probe_on_nodes(url, nodes)
        if problem:
            raise PreflightError(f"preflight: {role} {url} cannot be reached: {problem}")
    try:
        open_catalog(warehouse, create=True)
    except CatalogError as e:
        raise PreflightError(f"preflight: {e}") from None


def _probe_on_nodes(url: str, nodes: list[dict]) -> str | None:
    """The same probe as a task pinned to each node, as tasks use their node's credentials."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0, max_retries=0)(probe)
    pending = {n["NodeManagerAddress"]: remote.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(url) for n in nodes}
    problems = {address: problem for address, problem in zip(pending, ray.get(list(pending.values()))) if problem}
    return next((f"on node {address}: {problem}" for address, problem in problems.items()), None)
