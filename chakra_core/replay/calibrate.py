"""Fit the analytical network model to measured communication (`chakra calibrate`).

Samples are (collective, group size N, bytes S, measured ns): the linked durations of the
communication nodes of converted traces, and, with `measure`, a sweep of collectives over
sizes run on this machine's torch.distributed runtime (like nccl-tests). On a ring of N NPUs
with one chunk, ASTRA-sim's ring algorithm sends `steps` messages one after another, each
taking `latency + bytes / bandwidth` (docs/simulator.md, 'Ring'):

    all_reduce      2 (N-1) messages of S/N      reduce_scatter  (N-1) of S/N
    all_gather      (N-1) of S (S: each rank's share)   all_to_all  (N-1) of S/N

so every sample is linear in the two unknowns: ns = steps x latency + moved bytes / bandwidth.
A non-negative least-squares fit of the relative errors over all samples gives latency (ns)
and bandwidth; the
network YAML and system JSON written for N NPUs (a Ring, the ring algorithm, one chunk, no
endpoint delay, negligible local reduction) make `chakra simulate` reproduce the fit.
Each (collective, N, S) keeps its fastest measurement: waiting for late peers only adds time.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict

import numpy as np

from chakra_core.documents import ConfigError, read_document
from chakra_core.errors import ChakraError
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.job import Job, rank_url, read_ranks
from chakra_core.format.nodetypes import COLL
from chakra_core.outputs import open_output
from chakra_core.sim.config import SystemConfig, system_from_document

GIB = 1 << 30
FITTED = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
SWEEP_BYTES = tuple(1 << p for p in range(10, 27, 2))  # 1 KiB .. 64 MiB


class CalibrationError(ChakraError):
    """Too few or unusable measurements to fit the model."""


def steps_and_bytes(kind: str, npus: int, size: int) -> tuple[int, float]:
    """(messages sent one after another, bytes they carry in all) on a ring of npus."""
    if kind == "all_reduce":
        return 2 * (npus - 1), 2 * (npus - 1) * size / npus
    if kind == "all_gather":
        return npus - 1, (npus - 1) * size
    return npus - 1, (npus - 1) * size / npus  # reduce_scatter, all_to_all


def samples_from_tables(tables: list, groups: dict[int, tuple[int, ...]] | None, world: int) -> list[tuple]:
    """(kind, N, S, ns) of every timed collective of the ranks' node tables. Collectives of one
    rank that ran at the same time (gloo's worker threads run DDP's buckets side by side) share
    each moment equally: the simulator issues one collective of an NPU at a time, so each is
    timed by its share of the time they took together, and the shares add up to that time."""
    found = []
    for table in tables:
        rows = [row for row in table.select(["type", "comm_type", "comm_size", "pg_name", "start_time_micros",
                                             "duration_micros"]).to_pylist()
                if row["type"] == COLL and COMM_TYPES.get(row["comm_type"], "").lower() in FITTED
                and row["duration_micros"]]
        shares = time_shares([(row["start_time_micros"] or 0, row["duration_micros"]) for row in rows])
        for row, share in zip(rows, shares):
            name = row["pg_name"] or "0"
            npus = world if name == "0" else len((groups or {}).get(int(name), ()))
            if npus > 1 and row["comm_size"]:
                found.append((COMM_TYPES[row["comm_type"]].lower(), npus, int(row["comm_size"]),
                              int(round(share * 1000))))
    return found


def time_shares(spans: list[tuple[float, float]]) -> list[float]:
    """Each (start, duration)'s share of the time: a moment covered by k spans counts 1/k to each."""
    bounds = sorted({t for start, duration in spans for t in (start, start + duration)})
    if not bounds:
        return [0.0] * len(spans)
    cover = np.zeros(len(bounds), np.int64)  # spans open over [bounds[j], bounds[j + 1])
    for start, duration in spans:
        if duration:
            cover[bisect.bisect_left(bounds, start)] += 1
            cover[bisect.bisect_left(bounds, start + duration)] -= 1
    cover = np.cumsum(cover)[:-1]
    each = np.where(cover > 0, np.diff(bounds) / np.maximum(cover, 1), 0.0)
    before = np.r_[0.0, np.cumsum(each)]  # share of one span open from bounds[0] to bounds[j]
    return [float(before[bisect.bisect_left(bounds, start + duration)] - before[bisect.bisect_left(bounds, start)])
            for start, duration in spans]


