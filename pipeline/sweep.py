"""What-if sweeps: the systems every job is simulated on, and one simulation as a table row."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import fsspec

from chakra_core.errors import ChakraError
from chakra_core.sim import reference
from chakra_core.sim.config import load_network, read_document
from chakra_core.sim.workload import simulate_files

DEFAULT_SWEEP = os.path.join(os.path.dirname(__file__), "sweeps", "default.yaml")


NATIVE_RING = "native-ring"  # a sweep entry's network: a Ring with exactly the job's rank count


@dataclass(frozen=True)
class SystemSpec:
    """A system of the sweep, carrying its files' contents so that a Ray worker on any node can
    simulate it without the driver's checkout."""

    name: str
    network: str  # ASTRA-sim analytical network YAML text, or NATIVE_RING
    system: str  # ASTRA-sim system JSON text


def load_sweep(path: str | None = None) -> list[SystemSpec]:
    """A sweep file: `systems: [{name, network, system}, ...]`, paths relative to the file."""
    path = path or DEFAULT_SWEEP
    _, document = read_document(path)  # bounded size and nesting, one clear error
    base = os.path.dirname(os.path.abspath(path))
    systems = document.get("systems") if isinstance(document, dict) else None
    if not systems:
        raise ValueError(f"{path}: expected `systems: [{{name, network, system}}, ...]`")

    def text(name: str) -> str:
        with open(os.path.join(base, name)) as f:
            return f.read()

    return [SystemSpec(s["name"], NATIVE_RING if s["network"] == NATIVE_RING else text(s["network"]), text(s["system"]))
            for s in systems]


def _materialise(name: str, text: str) -> str:
    """A worker-local memory:// URL holding `text` (the simulator reads configs by URL)."""
    url = f"memory://chakra-sweep/{name}"
    with fsspec.open(url, "w") as f:
        f.write(text)
    return url


def _native_ring(npus: int) -> str:
    """A Ring of the job's own size (the reference network: 50 GB/s, 500 ns), so that every job,
    even one whose process groups cannot be scaled to another NPU count, is simulated at least once."""
    return (f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ {reference.BANDWIDTH_GBPS} ]\n"
            f"latency: [ {reference.LATENCY_NS} ]\n")


def reference_spec(systems: list[SystemSpec]) -> SystemSpec:
    """The sweep's native-ring entry (the reference system of synthesis and selection), or the
    reference system itself when the sweep has none."""
    return next((s for s in systems if s.network == NATIVE_RING),
                SystemSpec("reference", NATIVE_RING, json.dumps(reference.SYSTEM)))


# where the time of the NPU that finishes last went (sim/breakdown.py): the columns add up to finish_ns
PARTS = {"compute": "compute_ns", "host": "host_ns", "memory": "memory_ns", "communication": "exposed_comm_ns",
         "idle": "idle_ns"}


def simulate_row(job_id: str, prefix: str, ranks: int, comm_groups: str | None, spec: SystemSpec) -> dict:
    """One sim_results row: the job's traces (scaled to the network's NPU count) on one system."""
    network_url = _materialise(f"{spec.name}-{ranks}.yml", _native_ring(ranks) if spec.network == NATIVE_RING
                               else spec.network)
    system_url = _materialise(f"{spec.name}.json", spec.system)
    network = load_network(network_url)
    npus = network.npus
    row = {"job_id": job_id, "system": spec.name, "topology": "x".join(d.topology.value for d in network.dims),
           "npus": npus, "traced_npus": ranks, "status": "ok", "error": None, "finish_ns": None,
           "max_compute_ns": None, "max_cpu_ns": None, "max_exposed_comm_ns": None, "comm_ns": None, "what_if": None,
           **dict.fromkeys(PARTS.values()), "astra_exposed_comm_ns": None}
    groups = comm_groups if comm_groups and _has_groups(comm_groups) else None
    try:
        result, assumptions = simulate_files(prefix, network_url, system_url, groups,
                                             traced_npus=ranks if ranks != npus else None)
    except (ChakraError, ValueError) as exc:  # what the model cannot run is a result, not a crash
        row.update(status="not simulated", error=str(exc))
        return row
    except Exception as exc:  # noqa: BLE001 - a simulator fault is recorded, the sweep goes on
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        return row
    row.update(finish_ns=result.finish_ns, max_compute_ns=max(n.compute_ns for n in result.npus),
               max_cpu_ns=max(n.cpu_ns for n in result.npus),
               max_exposed_comm_ns=max(n.exposed_comm_ns for n in result.npus),
               comm_ns=max(sum(n.comm_ns.values()) for n in result.npus),
               astra_exposed_comm_ns=max(n.astra_exposed_comm_ns for n in result.npus),
               what_if="; ".join(assumptions) or None)
    last = max(result.npus, key=lambda n: n.finish_ns)  # the NPU the job waits for: its parts add up to finish_ns
    row.update({column: last.time_by_category[part] for part, column in PARTS.items()})
    return row


def _has_groups(url: str) -> bool:
    with fsspec.open(url, "r") as f:
        return bool(json.load(f))
