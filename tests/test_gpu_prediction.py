"""Predicting a GPU step without the profiler (docs/gpu.md): the profiler-cost probe
(tools/profcost.py) and what calibrate makes of it, the per-operator host-overhead model, the
device timing measured from traces and applied by the simulator, and the held-out H200 runs."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from datapaths import DATASETS

from chakra_core.cli import main
from chakra_core.convert.pytorch.devicetiming import device_timing
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.convert.pytorch.kineto import DeviceEvent, RuntimeEvent
from chakra_core.errors import ChakraError
from chakra_core.format.job import Job
from chakra_core.generate.builder import RankGraph
from chakra_core.replay.calibrate import calibrated_system
from chakra_core.sim.reference import reference_network
from chakra_core.replay.profcost import checked_probe, probe_terms, read_probe
from chakra_core.sim.config import DeviceTiming, HostOverhead, load_system, system_from_document
from chakra_core.sim.engine import simulate
from chakra_core.sim.workload.nodes import input_counts
from tools import profcost

MORE = DATASETS / "gpu-h200-more"


@pytest.fixture(scope="module")
def probe_document():
    return profcost.measure(torch.device("cpu"), calls=40, repeats=3)  # medians of 3: robust to a loaded machine


def test_the_probe_measures_the_profilers_cost_on_cpu(probe_document, tmp_path):
    cases = {c["case"]: c for c in probe_document["cases"]}
    assert set(cases) >= {"view", "add", "linear", "cat_32", "foreach_add_32"}
    assert probe_document["device"] == "cpu" and probe_document["torch"] == torch.__version__
    # the profiler costs several times an operator's own time: over all cases it shows whatever the load
    assert sum(c["profiled_ns"] for c in cases.values()) > 2 * sum(c["unprofiled_ns"] for c in cases.values())
    assert cases["add"]["ops_per_call"] == 1 and cases["add"]["inputs_per_call"] >= 2
    assert cases["linear"]["ops_per_call"] > cases["add"]["ops_per_call"]
    assert all(c["launches_per_call"] == 0 and c["recorded_ns"] > 0 for c in cases.values())  # no device here
    path = profcost.write(tmp_path, probe_document)
    terms = probe_terms(read_probe(str(path)))
    assert set(terms) == {"recorded_op_ns", "recorded_input_ns", "recorded_launch_ns", "recorded_child_ns", "op_ns",
                          "launch_ns"}
    assert all(v >= 0 for v in terms.values()) and terms["recorded_op_ns"] + terms["recorded_input_ns"] > 0


def test_the_h200_probe_gives_an_operators_cost_inside_another_and_per_child():
    terms = probe_terms(read_probe(str(MORE / "gpt6-d512" / "profiler_cost.json")))
    # a call from Python costs ~1.7 us beyond its launches; an operator inside it ~0.7 us (the dispatcher)
    assert 400 < terms["op_ns"] < 1000 and 7000 < terms["launch_ns"] < 10_000
    # the profiler's work per call outside its operators' spans, which a parent's own time holds per child
    assert 4000 < terms["recorded_child_ns"] < 8000


def test_a_bad_probe_file_is_one_clear_error(tmp_path):
    with pytest.raises(ChakraError, match=r"cases\[1\]\.recorded_ns: expected a number"):
        checked_probe({"cases": [_case(), {**_case(), "recorded_ns": "x"}, _case(), _case()]}, "p.json")
    with pytest.raises(ChakraError, match="p.json: cases: expected a list"):
        checked_probe({"cases": {}}, "p.json")
    bad = tmp_path / "profiler_cost.json"
    bad.write_text("[1, 2")
    assert main(["calibrate", "--npus", "1", "-o", str(tmp_path / "cal"), "--probe", str(bad)]) == 2


def _case(**values) -> dict:
    return {"unprofiled_ns": 1000, "profiled_ns": 9000, "recorded_ns": 8000, "ops_per_call": 1,
            "inputs_per_call": 2, "launches_per_call": 1, **values}


def test_the_probe_travels_with_the_conversion(probe_document, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MORE / "gpt6-d512-cudagraphs", run)
    result = convert_job(str(run), str(tmp_path / "out"), "job")
    report = json.loads((tmp_path / "out" / "job.report.json").read_text())
    assert report["profiler_cost"]["device"] == "NVIDIA H200" and not result.input_notes
    (run / "profiler_cost.json").write_text("[]")
    result = convert_job(str(run), str(tmp_path / "out2"), "job")
    assert "profiler_cost" not in result.summary() and any("expected a mapping" in v for v in result.set_aside.values())


def test_device_timing_is_measured_per_stream():
    runtime = [RuntimeEvent(1, 0.0, 1, None, "cudaLaunchKernel", 5.0), RuntimeEvent(1, 6.0, 2, None, "", 5.0),
               RuntimeEvent(1, 12.0, 3, None, "", 5.0)]
    device = [DeviceEvent("a", "kernel", 7.0, 20.0, 7, None, 1),  # idle stream: 2 us after its launch returned
              DeviceEvent("b", "kernel", 28.0, 3.0, 7, None, 2),  # queued behind a: 1 us after it ended
              DeviceEvent("c", "kernel", 32.5, 3.0, 7, None, 3)]  # queued behind b: 1.5 us
    assert device_timing(device, runtime) == {"launch_latency_ns": 2000, "kernel_gap_ns": 1250,
                                              "launches_measured": 1, "gaps_measured": 2}
    assert device_timing([], runtime) == {}


def test_device_timing_takes_streams_apart_and_the_last_call_of_a_correlation():
    runtime = [RuntimeEvent(1, 0.0, 1, None, "", 5.0), RuntimeEvent(1, 0.0, 2, None, "", 5.0),
               RuntimeEvent(1, 2.0, 1, None, "", 5.0),  # correlation 1 again: this call (returned at 7) counts
               RuntimeEvent(1, 100.0, 3, None, "", 5.0)]
    device = [DeviceEvent("b", "kernel", 40.0, 2.0, 8, None, 2),  # stream 8: idle, 35 us after its call
              DeviceEvent("a", "kernel", 10.0, 20.0, 7, None, 1),  # stream 7, listed after stream 8: 3 us
              DeviceEvent("x", "kernel", 31.0, 1.0, 7, None, None),  # no correlation: not a sample; ends at 32
              DeviceEvent("c", "kernel", 500.0, 1.0, 8, None, 3)]  # 395 us after its call: busy elsewhere
    assert device_timing(device, runtime) == {"launch_latency_ns": 19000, "kernel_gap_ns": 0,
                                              "launches_measured": 2, "gaps_measured": 0}


def test_the_simulator_adds_launch_latency_and_gaps():
    graph = RankGraph()
    launcher = graph.compute("launch", duration_us=10, is_cpu=True)
    first = graph.compute("k1", [launcher], duration_us=5)
    graph.compute("k2", [launcher], duration_us=5, ctrl_deps=[first])
    job = [graph.table()]
    system = calibrated_system()
    assert simulate(job, reference_network(1), system).finish_ns == 20_000
    timed = system.model_copy(update={"device_timing": DeviceTiming(launch_latency_ns=2000, kernel_gap_ns=700)})
    assert simulate(job, reference_network(1), timed).finish_ns == 10_000 + 2000 + 5000 + 700 + 5000


def test_the_per_operator_model():
    model = HostOverhead(scale=0.5, launch_ns=4000, op_ns=1000, recorded_op_ns=6000, recorded_input_ns=1000,
                         recorded_launch_ns=3000)
    # an operator of no work of its own: recorded as the profiler's records, unprofiled op + launch
    assert model.host_ns(6000 + 2 * 1000 + 3000, launches=1, inputs=2) == 1000 + 4000
    assert model.host_ns(41_000, launches=1, inputs=2) == 5000 + 15_000  # half of what lies beyond
    assert model.host_ns(3000, launches=1, inputs=2) == 3000  # never more than recorded
    old = HostOverhead(scale=0.25, launch_ns=1000)
    assert old.host_ns(8000, launches=2) == 4000 and not old.reads_inputs and not old.reads_children
    # a parent's own time holds the profiler's records of its children, which it does not keep
    nested = model.model_copy(update={"recorded_child_ns": 5000})
    assert nested.reads_children
    assert nested.host_ns(6000 + 2 * 1000 + 3000 + 3 * 5000, launches=1, inputs=2, children=3) == 1000 + 4000
    # a CUDA graph's replay: the profiler records each of its 100 kernels, the host makes one call
    graph = model.host_ns(6000 + 100 * 3000, launches=100, launch_calls=1)
    assert graph == 1000 + 4000 and model.host_ns(6000 + 100 * 3000, launches=100) == 306_000  # capped: recorded


def test_the_conversion_counts_children_and_a_graphs_launch_calls():
    table = Job.read(_converted_once()).tables[0]
    rows = table.select(["name", "children", "launch_calls"]).to_pylist()
    step = next(r for r in rows if r["name"].startswith("ProfilerStep"))
    assert step["children"] > 10 and step["launch_calls"] is None
    graphs = [r for r in rows if r["name"].startswith("## Call CompiledFxGraph")]
    assert graphs and all(r["launch_calls"] == 1 for r in graphs)  # one cudaGraphLaunch for 108 or 214 kernels
    assert all(r["launch_calls"] is None for r in rows if r["name"] in ("aten::copy_", "aten::_foreach_mul_"))
    assert all(r["children"] is None for r in rows if r["name"] == "aten::as_strided")  # a leaf


def test_inputs_are_counted_from_the_recorded_types():
    table = Job.read(_converted_once()).tables[0]
    counts = input_counts(table)
    names = table.column("name").to_pylist()
    views = [c for n, c in zip(names, counts) if n == "aten::view"]
    assert views and all(c == 2 for c in views)  # the tensor and its new shape
    assert max(counts) > 5 and counts[names.index(next(n for n in names if n.startswith("ProfilerStep")))] == 0


_CONVERTED: dict[str, str] = {}


def _converted_once() -> str:
    if not _CONVERTED:
        import tempfile
        out = tempfile.mkdtemp(prefix="gpu-prediction-")
        convert_job(str(MORE / "gpt6-d512-cudagraphs"), out, "job")
        _CONVERTED["prefix"] = f"{out}/job"
    return _CONVERTED["prefix"]


def test_calibrate_measures_device_timing_and_reads_the_probe(tmp_path, capsys):
    prefix = _converted_once()
    report = json.loads(open(f"{prefix}.report.json").read())
    timing = report["ranks_report"][0]["device_timing"]
    assert 1000 < timing["launch_latency_ns"] < 3000 and 200 < timing["kernel_gap_ns"] < 1500  # CUDA graphs
    assert main(["calibrate", prefix, "--npus", "1", "-o", str(tmp_path / "cal"), "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["host_overhead"]["probe"] and fitted["host_overhead"]["recorded_launch_ns"] > 0
    assert abs(fitted["host_overhead"]["jobs"][0]["relative_error"]) < 0.02  # one job: fitted exactly
    system = load_system(str(tmp_path / "cal" / "system.json"))
    assert system.device_timing.kernel_gap_ns == timing["kernel_gap_ns"]
    assert system.host_overhead.op_ns == fitted["host_overhead"]["op_ns"] > 0


def test_stats_says_why_its_verdict_differs_from_the_busy_share(capsys):
    assert main(["stats", _converted_once() + ".0.et", "--json"]) == 0
    ahead = json.loads(capsys.readouterr().out)["traces"][0]["gpu"]["predicted"]
    assert ahead["bound"] in ("host", "device") and set(ahead["critical_path"]) >= {"host", "device"}