def samples_from_jobs(jobs: list[Job]) -> list[tuple]:
    """(kind, N, S, ns) of the timed collectives of every job (read with its communicator groups)."""
    return [sample for job in jobs for sample in samples_from_tables(job.tables, job.comm_groups, job.npus)]


def compute_scale(prefix: str, measured_ns: float | None = None) -> float:
    """How much faster the job ran unprofiled than its trace recorded (the profiler's cost
    lies in every operator's duration): the --compute-scale that makes the trace's compute
    match a measurement of the same steps taken with the profiler off. measured_ns: those
    steps' time; None: the median step the converter found timed beside the traces
    (`unprofiled_step_ns` of `<prefix>.report.json`) times the recorded steps."""
    from chakra_core.replay.plan import recorded_ns

    tables = read_ranks(prefix)
    spans = [recorded_ns(table) for table in tables]
    if not any(spans):
        raise CalibrationError(f"{prefix}: the traces hold no start times: nothing to compare the measurement with")
    if measured_ns is None:
        measured_ns = unprofiled_ns(prefix, tables[0])
    return measured_ns / max(s for s in spans if s)


def unprofiled_steps_of(prefix: str) -> list[int] | None:
    """The unprofiled step times `chakra convert` found beside the job's traces (its report)."""
    try:
        _, document = read_document(f"{prefix}.report.json")
    except ConfigError:
        return None
    steps = document.get("unprofiled_step_ns") if isinstance(document, dict) else None
    return steps if isinstance(steps, list) and steps and all(_a_step_time(v) for v in steps) else None


def _a_step_time(value) -> bool:
    """A step time in ns: a number (not a bool) from 1 ns to 1e15 ns (11 days); 0 divided by zero."""
    return type(value) in (int, float) and 1 <= value <= 1e15


def unprofiled_ns(prefix: str, table) -> float:
    """The time the job's recorded steps took with the profiler off: the median unprofiled step
    of its conversion report times the ProfilerStep#N the trace holds."""
    import pyarrow.compute as pc

    report = f"{prefix}.report.json"
    steps = unprofiled_steps_of(prefix)
    if not steps:
        raise CalibrationError(f"{report}: no usable unprofiled step times (unprofiled_step_ns: numbers from 1 to "
                               "1e15 ns; record with TraceRecorder(timed_steps=K) and convert again, or give "
                               "--measured-ms)")
    recorded = len(pc.unique(table.filter(pc.starts_with(table.column("name"), "ProfilerStep#")).column("name")))
    if not recorded:
        raise CalibrationError(f"{rank_url(prefix, 0)}: no ProfilerStep#N nodes: cannot tell how many steps it recorded")
    return float(np.median(steps)) * recorded


def fit(samples: list[tuple]) -> dict:
    """latency_ns, bandwidth_gbps (1 GB = 2^30 B, as ASTRA-sim reads it) and the residuals."""
    fastest: dict[tuple, int] = defaultdict(lambda: 1 << 62)
    for kind, npus, size, ns in samples:
        fastest[(kind, npus, size)] = min(fastest[(kind, npus, size)], ns)
    if len({(k, s) for k, _, s in fastest}) < 2:
        raise CalibrationError(f"{len(fastest)} distinct measurement(s): need at least two sizes to fit latency "
                               "and bandwidth (run with --measure, or give traces with linked durations)")
    keys = sorted(fastest)
    design = np.array([steps_and_bytes(k, n, s) for k, n, s in keys], dtype=np.float64)
    measured = np.array([fastest[key] for key in keys], dtype=np.float64)
    try:
        from scipy.optimize import nnls
    except ImportError as exc:  # an optional dependency: a core install reads and simulates without it
        raise CalibrationError("fitting the network model needs scipy: pip install 'chakra-fleet[synth]'") from exc
    # relative errors, not nanoseconds, are minimised: else the largest sizes alone decide
    (latency, ns_per_byte), _ = nnls(design / measured[:, None], np.ones(len(measured)))
    if ns_per_byte <= 0:
        raise CalibrationError("the measurements do not grow with size: no bandwidth can be fitted")
    predicted = design @ np.array([latency, ns_per_byte])
    rows = [{"kind": k, "npus": n, "bytes": s, "measured_ns": int(m), "fitted_ns": int(round(p)),
             "relative_error": float(p / m - 1)} for (k, n, s), m, p in zip(keys, measured, predicted)]
    return {"latency_ns": float(latency), "bandwidth_gbps": float(1e9 / ns_per_byte / GIB), "samples": rows,
            "median_abs_error": float(np.median([abs(r["relative_error"]) for r in rows]))}


