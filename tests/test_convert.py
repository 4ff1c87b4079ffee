"""PyTorch ET (+ Kineto) -> Chakra conversion on real traces from other tools (datasets/pytorch-et)
and on the project's own gloo recordings (datasets/pytorch-gloo)."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from datapaths import GLOO, PYTORCH_ET, REFERENCE_CONFIGS

from chakra_core.analysis.validate import validate_file
from chakra_core.cli import main
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.convert.common.jsonstream import TraceJSONError
from chakra_core.convert.pytorch.kineto import read_kineto
from chakra_core.convert.pytorch.conversion import RankConversion
from chakra_core.convert.pytorch.et import KNOWN_SCHEMAS, read_host_trace
from chakra_core.format.etfile import read_metadata, read_table
from chakra_core.format.nodetypes import COLL, COMP, METADATA, RECV, SEND

DATA = PYTORCH_ET
RESNET = DATA / "resnet_ddp.rank0.et.json.gz"
ALLGATHER = DATA / "allgather_2ranks.rank0.et.json"
LINEAR, LINEAR_KINETO = DATA / "linear.et.json.gz", DATA / "linear.kineto.json.gz"


def _convert(tmp_path, src, prefix="t"):
    result = convert_job(str(src), str(tmp_path / "out"), prefix)
    return result, read_table(result.et_files[0])


def _errors(url):
    return [f for f in validate_file(url) if f.severity == "error"]


def test_resnet_ddp_has_exactly_its_21_collectives_once_each(tmp_path):
    result, table = _convert(tmp_path, RESNET)
    rows = table.to_pylist()
    coll = [r for r in rows if r["type"] == COLL]
    kinds = Counter(r["comm_type"] for r in coll)
    assert kinds == {5: 6, 0: 15}  # BROADCAST, ALL_REDUCE
    by_id = {r["id"]: r for r in coll}
    # by hand from the trace: c10d::broadcast_ of 53,120 floats, of 53 longs; all_reduce of 2,049,000 floats
    assert by_id[436]["comm_size"] == 53120 * 4 and by_id[436]["name"] == "c10d::broadcast_"
    assert by_id[601]["comm_size"] == 53 * 8
    assert by_id[3247]["comm_size"] == 2049000 * 4 and by_id[3247]["comm_type"] == 0
    assert by_id[3480]["comm_size"] == 7875584 * 4
    assert all(r["pg_name"] == "0" and r["is_cpu_op"] is False for r in coll)
    # the wrappers collapsed: no record_param_comms / nccl:* node is a communication node
    assert not any(r["name"].startswith(("nccl:", "record_param_comms")) for r in coll)
    assert not _errors(result.et_files[0])
    # the 'wait' record_param_comms waits for its broadcast (matched by sequence number)
    wait = next(r for r in rows if r["id"] == 604)
    assert 436 in wait["data_deps"]


def test_allgather_trace_sizes_are_per_rank_contributions(tmp_path):
    result, table = _convert(tmp_path, ALLGATHER)
    coll = [r for r in table.to_pylist() if r["type"] == COLL]
    assert len(coll) == 10 and {r["comm_type"] for r in coll} == {2}
    trace = json.loads(ALLGATHER.read_text())
    c10d = sorted((n for n in trace["nodes"] if n["name"] == "c10d::allgather_"), key=lambda n: n["id"])
    expected = [sum(t[3] * t[4] for t in n["inputs"]["values"][1]) for n in c10d]
    assert [r["comm_size"] for r in sorted(coll, key=lambda r: r["id"])] == expected
    assert not _errors(result.et_files[0])


def test_linear_pair_links_kernels_with_measured_durations(tmp_path):
    host, kineto = read_host_trace(str(LINEAR)), read_kineto(str(LINEAR_KINETO))
    conversion = RankConversion(host, kineto, 0)
    table, _ = conversion.emit()
    rows = table.to_pylist()
    by_id = {r["id"]: r for r in rows}
    kernels = [r for r in rows if r["type"] == COMP and not r["is_cpu_op"]]
    assert len(kernels) > 200
    # the first GEMM of the first aten::addmm (node 14): 139 us in the Kineto trace (correlation 2457)
    gemm = next(r for r in kernels if r["name"] == "volta_sgemm_64x64_tn")
    assert gemm["duration_micros"] == 139 and gemm["data_deps"] == [14] and by_id[14]["name"] == "aten::addmm"
    assert gemm["start_time_micros"] == 1689180448554878
    # kernels of one stream run in order
    second = next(r for r in kernels if r["ctrl_deps"] == [gemm["id"]])
    assert second["name"].startswith("void at::native::vectorized_elementwise_kernel") and second["duration_micros"] == 5
    assert by_id[second["data_deps"][0]]["name"] == "aten::clamp_min"
    assert conversion.linked.report.host_nodes_linked > 850
    # CPU operators get their exclusive time, and matmuls an operation count (aten::addmm 512x1024 @ 1024x1024)
    assert by_id[14]["num_ops"] == 2 * 512 * 1024 * 1024 and by_id[9]["num_ops"] is None  # aten::linear wraps it
    assert sum(r["duration_micros"] for r in rows if r["is_cpu_op"]) > 0


def test_every_known_schema_and_an_unknown_one_convert(tmp_path):
    trace = json.loads(ALLGATHER.read_text())
    for schema in list(KNOWN_SCHEMAS)[1:] + ["1.2.0-chakra.0.0.5"]:
        trace["schema"] = schema
        src = tmp_path / f"{schema}.et.json"
        src.write_text(json.dumps(trace))
        conversion = RankConversion(read_host_trace(str(src)), None, 0)
        table, meta = conversion.emit()
        assert sum(1 for t in table.column("type").to_pylist() if t == COLL) == 10
        notes = " ".join(conversion.report.notes)
        assert ("not a known PyTorch ET schema" in notes) == (schema not in KNOWN_SCHEMAS)
    assert "1.0.1" in KNOWN_SCHEMAS and read_host_trace(str(LINEAR)).layout == "flat"


def test_bad_inputs_give_clear_errors_not_tracebacks(tmp_path, capsys):
    raw = ALLGATHER.read_bytes()
    cases = {
        "malformed.et.json": raw.replace(b'"ctrl_deps": ', b'"ctrl_deps": ,', 1),
        "truncated.et.json": raw[: len(raw) // 2],
        "truncated.et.json.gz": gzip.compress(raw)[:3000],
        "corrupt.et.json.gz": gzip.compress(raw)[:10] + b"\x07" + gzip.compress(raw)[11:],  # a reserved block type
        "not_a_trace.et.json": b'{"hello": [1, 2, 3]}',
        "empty.et.json": b"",
    }
    expected = {
        "malformed.et.json": "malformed JSON",
        "truncated.et.json": "file ends early",
        "truncated.et.json.gz": "cannot read",
        "corrupt.et.json.gz": "cannot read: corrupt gzip stream",
        "not_a_trace.et.json": "no 'nodes' array",
        "empty.et.json": "expected a JSON object",
    }
    for name, content in cases.items():
        src = tmp_path / name
        src.write_bytes(content)
        code = main(["convert", str(src), "-o", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 2, name
        assert str(src) in err and expected[name] in err and "Traceback" not in err, (name, err)


def test_parent_cycle_is_cut_and_reported(tmp_path):
    trace = json.loads(ALLGATHER.read_text())
    nodes = {n["id"]: n for n in trace["nodes"]}
    c10d = min((n for n in trace["nodes"] if n["name"] == "c10d::allgather_"), key=lambda n: n["id"])
    child = next(n for n in trace["nodes"] if n["ctrl_deps"] == c10d["id"])
    c10d["ctrl_deps"] = child["id"]  # c10d -> child -> c10d
    src = tmp_path / "cycle.et.json"
    src.write_text(json.dumps(trace))
    result, table = _convert(tmp_path, src)
    report = result.reports[0]
    assert report["counts"]["parent cycle cut"] == 1
    assert any("cycle" in n for n in report["notes"])
    assert not _errors(result.et_files[0])
    assert nodes  # the rest converted
    assert table.num_rows > 100


def test_convert_writes_prefix_files_comm_groups_and_metadata(tmp_path):
    out = tmp_path / "out"
    assert main(["convert", str(RESNET), "-o", str(out), "--prefix", "resnet"]) == 0
    assert (out / "resnet.0.et").exists()
    assert json.loads((out / "resnet.comm_groups.json").read_text()) == {}
    meta = read_metadata(str(out / "resnet.0.et"))
    attrs = {a.name: a for a in meta.attr}
    assert attrs["schema"].string_val == "1.1.0-chakra.0.0.4"
    assert json.loads(attrs["conversion_report"].string_val)["counts"]["communication: all_reduce"] == 15
    table = read_table(str(out / "resnet.0.et")).to_pylist()
    metadata_node = next(r for r in table if r["type"] == METADATA)
    values = metadata_node["inputs"]["values"]
    # what ASTRA-sim parses: strip two characters at each end, the rest is a JSON list of groups
    assert json.loads(values[2:-2])[0]["pg_name"] == "0"


def test_link_command_reports_and_writes(tmp_path, capsys):
    out = tmp_path / "linear.et"
    assert main(["link", str(LINEAR), str(LINEAR_KINETO), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device_events_linked"] > 200 and report["nodes"] > 1000
    assert not _errors(str(out))


@pytest.mark.parametrize("bundle", ["tar", "zip", "multi_json"])
def test_split_reads_bundles_and_multi_rank_json(tmp_path, bundle):
    import tarfile
    import zipfile

    trace = json.loads(ALLGATHER.read_text())
    if bundle == "tar":
        src = tmp_path / "job.tar.gz"
        with tarfile.open(src, "w:gz") as t:
            for r in (0, 1):
                t.add(ALLGATHER, arcname=f"job/rank{r}.et.json")
    elif bundle == "zip":
        src = tmp_path / "job.zip"
        with zipfile.ZipFile(src, "w") as z:
            for r in (0, 1):
                z.write(ALLGATHER, arcname=f"rank{r}.et.json")
    else:
        src = tmp_path / "job.json"
        src.write_text(json.dumps({"0": trace, "1": trace}))
    out = tmp_path / "out"
    assert main(["split", str(src), "-o", str(out), "--prefix", "ag"]) == 0
    assert sorted(p.name for p in out.glob("ag.*.et")) == ["ag.0.et", "ag.1.et"]


def test_split_reports_the_first_collective_mismatch(tmp_path, capsys):
    folder = tmp_path / "job"
    folder.mkdir()
    trace = json.loads(ALLGATHER.read_text())
    (folder / "rank0.et.json").write_text(json.dumps(trace))
    victim = sorted((n for n in trace["nodes"] if n["name"] == "c10d::allgather_"), key=lambda n: n["id"])[3]
    victim["inputs"]["values"][1][0][3] *= 2  # rank 1's 4th all_gather sends twice the elements
    (folder / "rank1.et.json").write_text(json.dumps(trace))
    assert main(["split", str(folder), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "collective #4" in err and f"node {victim['id']}" in err


def test_jsonstream_handles_tricky_strings_small_chunks_and_nan(tmp_path, monkeypatch):
    from chakra_core.convert.common import jsonstream

    monkeypatch.setattr(jsonstream, "READ_CHUNK", 7)
    nodes = [{"id": i, "name": 'op "%d" ]}[{,\\' % i, "v": [1.5, [2, [3]]]} for i in range(50)]
    text = json.dumps({"schema": "x", "nodes": nodes, "after": {"k": [1]}}).replace("1.5", "NaN", 1)
    src = tmp_path / "t.json"
    src.write_text(text)
    doc = jsonstream.StreamedDocument(str(src), "nodes", batch_items=3)
    got = [n for batch in doc.batches() for n in batch]
    assert [n["name"] for n in got] == [n["name"] for n in nodes]
    assert got[0]["v"][0] != got[0]["v"][0]  # NaN
    assert doc.fields == {"schema": "x", "after": {"k": [1]}}
    with pytest.raises(TraceJSONError, match="element"):
        src.write_text(text.replace('"id": 7,', '"id": 7,,'))
        list(jsonstream.StreamedDocument(str(src), "nodes", batch_items=3).batches())


def test_a_digested_trace_is_freed_without_the_cyclic_collector(tmp_path):
    """The collector is paused through a conversion: what a reader kept must not hang on a
    reference cycle (the reader and its document), or each rank's traces would stay to the end."""
    import gc
    import weakref

    from chakra_core.convert.common.collector import collector_paused

    src = tmp_path / "t.et.json.gz"
    src.write_bytes(gzip.compress(ALLGATHER.read_bytes()))
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            trace = read_host_trace(str(src))
        assert not gc.isenabled()  # the inner block leaves the outer one's pause alone
        freed = weakref.ref(trace)
        del trace
        assert freed() is None
    assert gc.isenabled()


