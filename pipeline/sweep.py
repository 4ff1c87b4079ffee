"""What-if sweeps: the systems every job is simulated on, and one simulation as a table row."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import fsspec
import yaml

from chakra_core.errors import ChakraError
from chakra_core.sim.config import load_network
from chakra_core.sim.workload import simulate_files

DEFAULT_SWEEP = os.path.join(os.path.dirname(__file__), "sweeps", "default.yaml")


NATIVE_RING = "native-ring"  # a sweep entry's network: a Ring with exactly the job's rank count


@dataclass(frozen=True)
class SystemSpec:
    name: str
    network: str  # ASTRA-sim analytical network YAML, or NATIVE_RING
    system: str  # ASTRA-sim system JSON


def load_sweep(path: str | None = None) -> list[SystemSpec]:
    """A sweep file: `systems: [{name, network, system}, ...]`, paths relative to the file."""
    path = path or DEFAULT_SWEEP
    with open(path) as f:
        document = yaml.safe_load(f)
    base = os.path.dirname(os.path.abspath(path))
    systems = document.get("systems") if isinstance(document, dict) else None
    if not systems:
        raise ValueError(f"{path}: expected `systems: [{{name, network, system}}, ...]`")
    return [SystemSpec(s["name"], s["network"] if s["network"] == NATIVE_RING else os.path.join(base, s["network"]),
                       os.path.join(base, s["system"])) for s in systems]


def _native_ring(npus: int) -> str:
    """A Ring of the job's own size (50 GB/s, 500 ns), so that every job, even one whose
    process groups cannot be scaled to another NPU count, is simulated at least once."""
    url = f"memory://chakra-sweep/native_ring_{npus}npus.yml"
    with fsspec.open(url, "w") as f:
        f.write(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return url


def simulate_row(job_id: str, prefix: str, ranks: int, comm_groups: str | None, spec: SystemSpec) -> dict:
    """One sim_results row: the job's traces (scaled to the network's NPU count) on one system."""
    network_url = _native_ring(ranks) if spec.network == NATIVE_RING else spec.network
    network = load_network(network_url)
    npus = network.npus
    row = {"job_id": job_id, "system": spec.name, "topology": "x".join(d.topology.value for d in network.dims),
           "npus": npus, "traced_npus": ranks, "status": "ok", "error": None, "finish_ns": None,
           "max_compute_ns": None, "max_exposed_comm_ns": None, "comm_ns": None, "what_if": None}
    groups = comm_groups if comm_groups and _has_groups(comm_groups) else None
    try:
        result, assumptions = simulate_files(prefix, network_url, spec.system, groups,
                                             traced_npus=ranks if ranks != npus else None)
    except (ChakraError, ValueError) as exc:  # what the model cannot run is a result, not a crash
        row.update(status="not simulated", error=str(exc))
        return row
    row.update(finish_ns=result.finish_ns, max_compute_ns=max(n.compute_ns for n in result.npus),
               max_exposed_comm_ns=max(n.exposed_comm_ns for n in result.npus),
               comm_ns=max(sum(n.comm_ns.values()) for n in result.npus),
               what_if="; ".join(assumptions) or None)
    return row


def _has_groups(url: str) -> bool:
    with fsspec.open(url, "r") as f:
        return bool(json.load(f))
