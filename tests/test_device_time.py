"""Device time (chakra_core.analysis.device_*, kernels, intervals; chakra stats' device section):
hand-built traces with known answers, and the H200 runs of datasets/gpu-h200 against their raw
Kineto files."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pytest
from datapaths import DATASETS, REFERENCE_CONFIGS

from chakra_core.analysis import device_time, device_work, intervals
from chakra_core.analysis.facade import JobAnalysis
from chakra_core.analysis.kernels import family
from chakra_core.cli import main
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.format.etfile import write_table
from chakra_core.format.job import Job

GPU = DATASETS / "gpu-h200"
COMP, METADATA, COLL = 4, 1, 7


def test_intervals_union_intersect_subtract():
    a = intervals.union([5, 0, 2, 20, 30], [8, 3, 4, 25, 30])  # overlapping, unsorted, one empty
    assert a[0].tolist() == [0, 5, 20] and a[1].tolist() == [4, 8, 25]
    b = intervals.union([3, 22], [6, 40])
    assert intervals.measure(intervals.intersect(a, b)) == 1 + 1 + 3
    assert intervals.measure(intervals.subtract(a, b)) == intervals.measure(a) - 5
    assert intervals.clip(a, 1, 21)[0].tolist() == [1, 5, 20]


@pytest.mark.parametrize("name, expected", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(...)", "gemm"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8", "gemm"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc", "convolution"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy_htod"), ("Memcpy DtoH (Device -> Pageable)", "memcpy_dtoh"),
    ("Memcpy DtoD (Device -> Device)", "memcpy_dtod"), ("Memset (Device)", "memset"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdam>", "optimizer"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>", "normalisation"),
    ("triton_poi_fused_add_mul_0", "triton"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, NormTwoOps>>", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
    ("my_custom_kernel", "other"),
])
def test_kernel_families(name, expected):
    assert family(name) == expected


def _node(i, name, start, dur, *, cpu=True, stream=None, data=(), node_type=COMP, pg=None, inputs=None):
    return {"id": i, "name": name, "type": node_type, "start_time_micros": start, "duration_micros": dur,
            "is_cpu_op": cpu, "stream": stream, "data_deps": list(data), "ctrl_deps": [], "pg_name": pg,
            "inputs": inputs}


def _table(nodes: list[dict]) -> pa.Table:
    schema = pa.schema([("id", pa.uint64()), ("name", pa.string()), ("type", pa.int32()),
                        ("start_time_micros", pa.uint64()), ("duration_micros", pa.uint64()),
                        ("is_cpu_op", pa.bool_()), ("stream", pa.int64()), ("data_deps", pa.list_(pa.uint64())),
                        ("ctrl_deps", pa.list_(pa.uint64())), ("pg_name", pa.string()),
                        ("inputs", pa.struct([("values", pa.string()), ("shapes", pa.string()),
                                              ("types", pa.string())]))])
    return pa.Table.from_pylist(nodes, schema=schema)


GLOO_GROUPS = {"values": "['" + json.dumps([{"pg_name": "0", "backend_config": "cpu:gloo"}]) + "']"}


def step_trace() -> pa.Table:
    """Two steps of 100 µs. Step 1: an op launches a 30 µs kernel at 10 that starts at 20
    (host launch idle 0-20), a sync op waits 50-60, a gloo all-reduce runs 70-90 on the host.
    Step 2: a kernel busy 100-190 (device-bound)."""
    return _table([
        _node(1, "## process_group:init ##", 0, 0, node_type=METADATA, inputs=GLOO_GROUPS),
        _node(2, "ProfilerStep#1", 1000, 1), _node(3, "aten::mm", 1010, 10),
        _node(4, "aten::_local_scalar_dense", 1050, 10),
        _node(5, "c10d::allreduce_", 1070, 20, cpu=False, node_type=COLL, pg="0"),
        _node(6, "ProfilerStep#2", 1100, 1), _node(7, "aten::mm", 1100, 5),
        _node(10, "nvjet_a", 1020, 30, cpu=False, stream=7, data=[3]),
        _node(11, "nvjet_b", 1100, 90, cpu=False, stream=7, data=[7]),
    ])


def test_steps_busy_idle_by_cause_and_bound():
    table = step_trace()
    rows = device_time.step_table(device_work.device_work(table, *device_work.recorded_times(table))).to_pylist()
    first, second, total = rows
    assert [r["step"] for r in rows] == ["ProfilerStep#1", "ProfilerStep#2", "all"]
    assert (first["span_ns"], first["busy_ns"]) == (100_000, 30_000)
    assert (first["idle_host_launch_ns"], first["idle_synchronisation_ns"], first["idle_communication_ns"]) == \
        (20_000 + 10_000 + 10_000, 10_000, 20_000)  # 0-20, 60-70, 90-100; 50-60; 70-90
    assert first["overlap"] == 0.0 and first["bound"] == "host"
    assert (second["span_ns"], second["busy_ns"], second["bound"]) == (90_000, 90_000, "device")
    assert total["busy_ns"] == 120_000 and total["launches"] == 2
    assert total["launch_delay_p50_ns"] == 0  # each kernel started no later than its operator's end


def test_queued_work_is_other_and_families_add_up():
    table = _table([_node(2, "ProfilerStep#1", 1000, 1), _node(3, "aten::mm", 1000, 5),
                    _node(10, "nvjet_a", 1010, 10, cpu=False, stream=7, data=[3]),
                    _node(11, "Memcpy DtoH (Device -> Pinned)", 1030, 5, cpu=False, stream=8, data=[3])])
    work = device_work.device_work(table, *device_work.recorded_times(table))
    total = device_time.step_table(work).to_pylist()[-1]
    assert (total["idle_host_launch_ns"], total["idle_other_ns"]) == (5_000, 15_000)  # launched at 1005 at the latest
    families = device_time.family_table(work).to_pylist()
    assert {r["family"]: (r["ns"], r["count"]) for r in families} == {"memcpy_dtoh": (5000, 1), "gemm": (10000, 1)}
    top = device_time.top_kernels(work, 1).to_pylist()
    assert top == [{"name": "nvjet_a", "family": "gemm", "count": 1, "total_ns": 10_000, "median_ns": 10_000}]


def test_a_trace_without_kernels_has_no_device_work():
    table = _table([_node(2, "aten::mm", 1000, 5)])
    assert not device_work.has_device_work(table)
    assert JobAnalysis(Job([table])).gpu() == {}


# ------------------------------------------------------------------ the H200 runs


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("gpu")
    prefixes = {}
    for run in ("gpt", "mlp_tiny", "mlp_gloo2"):
        convert_job(str(GPU / run), str(out / run), run)
        prefixes[run] = str(out / run / run)
    return prefixes


def kineto_reference(run: str, rank: int = 0) -> dict:
    """From the raw Kineto file, over the device events launched in the profiled steps (by a
    runtime call inside them: kernels the warm-up step launched before may still run early in
    the first): their union over the steps' span, their summed time, the name with the most."""
    with gzip.open(GPU / run / f"rank{rank}.kineto.json.gz") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    start, host_end = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and start <= e["ts"] < host_end and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
              and e["args"].get("correlation") in launched]
    end = max(host_end, max(e["ts"] + e["dur"] for e in device))
    busy = intervals.measure(intervals.union([round(e["ts"] * 1000) for e in device],
                                             [round((e["ts"] + e["dur"]) * 1000) for e in device]))
    by_name: dict[str, float] = {}
    for e in device:
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + e["dur"]
    # the conversion keeps each kernel's duration to the ns (its duration_ns attribute)
    return {"busy_share": busy / ((end - start) * 1000), "total_ns": round(sum(e["dur"] for e in device) * 1000),
            "top": max(by_name, key=by_name.get)}