def test_thread_codes_keep_first_appearance_among_linked_events_and_tell_names_from_numbers():
    from chakra_core.convert.pytorch.hosttime import CpuColumns
    from chakra_core.convert.pytorch.kineto import CpuEvent, Linked, LinkReport

    trace = [CpuEvent("op", tid, float(k), 1.0, None, None) for k, tid in enumerate([9, "main", 3, 7, "7", 7])]
    positions = np.array([3, 4, 2, 5, 1])  # the linked events, in host order: 9 is linked to no host node
    linked = Linked({10 + k: trace[p] for k, p in enumerate(positions.tolist())}, {}, LinkReport(), positions)
    columns = CpuColumns.of(linked, trace)
    assert columns.codes == {7: 0, "7": 1, 3: 2, "main": 3} and columns.thread.tolist() == [0, 1, 2, 0, 3]
    assert columns.ts.tolist() == [3.0, 4.0, 2.0, 5.0, 1.0] and columns.index.tolist() == [10, 11, 12, 13, 14]
    assert columns.code(9) == -1 and columns.in_trace().tolist() == [False, True, True, True, True, True]


# ---------------------------------------------------------------- the recorded gloo runs (datasets/)
GLOO_RUNS = sorted(GLOO.glob("*-w*"))
# program.json op -> (node type, comm_type or None)
PROGRAM_OPS = {
    "all_reduce": (COLL, 0), "reduce": (COLL, 1), "all_gather": (COLL, 2), "all_gather_into_tensor": (COLL, 2),
    "gather": (COLL, 3), "scatter": (COLL, 4), "broadcast": (COLL, 5), "all_to_all": (COLL, 6),
    "all_to_all_single": (COLL, 6), "reduce_scatter": (COLL, 7), "reduce_scatter_tensor": (COLL, 7),
    "barrier": (COLL, 9), "send": (SEND, None), "isend": (SEND, None), "recv": (RECV, None), "irecv": (RECV, None),
}


