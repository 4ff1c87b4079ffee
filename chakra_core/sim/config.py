"""Simulator inputs: network, system and communicator-group configurations.

Two spellings are read for each input:

- ASTRA-sim's own files, so the same files drive this simulator and the reference binaries:
  the analytical network YAML (``topology: [ Ring ]``, ``npus_count: [ 8 ]``,
  ``bandwidth: [ 50.0 ]``, ``latency: [ 500.0 ]``), the system JSON with dashed keys
  (``"preferred-dataset-splits": 4``) and the communicator-group JSON
  (``{"1": [0, 1, 2, 3]}``);
- the project's own YAML (or JSON) form: the pydantic field names of the models below,
  which is also what ``model_dump_yaml()`` writes.

Units follow ASTRA-sim exactly (docs/simulator.md, 'Units and ticks'): times are ns,
network bandwidth is GB/s with 1 GB = 2**30 B, the system's ``local-mem-bw`` is decimal
GB/s (x 1e9) and ``peak-perf`` is TFLOP/s (x 1e12).

Every loader takes any fsspec URL or local path. Bad input raises ``ConfigError`` (a
``ChakraError``) naming the file and the key, never a bare pydantic or YAML exception.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal, NoReturn

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

from chakra_core import limits
from chakra_core.documents import ConfigError, read_document
from chakra_core.sim.gpumodel import DeviceTiming, HostOverhead  # noqa: F401  (SystemConfig's fields, re-exported)

__all__ = [
    "ASTRA_SIM_IGNORED_SYSTEM_KEYS",
    "ASTRA_SIM_NETWORK_KEYS",
    "ASTRA_SIM_SYSTEM_KEYS",
    "CHAKRA_SYSTEM_KEYS",
    "CollectiveImpl",
    "ConfigError",
    "NetworkConfig",
    "NetworkDim",
    "RemoteMemoryConfig",
    "SystemConfig",
    "Topology",
    "load_network",
    "network_from_document",
    "load_remote_memory",
    "load_system",
    "system_from_document",
]

GIB = 2**30  # ASTRA-sim's network "GB" (GB/s in the network YAML)


# ---------------------------------------------------------------------------------------------
# Network


class Topology(str, Enum):
    """Topology of one network dimension (the names of ASTRA-sim's network YAML, case-sensitive)."""

    RING = "Ring"  # bidirectional ring; hops = the shorter way round
    FULLY_CONNECTED = "FullyConnected"  # one hop between any two NPUs
    SWITCH = "Switch"  # two hops (NPU -> switch -> NPU): latency twice, serialization once


def _within_limit(name: str):
    """A pydantic validator refusing numbers over a limit of chakra_core/limits.py: they would
    make the simulator allocate per chunk, queue or NPU without bound."""
    def check(value: int) -> int:
        most = limits.value(name)
        if value > most:
            raise ValueError(f"{value:,} is over the limit of {most:,} {limits.LIMITS[name].what}; raise "
                             f"{limits.LIMITS[name].env} if it is genuine")
        return value
    return check


def _no_bool(value: Any) -> Any:
    """pydantic's lax mode takes True/False as 1/0; a boolean where a number belongs is a mistake.
    (Strings stay allowed: YAML 1.1 reads an unquoted 1e-3 as one.)"""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {value!r}")
    return value


class _ConfigModel(BaseModel):
    """Frozen, no unknown fields; dumps the project's YAML form."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_dump_yaml(self) -> str:
        """This config in the project's own YAML form (what the loaders read back to an equal object)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


MAX_LATENCY_NS, MAX_BANDWIDTH_GBPS = 1e12, 1e9  # 1,000 s per hop: beyond any network, inside int64 times


class NetworkDim(_ConfigModel):
    """One dimension of the analytical network."""

    topology: Topology = Field(description="Ring, FullyConnected or Switch.")
    npus: int = Field(ge=1, description="NPUs in this dimension (ASTRA-sim: npus_count).")
    bandwidth_gbps: float = Field(
        gt=0, le=MAX_BANDWIDTH_GBPS, allow_inf_nan=False,
        description="Link bandwidth in GB/s with 1 GB = 2**30 B, as ASTRA-sim reads it (ASTRA-sim: bandwidth).")
    latency_ns: float = Field(  # bounded: 1e308 overflowed the simulator's integer times
        ge=0, le=MAX_LATENCY_NS, allow_inf_nan=False, description="Latency per hop in ns (ASTRA-sim: latency).")

    _check_numbers = field_validator("npus", "bandwidth_gbps", "latency_ns", mode="before")(_no_bool)
    _check_npus = field_validator("npus")(_within_limit("npus"))

    @property
    def bytes_per_ns(self) -> float:
        """Link bandwidth in B/ns, computed as ASTRA-sim does: ``bandwidth_gbps * 2**30 / 1e9``.

        50 GB/s gives 53.6870912 B/ns.
        """
        return self.bandwidth_gbps * GIB / 1e9


class NetworkConfig(_ConfigModel):
    """A multi-dimensional analytical network: NPU ids are mixed-radix over ``dims``, dim 0 fastest."""

    dims: tuple[NetworkDim, ...] = Field(min_length=1, description="The dimensions, innermost (dim 0) first.")

    @property
    def npus(self) -> int:
        """Total NPUs: the product of every dimension's NPU count."""
        return math.prod(d.npus for d in self.dims)

    @model_validator(mode="after")
    def _total_npus_within_limit(self) -> NetworkConfig:
        _within_limit("npus")(self.npus)
        return self

    def coords(self, npu: int) -> tuple[int, ...]:
        """The per-dimension index of NPU ``npu`` (mixed radix, dim 0 fastest): on [4, 4], 5 -> (1, 1)."""
        if not 0 <= npu < self.npus:
            raise ValueError(f"NPU id {npu} out of range for a network of {self.npus} NPUs")
        out = []
        for d in self.dims:
            npu, index = divmod(npu, d.npus)
            out.append(index)
        return tuple(out)

    def npu_id(self, coords: tuple[int, ...]) -> int:
        """The inverse of ``coords``."""
        if len(coords) != len(self.dims):
            raise ValueError(f"{len(coords)} coordinates for a {len(self.dims)}-dimensional network")
        npu, stride = 0, 1
        for c, d in zip(coords, self.dims):
            if not 0 <= c < d.npus:
                raise ValueError(f"coordinate {c} out of range for a dimension of {d.npus} NPUs")
            npu += c * stride
            stride *= d.npus
        return npu

    def to_astra_sim_yaml(self) -> str:
        """This network as an ASTRA-sim analytical network YAML (for running the reference binaries)."""
        def row(values: list) -> str:
            return "[ " + ", ".join(str(v) for v in values) + " ]"
        return (f"topology: {row([d.topology.value for d in self.dims])}\n"
                f"npus_count: {row([d.npus for d in self.dims])}\n"
                f"bandwidth: {row([float(d.bandwidth_gbps) for d in self.dims])}  # GB/s\n"
                f"latency: {row([float(d.latency_ns) for d in self.dims])}  # ns\n")


#: ASTRA-sim network YAML key -> NetworkDim field. Each key holds one list entry per dimension.
ASTRA_SIM_NETWORK_KEYS: dict[str, str] = {
    "topology": "topology",
    "npus_count": "npus",
    "bandwidth": "bandwidth_gbps",
    "latency": "latency_ns",
}


# ---------------------------------------------------------------------------------------------
# Collective implementations


_IMPL_RE = re.compile(r"(ring|oneRing|direct|oneDirect|halvingDoubling|oneHalvingDoubling|doubleBinaryTree)(\d*)")
_ACCEPTED_IMPLS = ("ring, oneRing, direct, directK (window K >= 1, e.g. direct3), oneDirect, oneDirectK, "
                   "halvingDoubling, oneHalvingDoubling, doubleBinaryTree")


@dataclass(frozen=True)
class CollectiveImpl:
    """A parsed ASTRA-sim collective implementation name, one per logical dimension.

    ``kind`` is the name without a window; ``window`` is K of ``directK``/``oneDirectK``
    (messages in flight per phase) or None for every other name, where plain ``direct``
    means a window of N-1. The ``one*`` kinds build a single ring (or direct/halving-doubling
    group) of all NPUs, timed with dim 0's parameters.
    """

    KINDS: ClassVar[tuple[str, ...]] = (
        "ring", "oneRing", "direct", "oneDirect", "halvingDoubling", "oneHalvingDoubling", "doubleBinaryTree")

    kind: str
    window: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown collective implementation kind {self.kind!r}; accepted: {', '.join(self.KINDS)}")
        if self.window is not None:
            if self.kind not in ("direct", "oneDirect"):
                raise ValueError(f"only direct and oneDirect take a window, not {self.kind!r}")
            if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
                raise ValueError(f"the window of {self.kind!r} must be an integer >= 1, not {self.window!r}")

    @classmethod
    def parse(cls, name: str) -> CollectiveImpl:
        """``"ring"`` -> ring; ``"direct3"`` -> direct with window 3; unknown names raise ValueError."""
        match = _IMPL_RE.fullmatch(name) if isinstance(name, str) else None
        if match is None:
            raise ValueError(f"unknown collective implementation {name!r}; accepted: {_ACCEPTED_IMPLS}")
        kind, digits = match.groups()
        if digits and kind not in ("direct", "oneDirect"):
            raise ValueError(f"unknown collective implementation {name!r}; accepted: {_ACCEPTED_IMPLS}")
        window = int(digits) if digits else None
        if window is not None and window < 1:
            raise ValueError(f"collective implementation {name!r}: the window must be >= 1")
        return cls(kind, window)

    @property
    def name(self) -> str:
        """The ASTRA-sim spelling: ``ring``, ``direct``, ``direct3``..."""
        return self.kind if self.window is None else f"{self.kind}{self.window}"

    @property
    def algorithm(self) -> str:
        """The algorithm without the ``one`` prefix: ring, direct, halvingDoubling or doubleBinaryTree."""
        return self.kind[3].lower() + self.kind[4:] if self.kind.startswith("one") else self.kind

    @property
    def spans_all_npus(self) -> bool:
        """True for the ``one*`` kinds: one group of every NPU instead of one per dimension."""
        return self.kind.startswith("one")

    def __str__(self) -> str:
        return self.name

    @classmethod
    def _validate(cls, value: Any) -> CollectiveImpl:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        raise ValueError(f"expected a collective implementation name, got {value!r}")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        # Validates from the name (or an instance); serializes to the name.
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^{_IMPL_RE.pattern}$"}


# ---------------------------------------------------------------------------------------------
# System


#: A system file for GPU traces recorded with the usual PyTorch recipe when no unprofiled steps
#: were timed: ASTRA-sim's reference ring system with the host-overhead model `chakra calibrate`
#: fitted on the shipped H200 runs gpt and mlp_tiny (docs/gpu.md).
DEFAULT_HOST_OVERHEAD_SYSTEM = str(Path(__file__).parent / "defaults" / "gpu_host_overhead.json")


class SystemConfig(_ConfigModel):
    """The system layer: chunking, scheduling, collective algorithms, local memory, roofline.

    Besides the system JSON's keys it holds two of ASTRA-sim's command-line options that
    change timing (``num_queues_per_dim``, ``injection_scale``), so one object says
    everything; they are not part of ASTRA-sim's system JSON.
    """

    scheduling_policy: Literal["LIFO", "FIFO", "EXPLICIT"] = Field(
        "LIFO", description="Stream priority order: LIFO counts priorities up, FIFO down, "
                            "EXPLICIT uses the node's comm_priority (ASTRA-sim: scheduling-policy).")
    endpoint_delay_ns: int = Field(
        10, ge=0, description="Delay before each packet can be sent, in ns, before injection_scale "
                              "(ASTRA-sim: endpoint-delay, default 10). See endpoint_delay.")
    active_chunks_per_dim: int = Field(
        1, ge=1, description="Chunks that may run at once in one dimension, shared by its queues "
                             "(ASTRA-sim: active-chunks-per-dimension, default 1).")
    dataset_splits: int = Field(
        ge=1, description="Chunks per collective: chunk = floor(size / splits) "
                          "(ASTRA-sim: preferred-dataset-splits; no default, must be given).")
    collective_optimization: Literal["baseline", "localBWAware"] = Field(
        "localBWAware", description="All-reduce phase plan: localBWAware = RS up, AR on the last dim, "
                                    "AG down; baseline = AR on every dim (ASTRA-sim: collective-optimization).")
    local_mem_bw_gbps: float = Field(
        gt=0, allow_inf_nan=False,
        description="Local memory bandwidth in decimal GB/s (x 1e9 B/s); local reduction of x bytes takes "
                    "3 * floor(x / (bw * 1e9) * 1e9) ns (ASTRA-sim: local-mem-bw).")
    all_reduce: tuple[CollectiveImpl, ...] = Field(
        min_length=1, description="All-reduce implementation per logical dimension (ASTRA-sim: "
                                  "all-reduce-implementation). Network dims without an entry are not used.")
    all_gather: tuple[CollectiveImpl, ...] = Field(
        min_length=1, description="All-gather implementation per logical dimension "
                                  "(ASTRA-sim: all-gather-implementation).")
    reduce_scatter: tuple[CollectiveImpl, ...] = Field(
        min_length=1, description="Reduce-scatter implementation per logical dimension "
                                  "(ASTRA-sim: reduce-scatter-implementation).")
    all_to_all: tuple[CollectiveImpl, ...] = Field(
        min_length=1, description="All-to-all implementation per logical dimension "
                                  "(ASTRA-sim: all-to-all-implementation).")
    roofline_enabled: bool = Field(
        False, description="Time compute nodes with the roofline model (ASTRA-sim: roofline-enabled).")
    peak_perf_tflops: float = Field(
        0, ge=0, allow_inf_nan=False, description="Peak compute in TFLOP/s (x 1e12) for the roofline "
                                                  "(ASTRA-sim: peak-perf).")
    replay_only: bool = Field(
        False, description="Compute nodes take their recorded duration (ASTRA-sim: replay-only).")
    call_time_in_network: bool = Field(
        False, description="The network's times include each communication call's own time on the runtime it was "
                           "fitted to (chakra calibrate writes it): CPU nodes holding a recorded call's own duration "
                           "(gloo:<op>, docs/ingestion.md) take no time, else it would count twice (chakra extension "
                           "call-time-in-network; ASTRA-sim ignores the key).")
    host_overhead: HostOverhead | None = Field(
        None, description="The profiler's cost taken out of recorded host time (chakra extension host-overhead, "
                          "fitted by chakra calibrate; ASTRA-sim ignores the key). None: CPU nodes take their "
                          "recorded durations, the profiler's cost included.")
    device_timing: DeviceTiming | None = Field(
        None, description="Launch latency and back-to-back gaps added to device compute nodes (chakra extension "
                          "device-timing, measured by chakra calibrate; ASTRA-sim ignores the key). None: device "
                          "work starts as soon as its dependencies and its slot allow.")
    num_queues_per_dim: int = Field(
        1, ge=1, description="Queues per network dimension (ASTRA-sim CLI --num-queues-per-dim, default 1); "
                             "each runs ceil(active_chunks_per_dim / Q) streams at once.")
    injection_scale: float = Field(
        1.0, ge=0, allow_inf_nan=False,
        description="Multiplies endpoint_delay_ns, truncated to an int (ASTRA-sim CLI --injection-scale, default 1).")

    _check_numbers = field_validator(
        "endpoint_delay_ns", "active_chunks_per_dim", "dataset_splits", "local_mem_bw_gbps",
        "peak_perf_tflops", "num_queues_per_dim", "injection_scale", mode="before")(_no_bool)
    _check_chunks = field_validator("dataset_splits", "active_chunks_per_dim", "num_queues_per_dim")(
        _within_limit("chunks"))

    @model_validator(mode="after")
    def _roofline_needs_peak(self) -> SystemConfig:
        if self.roofline_enabled and self.peak_perf_tflops <= 0:
            raise ValueError("roofline_enabled (ASTRA-sim: roofline-enabled) needs peak_perf_tflops (peak-perf) > 0")
        return self

    @property
    def endpoint_delay(self) -> int:
        """The effective endpoint delay e in ns: ``int(endpoint_delay_ns * injection_scale)``, truncated
        as ASTRA-sim stores it (10 with scale 2.5 gives 25)."""
        return int(self.endpoint_delay_ns * self.injection_scale)

    @property
    def local_mem_bw_bytes_per_s(self) -> float:
        """``local_mem_bw_gbps * 1e9``."""
        return self.local_mem_bw_gbps * 1e9

    @property
    def peak_perf_flops(self) -> float:
        """``peak_perf_tflops * 1e12``."""
        return self.peak_perf_tflops * 1e12

    def to_astra_sim_json(self) -> str:
        """This system as an ASTRA-sim system JSON. ``num_queues_per_dim`` and ``injection_scale`` are
        ASTRA-sim command-line options and are not written."""
        data = self.model_dump(mode="json")
        out = {key: data[field] for key, field in ASTRA_SIM_SYSTEM_KEYS.items()}
        out["roofline-enabled"] = int(out["roofline-enabled"])
        out["replay-only"] = int(out["replay-only"])
        if self.call_time_in_network:
            out["call-time-in-network"] = 1
        if self.host_overhead is not None:
            out["host-overhead"] = data["host_overhead"]
        if self.device_timing is not None:
            out["device-timing"] = data["device_timing"]
        return json.dumps(out, indent=4) + "\n"


#: ASTRA-sim system JSON key -> SystemConfig field, for the keys ASTRA-sim reads and this model uses.
ASTRA_SIM_SYSTEM_KEYS: dict[str, str] = {
    "scheduling-policy": "scheduling_policy",
    "endpoint-delay": "endpoint_delay_ns",
    "active-chunks-per-dimension": "active_chunks_per_dim",
    "preferred-dataset-splits": "dataset_splits",
    "collective-optimization": "collective_optimization",
    "local-mem-bw": "local_mem_bw_gbps",
    "all-reduce-implementation": "all_reduce",
    "all-gather-implementation": "all_gather",
    "reduce-scatter-implementation": "reduce_scatter",
    "all-to-all-implementation": "all_to_all",
    "roofline-enabled": "roofline_enabled",
    "peak-perf": "peak_perf_tflops",
    "replay-only": "replay_only",
}

#: System JSON keys of this project's own, beside ASTRA-sim's (which ignores keys it does not know).
CHAKRA_SYSTEM_KEYS: dict[str, str] = {
    "call-time-in-network": "call_time_in_network",
    "host-overhead": "host_overhead",
    "device-timing": "device_timing",
}

#: System JSON keys ASTRA-sim accepts that change no simulated time in the analytical model;
#: they are accepted and ignored. Any other unknown key is an error (a typo must not pass).
ASTRA_SIM_IGNORED_SYSTEM_KEYS: frozenset[str] = frozenset({
    "boost-mode",                # never read by ASTRA-sim
    "L", "o", "g", "G",          # LogGP parameters, used only by the shared-bus path (model-shared-bus = 1)
    "model-shared-bus",          # must be 0 (or absent): 1 turns on the shared-bus path, not modelled here
    "local-reduction-delay",     # shared-bus path only
    "trace-enabled",             # logging only
    "track-local-mem",           # memory-usage reporting only
    "local-mem-trace-filename",  # where track-local-mem writes its report
})


# ---------------------------------------------------------------------------------------------
# Remote memory


class RemoteMemoryConfig(_ConfigModel):
    """ASTRA-sim's remote-memory configuration. Only ``NO_MEMORY_EXPANSION`` is modelled."""

    memory_type: Literal["NO_MEMORY_EXPANSION"] = Field(
        "NO_MEMORY_EXPANSION", description="ASTRA-sim: memory-type. The expansion types are not modelled.")


# ---------------------------------------------------------------------------------------------
# Loading


def _loc_text(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _raise_invalid(path: str, err: ValidationError, key_of=_loc_text) -> NoReturn:
    """A ConfigError for every problem pydantic found, keyed as the file spells the keys."""
    problems = []
    errors = err.errors(include_url=False)
    for e in errors:
        loc = tuple(e["loc"])
        # pydantic also calls a list "too short" when its items failed; the item errors say it all.
        if e["type"] == "too_short" and any(
                len(o["loc"]) > len(loc) and tuple(o["loc"][:len(loc)]) == loc for o in errors):
            continue
        key = key_of(loc) or None
        if e["type"] == "missing":
            msg = "missing (required)"
        elif e["type"] == "value_error":  # raised by this module; the message names the value
            msg = e["msg"].removeprefix("Value error, ")
        else:
            msg = e["msg"]
            if "input" in e and not isinstance(e["input"], (dict, list, tuple)):
                msg += f" (got {e['input']!r})"
        problems.append((key, msg))
    key, msg = problems[0]
    if len(problems) > 1:
        msg += "; also " + "; ".join(f"{k}: {m}" if k else m for k, m in problems[1:])
    raise ConfigError(path, key, msg) from None


def load_network(url: Any) -> NetworkConfig:
    """A network from an ASTRA-sim analytical YAML or the project's YAML form (told apart by its keys).

    ASTRA-sim form: ``topology``, ``npus_count``, ``bandwidth`` (GB/s, 1 GB = 2**30 B) and
    ``latency`` (ns), lists of one entry per dimension, all of the same length.
    Project form: ``dims: [{topology: Ring, npus: 8, bandwidth_gbps: 50, latency_ns: 500}]``.
    """
    return network_from_document(*read_document(url))


def network_from_document(path: str, data: Any) -> NetworkConfig:
    """load_network on a parsed document; `path` names it in errors."""
    if any("-" in str(k) for k in data) and not ("dims" in data or "topology" in data):
        raise ConfigError(path, None, "this is a system file (ASTRA-sim's dashed keys); a network file is expected "
                          "here (topology, npus_count, bandwidth, latency: ASTRA-sim's network YAML)")
    if "dims" in data:
        try:
            return NetworkConfig.model_validate(data)
        except ValidationError as err:
            _raise_invalid(path, err)

    unknown = [k for k in data if k not in ASTRA_SIM_NETWORK_KEYS]
    if unknown:
        raise ConfigError(path, str(unknown[0]), "unknown key; an ASTRA-sim network file has "
                          f"{', '.join(ASTRA_SIM_NETWORK_KEYS)} (or the project form has dims)")
    for key in ASTRA_SIM_NETWORK_KEYS:
        if key not in data:
            raise ConfigError(path, key, "missing (required: " + ", ".join(ASTRA_SIM_NETWORK_KEYS) + ")")
        if not isinstance(data[key], list):
            raise ConfigError(path, key, f"expected a list with one entry per dimension, got {data[key]!r}")
    count = len(data["topology"])
    if count == 0:
        raise ConfigError(path, "topology", "empty: a network needs at least one dimension")
    for key in ASTRA_SIM_NETWORK_KEYS:
        if len(data[key]) != count:
            raise ConfigError(path, key, f"has {len(data[key])} entries but topology has {count}: "
                              "every key needs one entry per dimension")
    dims = [{field: data[key][i] for key, field in ASTRA_SIM_NETWORK_KEYS.items()} for i in range(count)]
    field_to_key = {field: key for key, field in ASTRA_SIM_NETWORK_KEYS.items()}

    def key_of(loc: tuple) -> str:
        if len(loc) >= 3 and loc[0] == "dims" and loc[2] in field_to_key:
            return f"{field_to_key[loc[2]]}[{loc[1]}]"
        return _loc_text(loc)

    try:
        return NetworkConfig.model_validate({"dims": dims})
    except ValidationError as err:
        _raise_invalid(path, err, key_of)


def load_system(url: Any) -> SystemConfig:
    """A system from an ASTRA-sim system JSON (dashed keys) or the project's YAML/JSON form (field names).

    In the ASTRA-sim form the keys of ``ASTRA_SIM_IGNORED_SYSTEM_KEYS`` are accepted and
    ignored (``model-shared-bus`` only when 0), and any other key not in
    ``ASTRA_SIM_SYSTEM_KEYS`` is an error. ``num_queues_per_dim`` and ``injection_scale``
    keep their defaults there (they are ASTRA-sim command-line options); to set them, use
    ``config.model_copy(update=...)`` or the project form.
    """
    return system_from_document(*read_document(url))


def system_from_document(path: str, data: Any) -> SystemConfig:
    """load_system on a parsed document; `path` names it in errors."""
    if "dims" in data or "topology" in data:  # the commonest mix-up: the two files of a simulation swapped
        raise ConfigError(path, None, "this is a network file (topology, bandwidth, latency); a system file is "
                          "expected here (collective algorithms, chunks, overheads: ASTRA-sim's system JSON)")
    if not any("-" in str(k) for k in data):
        try:
            return SystemConfig.model_validate(data)
        except ValidationError as err:
            _raise_invalid(path, err)

    fields = {}
    for key, value in data.items():
        if key in ASTRA_SIM_SYSTEM_KEYS or key in CHAKRA_SYSTEM_KEYS:
            fields[ASTRA_SIM_SYSTEM_KEYS.get(key) or CHAKRA_SYSTEM_KEYS[key]] = value
        elif key == "model-shared-bus":
            if value == 1:
                raise ConfigError(path, key, "1 turns on ASTRA-sim's LogGP shared-bus path, which this "
                                  "model does not cover; use 0 or leave the key out")
        elif key not in ASTRA_SIM_IGNORED_SYSTEM_KEYS:
            raise ConfigError(path, str(key), "unknown key (a typo?); ASTRA-sim system keys: "
                              + ", ".join([*ASTRA_SIM_SYSTEM_KEYS, *sorted(ASTRA_SIM_IGNORED_SYSTEM_KEYS),
                                           *CHAKRA_SYSTEM_KEYS]))
    field_to_key = {field: key for key, field in {**ASTRA_SIM_SYSTEM_KEYS, **CHAKRA_SYSTEM_KEYS}.items()}

    def key_of(loc: tuple) -> str:
        if loc and loc[0] in field_to_key:
            return _loc_text((field_to_key[loc[0]], *loc[1:]))
        return _loc_text(loc)

    try:
        return SystemConfig.model_validate(fields)
    except ValidationError as err:
        _raise_invalid(path, err, key_of)


def load_remote_memory(url: Any) -> RemoteMemoryConfig:
    """ASTRA-sim's remote-memory JSON (``{"memory-type": "NO_MEMORY_EXPANSION"}``) or the project form."""
    path, data = read_document(url)
    if "memory-type" in data:
        unknown = [k for k in data if k != "memory-type"]
        if data["memory-type"] != "NO_MEMORY_EXPANSION":
            raise ConfigError(path, "memory-type", f"{data['memory-type']!r} is not modelled; "
                              "only NO_MEMORY_EXPANSION is")
        if unknown:
            raise ConfigError(path, str(unknown[0]), "not used with NO_MEMORY_EXPANSION")
        return RemoteMemoryConfig()
    try:
        return RemoteMemoryConfig.model_validate(data)
    except ValidationError as err:
        _raise_invalid(path, err)