# Not mlp_gloo2: the converter folds the device-to-host copies of a gloo all-reduce (20 ms of its
# 64 ms of device work) into the communication node, so they are not device rows of the trace.
@pytest.mark.parametrize("run", ["gpt", "mlp_tiny"])
def test_recorded_device_time_matches_kineto(converted, run):
    gpu = JobAnalysis.from_files(converted[run]).gpu()[0]
    reference = kineto_reference(run)
    assert abs(gpu["busy_share"] - reference["busy_share"]) < 0.02
    assert sum(gpu["families"].values()) == pytest.approx(reference["total_ns"], rel=0.01)
    assert gpu["top_kernels"][0]["name"] == reference["top"]


def test_verdicts_of_the_runs(converted):
    tiny = JobAnalysis.from_files(converted["mlp_tiny"]).gpu()[0]
    assert tiny["recorded_bound"] == tiny["bound"] == "host"  # launch-bound, as recorded and as predicted
    analysis = JobAnalysis.from_files(converted["gpt"])
    gpt = analysis.gpu()[0]
    # the profiler makes every run host-bound; without it (the shipped host-overhead model) gpt's device is busy
    # most of the step, yet its critical path runs through the host: the one verdict is the path's
    ahead = gpt["predicted"]
    assert (gpt["recorded_bound"], gpt["bound"], ahead["busy_bound"]) == ("host", "host", "device")
    assert ahead["busy_share"] > 0.75 and ahead["critical_path"]["host"] > ahead["span_ns"] / 2
    verdict = [row["bound"] for row in analysis.device_steps("predicted").to_pylist() if row["step"] == "all"]
    assert verdict == [gpt["bound"]]  # the nightly report's row says the same
    gloo = JobAnalysis.from_files(converted["mlp_gloo2"]).gpu()
    assert {g["recorded_bound"] for g in gloo.values()} == {"communication"}  # waits for gloo's all-reduces
    assert all(g["overlap"] is not None and g["idle_ns"]["communication"] > 0 for g in gloo.values())