def _matches(call: dict, node: dict, rank: int, groups: dict) -> bool:
    node_type, comm_type = PROGRAM_OPS[call["op"]]
    size = call["bytes"] * (len(call["group_ranks"]) if call["op"] == "scatter" else 1)
    members = groups.get(node["pg_name"], None) if node["pg_name"] not in ("", "0") else None
    same_group = (members or call["group_ranks"]) == call["group_ranks"] and (
        members is not None or call["pg_name"] == "0" or len(call["group_ranks"]) == len(groups.get("world", [])))
    if node["type"] != node_type or node["comm_size"] != size or not same_group:
        return False
    if node_type == COLL:
        return node["comm_type"] == comm_type
    src, dst = (rank, call["peer"]) if node_type == SEND else (call["peer"], rank)
    return (node["comm_src"], node["comm_dst"], node["comm_tag"]) == (src, dst, call["tag"])


@pytest.mark.parametrize("run", GLOO_RUNS, ids=lambda p: p.name)
def test_recorded_gloo_runs_convert_with_every_program_call_once(tmp_path, run):
    assert GLOO_RUNS, "datasets/pytorch-gloo is missing"
    result = convert_job(str(run), str(tmp_path / "out"), "job")
    assert result.mismatches == []
    groups = {k: v for k, v in json.loads(Path(result.comm_group_file).read_text()).items()}
    groups["world"] = sorted(result.ranks)
    for rank, et in zip(result.ranks, result.et_files):
        assert not _errors(et)
        comm = sorted((r for r in read_table(et).to_pylist() if r["type"] in (COLL, SEND, RECV)), key=lambda r: r["id"])
        calls = json.loads((run / f"rank{rank}.program.json").read_text())
        k, unmatched = 0, []
        for node in comm:  # the program's calls are the comm nodes in order, each once
            if k < len(calls) and _matches(calls[k], node, rank, groups):
                k += 1
            else:
                unmatched.append(node)
        assert k == len(calls), f"rank {rank}: program call #{k + 1} {calls[k] if k < len(calls) else ''} not found"
        # the only communication the program did not issue itself: DDP's own broadcasts in forward
        assert all(n["comm_type"] == 5 for n in unmatched), [(n["id"], n["name"]) for n in unmatched]


