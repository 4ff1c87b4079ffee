"""Simulator configs: ASTRA-sim's network/system/comm-group files and the project's YAML form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datapaths import REFERENCE_CONFIGS

from chakra_core import ChakraError
from chakra_core.format.job import read_comm_groups
from chakra_core.sim.config import (
    ASTRA_SIM_IGNORED_SYSTEM_KEYS,
    CollectiveImpl,
    ConfigError,
    NetworkConfig,
    NetworkDim,
    SystemConfig,
    Topology,
    load_network,
    load_remote_memory,
    load_system,
)

CONFIGS = REFERENCE_CONFIGS

RING_4CHUNKS = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "all-reduce-implementation": ["ring"],
    "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"],
    "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
    "boost-mode": 0,
    "roofline-enabled": 0,
    "peak-perf": 900,
}


@pytest.fixture
def configs() -> Path:
    return CONFIGS


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _system_file(tmp_path: Path, name: str = "sys.json", **changes) -> str:
    data = dict(RING_4CHUNKS)
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return _write(tmp_path, name, json.dumps(data))


def _config_error(loader, url: str, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        loader(url)
    text = str(info.value)
    assert Path(url).name in text, text
    for fragment in fragments:
        assert fragment in text, text
    return info.value


# --- the reference files ------------------------------------------------------------------------


@pytest.mark.parametrize("name, topology, npus", [
    ("Ring_4npus.yml", Topology.RING, 4),
    ("Ring_8npus.yml", Topology.RING, 8),
    ("FullyConnected_4npus.yml", Topology.FULLY_CONNECTED, 4),
    ("FullyConnected_8npus.yml", Topology.FULLY_CONNECTED, 8),
    ("Switch_4npus.yml", Topology.SWITCH, 4),
    ("Switch_8npus.yml", Topology.SWITCH, 8),
])
def test_reference_network_files(configs, name, topology, npus):
    net = load_network(configs / name)
    assert len(net.dims) == 1
    (dim,) = net.dims
    assert (dim.topology, dim.npus, dim.bandwidth_gbps, dim.latency_ns) == (topology, npus, 50.0, 500.0)
    assert net.npus == npus
    assert dim.bytes_per_ns == pytest.approx(53.6870912, abs=1e-9)


def test_reference_system_file(configs):
    sys = load_system(configs / "Ring_4chunks.json")
    ring = (CollectiveImpl("ring"),)
    assert sys.scheduling_policy == "LIFO"
    assert sys.endpoint_delay_ns == 10 and sys.endpoint_delay == 10
    assert sys.active_chunks_per_dim == 1
    assert sys.dataset_splits == 4
    assert sys.all_reduce == sys.all_gather == sys.reduce_scatter == sys.all_to_all == ring
    assert sys.collective_optimization == "localBWAware"
    assert sys.local_mem_bw_gbps == 1600 and sys.local_mem_bw_bytes_per_s == 1.6e12
    assert sys.roofline_enabled is False
    assert sys.peak_perf_tflops == 900 and sys.peak_perf_flops == 9e14
    assert sys.replay_only is False
    assert (sys.num_queues_per_dim, sys.injection_scale) == (1, 1.0)


def test_reference_memory_file(configs):
    assert load_remote_memory(configs / "no_memory_expansion.json").memory_type == "NO_MEMORY_EXPANSION"


def test_every_reference_file_is_covered(configs):
    loaders = {".yml": load_network, ".json": load_system}
    for path in sorted(configs.iterdir()):
        if path.name == "no_memory_expansion.json":
            continue
        assert loaders[path.suffix](path) is not None


# --- network --------------------------------------------------------------------------------------


def test_multi_dimensional_network_and_coords(tmp_path):
    url = _write(tmp_path, "net2d.yml", "topology: [ Ring, Switch ]  # two dims\nnpus_count: [ 4, 4 ]\n"
                                        "bandwidth: [ 200, 50.0 ]  # GB/s\nlatency: [ 500.0, 1000 ]  # ns\n")
    net = load_network(url)
    assert [d.topology for d in net.dims] == [Topology.RING, Topology.SWITCH]
    assert [d.npus for d in net.dims] == [4, 4]
    assert [d.bandwidth_gbps for d in net.dims] == [200.0, 50.0]
    assert [d.latency_ns for d in net.dims] == [500.0, 1000.0]
    assert net.npus == 16
    assert net.coords(5) == (1, 1)
    assert net.coords(0) == (0, 0) and net.coords(3) == (3, 0) and net.coords(15) == (3, 3)
    assert all(net.npu_id(net.coords(i)) == i for i in range(16))
    assert net.dims[0].bytes_per_ns == pytest.approx(429.4967296 / 2, abs=1e-9)
    with pytest.raises(ValueError):
        net.coords(16)


def test_mixed_radix_three_dims():
    net = NetworkConfig(dims=[NetworkDim(topology="Ring", npus=n, bandwidth_gbps=1, latency_ns=0) for n in (2, 3, 4)])
    assert net.npus == 24
    assert net.coords(1 + 2 * 2 + 6 * 3) == (1, 2, 3)


@pytest.mark.parametrize("text, fragments", [
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\n", ["latency", "missing"]),
    ("topology: [ Ring, Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0, 50.0 ]\nlatency: [ 1, 1 ]\n",
     ["npus_count", "1 entries", "topology has 2"]),
    ("topology: [ Torus ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n", ["topology[0]", "Torus"]),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 0 ]\nlatency: [ 500.0 ]\n", ["bandwidth[0]", "greater than 0"]),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ .nan ]\nlatency: [ 500.0 ]\n", ["bandwidth", "not a finite"]),
    ("topology: [ Ring ]\nnpus_count: [ 0 ]\nbandwidth: [ 5 ]\nlatency: [ 500.0 ]\n", ["npus_count[0]"]),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 5 ]\nlatency: [ -1 ]\n", ["latency[0]"]),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwith: [ 5 ]\nlatency: [ 1 ]\n", ["bandwith", "unknown key"]),
    ("topology: Ring\nnpus_count: [ 8 ]\nbandwidth: [ 5 ]\nlatency: [ 1 ]\n", ["topology", "list"]),
    ("dims: [ {topology: Ring, npus: 8, bandwidth_gbps: 50} ]\n", ["dims[0].latency_ns", "missing"]),
    ("dims: [ {topology: Ring, npus: 8, bandwidth_gbps: 50, latency_ns: 1, extra: 2} ]\n", ["dims[0].extra"]),
    ("[1, 2]\n", ["mapping"]),
    ("topology: [ Ring\n", ["YAML"]),
])
def test_bad_network_files(tmp_path, text, fragments):
    err = _config_error(load_network, _write(tmp_path, "bad_net.yml", text), *fragments)
    assert isinstance(err, ChakraError)


def test_missing_file_is_a_config_error(tmp_path):
    _config_error(load_network, str(tmp_path / "absent.yml"), "cannot read")


def test_network_round_trip_and_astra_form(tmp_path):
    net = NetworkConfig(dims=(NetworkDim(topology=Topology.RING, npus=4, bandwidth_gbps=200, latency_ns=500),
                              NetworkDim(topology=Topology.SWITCH, npus=2, bandwidth_gbps=12.5, latency_ns=0.25)))
    assert load_network(_write(tmp_path, "own.yml", net.model_dump_yaml())) == net
    assert load_network(_write(tmp_path, "astra.yml", net.to_astra_sim_yaml())) == net


def test_network_is_frozen():
    dim = NetworkDim(topology="Ring", npus=8, bandwidth_gbps=50, latency_ns=500)
    with pytest.raises(Exception):
        dim.npus = 4


def test_network_loads_from_fsspec_memory(memfs):
    with memfs.open("/cfg/net.yml", "w") as f:
        f.write("topology: [ FullyConnected ]\nnpus_count: [ 2 ]\nbandwidth: [ 1 ]\nlatency: [ 0 ]\n")
    assert load_network("memory://cfg/net.yml").dims[0].topology is Topology.FULLY_CONNECTED


# --- collective implementations ---------------------------------------------------------------------


@pytest.mark.parametrize("name, kind, window", [
    ("ring", "ring", None), ("oneRing", "oneRing", None), ("direct", "direct", None),
    ("direct3", "direct", 3), ("oneDirect", "oneDirect", None), ("oneDirect12", "oneDirect", 12),
    ("halvingDoubling", "halvingDoubling", None), ("oneHalvingDoubling", "oneHalvingDoubling", None),
    ("doubleBinaryTree", "doubleBinaryTree", None),
])
def test_collective_impl_names(name, kind, window):
    impl = CollectiveImpl.parse(name)
    assert (impl.kind, impl.window) == (kind, window)
    assert impl.name == str(impl) == name
    assert impl.spans_all_npus == name.startswith("one")


def test_collective_impl_algorithm():
    assert CollectiveImpl.parse("oneHalvingDoubling").algorithm == "halvingDoubling"
    assert CollectiveImpl.parse("oneDirect4").algorithm == "direct"
    assert CollectiveImpl.parse("ring").algorithm == "ring"


@pytest.mark.parametrize("name", ["Ring", "ring2", "direct0", "directx", "hierarchicalRing", "", "direct-1"])
def test_bad_collective_impl_names(name):
    with pytest.raises(ValueError) as info:
        CollectiveImpl.parse(name)
    assert repr(name) in str(info.value)
    if not name.startswith("direct"):
        assert "halvingDoubling" in str(info.value)  # the accepted names are listed


# --- system -----------------------------------------------------------------------------------------


def test_system_implementation_lists(tmp_path):
    url = _system_file(tmp_path, all_reduce_implementation=["ring", "direct3"],
                       all_to_all_implementation=["oneDirect", "halvingDoubling"])
    sys = load_system(url)
    assert sys.all_reduce == (CollectiveImpl("ring"), CollectiveImpl("direct", 3))
    assert sys.all_to_all == (CollectiveImpl("oneDirect"), CollectiveImpl("halvingDoubling"))


def test_system_defaults_when_keys_absent(tmp_path):
    url = _system_file(tmp_path, scheduling_policy=None, endpoint_delay=None, active_chunks_per_dimension=None,
                       collective_optimization=None, roofline_enabled=None, peak_perf=None, boost_mode=None)
    sys = load_system(url)
    assert (sys.scheduling_policy, sys.endpoint_delay_ns, sys.active_chunks_per_dim) == ("LIFO", 10, 1)
    assert (sys.collective_optimization, sys.roofline_enabled, sys.peak_perf_tflops) == ("localBWAware", False, 0)


def test_ignored_system_keys_are_accepted(tmp_path):
    extra = {key: 0 for key in ASTRA_SIM_IGNORED_SYSTEM_KEYS}
    extra["local-mem-trace-filename"] = "trace.json"
    data = {**RING_4CHUNKS, **extra}
    assert load_system(_write(tmp_path, "sys.json", json.dumps(data))) == load_system(
        _write(tmp_path, "plain.json", json.dumps(RING_4CHUNKS)))


@pytest.mark.parametrize("changes, fragments", [
    ({"preferred_dataset_splits": None}, ["preferred-dataset-splits", "missing"]),
    ({"local_mem_bw": None}, ["local-mem-bw", "missing"]),
    ({"all_gather_implementation": None}, ["all-gather-implementation", "missing"]),
    ({"all_reduce_implementation": ["ring", "rnig"]}, ["all-reduce-implementation[1]", "'rnig'", "doubleBinaryTree"]),
    ({"scheduling_policy": "RANDOM"}, ["scheduling-policy", "RANDOM"]),
    ({"collective_optimization": "fast"}, ["collective-optimization"]),
    ({"endpoint_delay": 2.5}, ["endpoint-delay"]),
    ({"preferred_dataset_splits": 0}, ["preferred-dataset-splits"]),
    ({"roofline_enabled": 1, "peak_perf": 0}, ["roofline-enabled", "peak-perf"]),
    ({"model_shared_bus": 1}, ["model-shared-bus", "shared-bus"]),
])
def test_bad_system_files(tmp_path, changes, fragments):
    _config_error(load_system, _system_file(tmp_path, "bad_sys.json", **changes), *fragments)


def test_unknown_system_key_is_an_error(tmp_path):
    data = {**RING_4CHUNKS, "endpoint-dealy": 20}
    _config_error(load_system, _write(tmp_path, "typo.json", json.dumps(data)), "endpoint-dealy", "unknown key")


def test_memory_file_is_not_a_system_file(configs):
    _config_error(load_system, str(configs / "no_memory_expansion.json"), "memory-type", "unknown key")


def test_injection_scale_truncates():
    sys = load_system_dict(injection_scale=2.5)
    assert sys.endpoint_delay == 25
    assert load_system_dict(injection_scale=0.35).endpoint_delay == 3  # 3.5 truncated
    assert load_system_dict(endpoint_delay_ns=7, injection_scale=1.5).endpoint_delay == 10  # 10.5


def load_system_dict(**changes) -> SystemConfig:
    base = dict(dataset_splits=4, local_mem_bw_gbps=1600, all_reduce=["ring"], all_gather=["ring"],
                reduce_scatter=["ring"], all_to_all=["ring"])
    return SystemConfig.model_validate({**base, **changes})


def test_system_project_form_round_trip(tmp_path):
    sys = load_system_dict(scheduling_policy="FIFO", endpoint_delay_ns=100, active_chunks_per_dim=2,
                           collective_optimization="baseline", local_mem_bw_gbps=50.5,
                           all_reduce=["ring", "direct3"], all_gather=["oneRing", "ring"],
                           reduce_scatter=["halvingDoubling", "ring"], all_to_all=["oneDirect7", "direct"],
                           roofline_enabled=True, peak_perf_tflops=989.5, replay_only=True,
                           num_queues_per_dim=2, injection_scale=2.5)
    text = sys.model_dump_yaml()
    assert "direct3" in text and "oneDirect7" in text
    assert load_system(_write(tmp_path, "own.yml", text)) == sys
    assert load_system(_write(tmp_path, "own.json", sys.model_dump_json())) == sys
    assert SystemConfig.model_validate(sys.model_dump()) == sys
    # ASTRA-sim form: everything but the two command-line options
    astra = load_system(_write(tmp_path, "astra.json", sys.to_astra_sim_json()))
    assert astra == sys.model_copy(update={"num_queues_per_dim": 1, "injection_scale": 1.0})


def test_reference_system_round_trips(configs, tmp_path):
    sys = load_system(configs / "Ring_4chunks.json")
    assert load_system(_write(tmp_path, "own.yml", sys.model_dump_yaml())) == sys


@pytest.mark.parametrize("text, fragments", [
    ("dataset_splits: 4\nlocal_mem_bw_gbps: 1\nall_reduce: [ring]\nall_gather: [ring]\n"
     "reduce_scatter: [ring]\nall_to_all: [ring]\nendpoint_delay: 5\n", ["endpoint_delay", "Extra inputs"]),
    ("dataset_splits: 4\nlocal_mem_bw_gbps: 1\nall_reduce: [ring]\nall_gather: [ring]\n"
     "reduce_scatter: [ring]\nall_to_all: [Ring]\n", ["all_to_all[0]", "'Ring'"]),
    ("dataset_splits: 4\nlocal_mem_bw_gbps: 1\nall_reduce: []\nall_gather: [ring]\n"
     "reduce_scatter: [ring]\nall_to_all: [ring]\n", ["all_reduce"]),
])
def test_bad_project_system_files(tmp_path, text, fragments):
    _config_error(load_system, _write(tmp_path, "bad_own.yml", text), *fragments)


# --- communicator groups ------------------------------------------------------------------------------


def test_comm_groups(tmp_path):
    url = _write(tmp_path, "groups.json", json.dumps({"1": [0, 1, 2, 3], "2": [7, 6, 5, 4], "3": [0, 4]}))
    assert read_comm_groups(url) == {1: (0, 1, 2, 3), 2: (7, 6, 5, 4), 3: (0, 4)}


@pytest.mark.parametrize("groups, fragments", [
    ({"0": [0, 1]}, ["0", "reserved"]),
    ({"a": [0, 1]}, ["a", "integer >= 1"]),
    ({"-1": [0, 1]}, ["-1", "integer >= 1"]),
    ({"1": [0, 1, 1]}, ["1[2]", "twice"]),
    ({"1": [0, -1]}, ["1[1]", "non-negative"]),
    ({"1": [0, 1.5]}, ["1[1]", "non-negative integer"]),
    ({"1": []}, ["1", "non-empty"]),
    ({"1": {"ranks": [0, 1]}}, ["1", "list"]),
])
def test_bad_comm_groups(tmp_path, groups, fragments):
    _config_error(read_comm_groups, _write(tmp_path, "bad_groups.json", json.dumps(groups)), *fragments)