def test_predicted_variant_takes_any_system_file(converted):
    reference = JobAnalysis.from_files(converted["mlp_tiny"], prediction_file=None).gpu()[0]["predicted"]
    given = JobAnalysis.from_files(converted["mlp_tiny"], prediction_file=str(REFERENCE_CONFIGS / "Ring_4chunks.json"))
    figures = given.gpu()[0]["predicted"]
    assert figures["system"].endswith("Ring_4chunks.json") and reference["system"] == "reference"
    assert {k: v for k, v in figures.items() if k != "system"} == {k: v for k, v in reference.items() if k != "system"}
    default = JobAnalysis.from_files(converted["mlp_tiny"]).gpu()[0]["predicted"]
    assert default["system"] == "shipped host-overhead model" and default["span_ns"] < reference["span_ns"] / 2
    steps = given.device_steps("predicted").to_pylist()
    assert [r["step"] for r in steps] == ["ProfilerStep#2", "ProfilerStep#3", "all"]
    assert steps[-1]["span_ns"] == figures["span_ns"] and figures["families"] == default["families"]


def test_stats_json_and_table(converted, capsys):
    gpt = converted["gpt"] + ".0.et"
    assert main(["stats", gpt, "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["traces"][0]["gpu"]
    assert {"span_ns", "busy_ns", "families", "top_kernels", "overlap", "bound", "predicted"} <= set(gpu)
    assert set(gpu["top_kernels"][0]) >= {"name", "count", "total_ns"} and gpu["bound"] in device_time.BOUNDS
    ranks = [converted["mlp_gloo2"] + f".{r}.et" for r in (0, 1)]
    assert main(["stats", *ranks]) == 0
    out = capsys.readouterr().out
    assert "device time over the profiled steps" in out and "stragglers (chakra stragglers):" in out


def test_stats_without_every_rank_leaves_the_prediction_out(converted, capsys):
    assert main(["stats", converted["mlp_gloo2"] + ".1.et", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["traces"][0]["gpu"]["predicted"] is None
    assert "no predicted device time: give every rank of the job" in captured.err


def test_stats_bad_system_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "sys.json"
    bad.write_text('{"scheduling-policy": 7}')
    trace = tmp_path / "t.0.et"
    write_table(step_trace(), str(trace))
    assert main(["stats", str(trace), "--system", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sys.json" in err


def test_timeline_of_a_gpu_job_shows_threads_streams_and_launches(converted):
    from chakra_core.viz.timeline import timeline_from_traces, validate_trace_events

    doc = timeline_from_traces([converted["gpt"] + ".0.et"], max_flows=3000)
    assert validate_trace_events(doc) == []
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert "stream 7" in threads and {"CPU thread 1", "CPU thread 2"} <= threads
    launches = [e for e in doc["traceEvents"] if e.get("ph") == "s" and e["name"] == "launch"]
    assert len(launches) == 2726  # every kernel's, before any other flow


def test_the_prediction_system_file_is_read_once_per_job(converted, monkeypatch):
    from chakra_core.analysis import predicted
    from chakra_core.analysis.job_record import record_job

    read, load = [], predicted.load_system
    monkeypatch.setattr(predicted, "load_system", lambda url: read.append(url) or load(url))
    analysis = JobAnalysis.from_files(converted["mlp_tiny"])
    record = record_job(analysis)
    assert analysis.gpu()[0]["predicted"]["system"] == record.device_verdicts[-1]["system"] == predicted.DEFAULT_LABEL
    assert read == [predicted.PREDICTION_SYSTEM]