@pytest.mark.parametrize("run", [r for r in GLOO_RUNS if r.name.endswith("-w4")][:2], ids=lambda p: p.name)
def test_converted_gloo_runs_simulate_to_completion(tmp_path, run):
    from chakra_core.sim.files import simulate_files

    configs = REFERENCE_CONFIGS
    result = convert_job(str(run), str(tmp_path / "out"), "job")
    sim, _ = simulate_files(str(tmp_path / "out" / "job"), str(configs / "Ring_4npus.yml"),
                            str(configs / "Ring_4chunks.json"), result.comm_group_file)
    assert len(sim.npus) == 4 and all(npu.finish_ns > 0 for npu in sim.npus)


@pytest.mark.parametrize("src", [RESNET, ALLGATHER, LINEAR], ids=lambda p: p.name.split(".")[0])
def test_converted_shared_traces_simulate_to_completion(tmp_path, src):
    """Each is one rank of its job: replayed on 4 NPUs with the simulator's what-if replication."""
    from chakra_core.sim.files import simulate_files

    configs = REFERENCE_CONFIGS
    if src == LINEAR:
        assert main(["link", str(LINEAR), str(LINEAR_KINETO), "-o", str(tmp_path / "out" / "t.0.et")]) == 0
    else:
        convert_job(str(src), str(tmp_path / "out"), "t")
    sim, _ = simulate_files(str(tmp_path / "out" / "t"), str(configs / "Ring_4npus.yml"),
                            str(configs / "Ring_4chunks.json"), traced_npus=1)
    assert all(npu.finish_ns > 0 for npu in sim.npus)