def fit_per_kind(samples: list[tuple]) -> dict[str, dict]:
    """The same fit on each collective's samples alone (kinds measured at two sizes or more):
    how far apart the collectives of one runtime are, which a single network cannot express."""
    by_kind: dict[str, list[tuple]] = defaultdict(list)
    for sample in samples:
        by_kind[sample[0]].append(sample)
    out = {}
    for kind, own in sorted(by_kind.items()):
        try:
            result = fit(own)
        except CalibrationError:
            continue
        out[kind] = {key: result[key] for key in ("latency_ns", "bandwidth_gbps", "median_abs_error")}
    return out


def network_yaml(npus: int, result: dict) -> str:
    return (f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ {result['bandwidth_gbps']:.9g} ]\n"
            f"latency: [ {result['latency_ns']:.9g} ]\n")


def calibrated_system(host_overhead: dict | None = None, device_timing: dict | None = None) -> SystemConfig:
    """The ring algorithm for every collective, one chunk, no endpoint delay, and a local memory
    so fast that reductions cost nothing: what the fit assumes. The fitted network times each
    call's whole cost on the runtime, so the CPU nodes a converted trace keeps for a blocking
    call's own duration take no time (call-time-in-network, which ASTRA-sim ignores); with a
    fitted host_overhead (hostfit.py), host time without the profiler's cost (host-overhead); with
    a measured device_timing, the launch latency and gaps between kernels (device-timing)."""
    from chakra_core.sim.config import HostOverhead

    model_keys = [key for key in HostOverhead.model_fields if host_overhead and key in host_overhead]
    return system_from_document("<calibrated system>", {
        "scheduling-policy": "LIFO", "endpoint-delay": 0, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
        "collective-optimization": "baseline", "local-mem-bw": 1e9, "call-time-in-network": 1,
        **({"host-overhead": {key: host_overhead[key] for key in model_keys
                              if key in ("scale", "launch_ns") or host_overhead[key]}} if host_overhead else {}),
        **({"device-timing": device_timing} if device_timing else {})})


def write_calibration(out_dir: str, npus: int, result: dict) -> dict[str, str]:
    paths = {"network": f"{out_dir}/network.yml", "system": f"{out_dir}/system.json",
             "calibration": f"{out_dir}/calibration.json"}
    with open_output(paths["network"], "w") as f:
        f.write(network_yaml(npus, result))
    with open_output(paths["system"], "w") as f:
        f.write(calibrated_system(result.get("host_overhead"), result.get("device_timing")).to_astra_sim_json())
    with open_output(paths["calibration"], "w") as f:
        json.dump({**result, "npus": npus}, f, indent=1)
    return paths


def measure(npus: int, kinds=("all_reduce",), sizes=SWEEP_BYTES, iterations: int = 5,
            timeout_s: float = 120.0) -> list[tuple]:
    """(kind, N, S, ns) from a sweep of collectives on this runtime (gloo), via chakra replay."""
    import tempfile

    if "reduce_scatter" in kinds:  # the replay runs it as an all-reduce on gloo: the fit would take one for the other
        raise CalibrationError("gloo has no reduce-scatter (a replay runs it as an all-reduce): measure all_reduce, "
                               "all_gather or all_to_all")

    from chakra_core.generate.builder import JobBuilder
    from chakra_core.replay.launch import replay_job

    job = JobBuilder(npus)
    for rank in range(npus):
        graph, previous = job.rank(rank), []
        for kind in kinds:
            for size in sizes:
                previous = [graph.collective(f"{kind}-{size}", kind.upper(), size, previous)]
    with tempfile.TemporaryDirectory(prefix="chakra-calibrate-") as folder:
        job.write(folder, "sweep")
        result = replay_job(f"{folder}/sweep", iterations=iterations, warmup=1, compute="none", timeout_s=timeout_s)
    # the rank that arrives last waits least: its time is the collective's own
    least: dict[int, int] = defaultdict(lambda: 1 << 62)
    for node in result["nodes"]:
        least[node["node_id"]] = min(least[node["node_id"]], node["median_ns"])
    plan = [(kind, size) for kind in kinds for size in sizes]
    return [(kind, npus, size, least[node_id]) for node_id, (kind, size) in enumerate(plan)]
