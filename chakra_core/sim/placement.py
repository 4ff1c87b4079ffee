"""Where several jobs' ranks go on one network (docs/simulator.md, 'Several jobs on one
network'): `place(spec, ranks, npus)` gives each job its NPUs in the order of its ranks.

    packed        each job on consecutive NPUs, in the order given
    interleaved   NPU by NPU, round robin over the jobs that still need NPUs
    spread        each job's ranks evenly over the NPUs the jobs before it left free
    random:SEED   the NPUs shuffled (Python's random.Random(SEED)), then packed
    FILE.json     {"jobs": [[npu, ...], ...]}: each job's NPUs in the order of its ranks
"""

from __future__ import annotations

import json
import random

from chakra_core.inputs import open_input
from chakra_core.sim.errors import SimulationError

PLACEMENTS = ("packed", "interleaved", "spread", "random:SEED", "FILE.json")


def place(spec: str, ranks: list[int], npus: int) -> list[list[int]]:
    """Each job's NPUs (job i has ranks[i] ranks) on a network of `npus` NPUs."""
    if spec.endswith(".json"):
        return _from_file(spec, ranks, npus)
    if sum(ranks) > npus:
        raise SimulationError(f"placement {spec}: the jobs have {sum(ranks)} ranks in all, the network {npus} NPUs")
    if spec == "packed":
        return _packed(list(range(npus)), ranks)
    if spec == "interleaved":
        return _interleaved(ranks)
    if spec == "spread":
        return _spread(ranks, npus)
    seed = random_seed(spec)
    if seed is not None:
        order = list(range(npus))
        random.Random(seed).shuffle(order)
        return _packed(order, ranks)
    raise SimulationError(f"placement {spec!r}: expected one of {', '.join(PLACEMENTS)}")


def computed(spec: str) -> bool:
    """Whether the placement is worked out from the jobs' sizes (every one but a file)."""
    return spec in PLACEMENTS[:3] or random_seed(spec) is not None


def random_seed(spec: str) -> int | None:
    """SEED of random:SEED, else None."""
    kind, _, seed = spec.partition(":")
    return int(seed) if kind == "random" and seed.lstrip("-").isdigit() else None


def start_offsets(text: str | None, jobs: int) -> list[int]:
    """--start-ns 0,2000000 -> one start tick per job (all 0 when not given)."""
    if text is None:
        return [0] * jobs
    parts = text.split(",")
    if len(parts) != jobs or not all(p.strip().isdigit() for p in parts):
        raise SimulationError(f"--start-ns {text!r}: expected {jobs} whole numbers of ns, one per --workload")
    return [int(p) for p in parts]


def _packed(order: list[int], ranks: list[int]) -> list[list[int]]:
    jobs, at = [], 0
    for count in ranks:
        jobs.append(order[at:at + count])
        at += count
    return jobs


def _interleaved(ranks: list[int]) -> list[list[int]]:
    jobs: list[list[int]] = [[] for _ in ranks]
    npu = 0
    while any(len(job) < count for job, count in zip(jobs, ranks)):
        for job, count in zip(jobs, ranks):
            if len(job) < count:
                job.append(npu)
                npu += 1
    return jobs


def _spread(ranks: list[int], npus: int) -> list[list[int]]:
    free, jobs = list(range(npus)), []
    for count in ranks:
        chosen = [free[r * len(free) // count] for r in range(count)]
        jobs.append(chosen)
        taken = set(chosen)
        free = [npu for npu in free if npu not in taken]
    return jobs


def _from_file(url: str, ranks: list[int], npus: int) -> list[list[int]]:
    """A placement file: every NPU an id of the network, none given twice, one list per job of its rank count."""
    try:
        with open_input(url) as f:
            document = json.load(f)
    except (OSError, ValueError) as exc:
        raise SimulationError(f"{url}: not a placement file ({exc})") from None
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, list) or len(jobs) != len(ranks):
        raise SimulationError(f"{url}: 'jobs' must be a list of {len(ranks)} lists of NPUs, one per workload")
    seen: set[int] = set()
    for i, (job, count) in enumerate(zip(jobs, ranks)):
        if not isinstance(job, list) or len(job) != count:
            raise SimulationError(f"{url}: jobs[{i}] must list {count} NPUs, one per rank of workload {i}")
        for npu in job:
            if type(npu) is not int or not 0 <= npu < npus:
                raise SimulationError(f"{url}: jobs[{i}]: {npu!r} is not an NPU of the network (0..{npus - 1})")
            if npu in seen:
                raise SimulationError(f"{url}: jobs[{i}]: NPU {npu} is given to two ranks")
            seen.add(npu)
    return jobs