# ---------------------------------------------------------------- where the recorded time goes (hosttime.py)
def test_exclusive_times_partition_a_thread_when_spans_overlap_without_nesting():
    """gloo's send span starts inside the c10d op and runs on past it (until wait()): each
    instant still belongs to exactly one event, the innermost open one."""
    from chakra_core.convert.pytorch.kineto import CpuEvent, _exclusive_times

    def event(name, ts, dur, tid=1):
        return CpuEvent(name, tid, float(ts), float(dur), None, None)

    step, call, send, inner, later = (event("ProfilerStep#1", 0, 100), event("c10d::send", 10, 20),
                                      event("gloo:send", 20, 40), event("aten::empty", 40, 10),
                                      event("ProfilerStep#2", 130, 10))
    other_thread = event("gloo:all_reduce", 0, 500, tid=2)
    _exclusive_times([later, inner, send, call, step, other_thread])
    assert (step.exclusive, call.exclusive, send.exclusive, inner.exclusive) == (50, 10, 30, 10)
    assert sum(e.exclusive for e in (step, call, send, inner, later)) == 110  # the union of the spans
    assert later.idle_before == 30 and step.idle_before == inner.idle_before == 0 and other_thread.exclusive == 500


def test_a_thread_waiting_in_no_operator_for_communication_is_not_compute():
    """DDP at the end of backward waits for its bucket all-reduces in no operator: the stretch
    of the step's own time that the all-reduce spans, when the thread goes on as soon as it
    ends, is waiting (the simulator makes it from the dependency), not the step's compute. A
    stretch after which the thread goes on long after the work ended keeps its time."""
    from chakra_core.convert.pytorch.hosttime import RESUMED_AFTER_WORK_US, CallTime, remove_waiting_between_ops
    from chakra_core.convert.pytorch.kineto import CpuEvent, _exclusive_times

    def event(name, ts, dur):
        return CpuEvent(name, 1, float(ts), float(dur), None, None)

    late = 3 * RESUMED_AFTER_WORK_US
    step, backward, optimizer = event("ProfilerStep#1", 0, 10_000 + late), event("mm", 0, 1000), event("add_", 6000, 500)
    later = event("add_", 6500 + late, 100)  # goes on long after the second work ended
    events = [step, backward, optimizer, later]
    after_children = _exclusive_times(events)
    assert step.exclusive == 10_000 + late - 1600
    result = CallTime()
    work = {7: (500, 5900), 8: (6000, 6400)}  # on gloo's thread; the second ends inside the optimizer op
    remove_waiting_between_ops(result, after_children, work, np.ones(len(events), bool))
    waited = 5900 - 1000  # from the end of backward to the end of the first all-reduce
    assert result.totals["waiting for communication between operators"] == waited
    assert step.exclusive == 10_000 + late - 1600 - waited and optimizer.exclusive == 500


@pytest.mark.parametrize("run", ["collectives-w2", "dlrm-w2", "dlrm-w4", "mlp_ddp-w2", "mlp_ddp-w4"])
def test_training_thread_time_is_kept_on_cpu_nodes_or_left_to_the_simulator_as_waiting(tmp_path, run):
    """Every microsecond of the training loop's thread (Kineto, first to last event) is either
    the duration of a CPU node on that thread or time the rank waited for peers that came
    later in a communication call, which the simulator makes itself: nothing lost, nothing
    counted twice."""
    result = convert_job(str(GLOO / run), str(tmp_path), "job")
    for rank, url in zip(result.ranks, result.et_files):
        rows = read_table(url).to_pylist()
        loop = next(r["tid"] for r in rows if r["name"].startswith("ProfilerStep#"))
        cpu_us = sum(r["duration_micros"] for r in rows if r["is_cpu_op"] and r["tid"] == loop)
        kineto = read_kineto(str(GLOO / run / f"rank{rank}.kineto.json.gz"))
        thread = next(e.tid for e in kineto.cpu if e.name.startswith("ProfilerStep#"))
        events = [e for e in kineto.cpu if e.tid == thread]
        span = max(e.ts + e.dur for e in events) - min(e.ts for e in events)
        time_us = result.reports[rank]["time_us"]
        waiting = time_us["waiting for peers, left to the simulator"]
        between_ops = time_us.get("waiting for communication between operators, left to the simulator", 0)
        assert abs(cpu_us + waiting + between_ops - span) < 0.002 * span, (rank, cpu_us, waiting, between_ops, span)
        assert time_us["blocked on communication"] == pytest.approx(
            waiting + time_us["own duration of communication calls kept"], abs=2)


def test_a_blocking_call_is_host_time_then_its_communication_then_its_own_duration(tmp_path):
    """collectives-w2: the recorder's chakra::pg annotation stays as a CPU node before the
    communication node, holding the call's host time; a CPU node named after the call's gloo
    work follows it with the call's own duration (the shortest wait among its ranks: the same
    on both); the thread goes on after that. An isend / irecv whose wait() comes later is waited
    for by the first node the thread ran after it."""
    result = convert_job(str(GLOO / "collectives-w2"), str(tmp_path), "job")
    tables = [read_table(url).to_pylist() for url in result.et_files]
    own = [r["time_us"]["own duration of communication calls kept"] for r in result.reports]
    assert own[0] == own[1] > 10_000  # µs: gloo's time per call, tens of milliseconds over 56 calls
    durations = []
    for rows in tables:
        by_id = {r["id"]: r for r in rows}
        comm = [r for r in rows if r["type"] in (COLL, SEND, RECV)]
        annotations = [r for r in rows if r["name"].startswith("chakra::pg=")]
        assert annotations and all(r["type"] == COMP and r["is_cpu_op"] for r in annotations)
        first = next(r for r in comm if r["comm_type"] == 0)  # the first all_reduce: blocking
        before = by_id[first["ctrl_deps"][0]]
        assert before["name"] == "chakra::pg=0" and before["duration_micros"] > 20
        (after,) = [r for r in rows if r["ctrl_deps"] == [first["id"]]]
        assert after["name"] == "gloo:all_reduce" and after["is_cpu_op"] and after["id"] > first["id"]
        assert any(r["ctrl_deps"] == [after["id"]] and r["is_cpu_op"] for r in rows)
        durations.append(after["duration_micros"])
        isend = next(r for r in comm if r["type"] == SEND and r["comm_tag"] == 2)
        assert not any(r["ctrl_deps"] == [isend["id"]] for r in rows)  # a side branch ...
        assert any(isend["id"] in r["data_deps"] and r["is_cpu_op"] for r in rows)  # ... waited for later
        blocking_recv = next(r for r in comm if r["type"] == RECV and r["comm_tag"] == 1)
        assert [r["name"] for r in rows if r["ctrl_deps"] == [blocking_recv["id"]]] == ["gloo:recv"]
    assert durations[0] == durations[1] > 0


def test_one_rank_alone_keeps_no_wait_as_host_time():
    """Without its peers' traces a rank's blocked time cannot be split into the call's own
    duration and waiting: none of it becomes host time."""
    run = GLOO / "collectives-w2"
    conversion = RankConversion(read_host_trace(str(run / "rank0.et.json.gz")),
                                read_kineto(str(run / "rank0.kineto.json.gz")), 0)
    conversion.emit()
    time_us = conversion.report.time_us
    assert time_us["own duration of communication calls kept"] == 0
    assert time_us["waiting for peers, left to the simulator"] == time_us["blocked on communication"] > 0


def test_unprofiled_step_times_come_from_every_ranks_file_or_not_at_all(tmp_path):
    """rank<R>.timing.json beside the traces (TraceRecorder timed_steps): per step the slowest
    rank's time goes into the report; a rank without one leaves it out, with a note saying so;
    a malformed one, or one in another program's format, is set aside with its reason (file
    and key) while the traces convert."""
    import shutil

    src = tmp_path / "run"
    shutil.copytree(GLOO / "mlp_ddp-w2", src)
    (src / "rank0.timing.json").write_text('{"steps_ns": [5000000, 7000000]}')
    alone = convert_job(str(src), str(tmp_path / "a"), "j")  # rank 1 has none
    assert alone.unprofiled_step_ns is None and any("ranks 1 missing" in n for n in alone.input_notes)
    (src / "rank1.timing.json").write_text('{"steps_ns": [6000000, 4000000, 9000000]}')
    result = convert_job(str(src), str(tmp_path / "b"), "j")
    assert result.unprofiled_step_ns == [6000000, 7000000] and not result.input_notes
    assert json.loads((tmp_path / "b" / "j.report.json").read_text())["unprofiled_step_ns"] == [6000000, 7000000]
    for text, reason in (('{"steps_ns": [6000000, -1]}', r"rank1\.timing\.json: steps_ns: expected a list"),
                         ("step,ns\n1,6000000\n", r"rank1\.timing\.json: neither valid JSON nor valid YAML|"
                                                    r"rank1\.timing\.json: expected a mapping")):
        (src / "rank1.timing.json").write_text(text)
        kept = convert_job(str(src), str(tmp_path / "c"), "j")
        assert kept.unprofiled_step_ns is None and kept.ranks == [0, 1]
        [(url, why)] = kept.set_aside.items()
        assert url.endswith("/run/rank1.timing.json") and re.search(reason, why)
