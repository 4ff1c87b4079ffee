"""chakra_core/viz/timeline.py: Chrome Trace Event (Perfetto) timelines from simulations, traces and logs."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest
from datapaths import MICROBENCHMARKS, REFERENCE_CONFIGS

from chakra_core.format.etfile import read_table
from chakra_core.format.job import Job, read_ranks
from chakra_core.sim.engine import NpuResult, SimResult, TimelineEvent
from chakra_core.sim.files import simulate_files
from chakra_core.viz.timeline import (
    timeline_from_log,
    timeline_from_simulation,
    timeline_from_traces,
    validate_trace_events,
    write_timeline,
)
from chakra_core.viz.timeline_cli import add_timeline_parser

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REFERENCE_CONFIGS
NETWORK = str(CONFIGS / "Ring_8npus.yml")
SYSTEM = str(CONFIGS / "Ring_4chunks.json")
MICRO = MICROBENCHMARKS / "all_reduce" / "8npus_1MB" / "all_reduce"
GLOO = REPO / "datasets" / "pytorch-gloo" / "mlp_ddp-w2"



def _events(doc, ph="X"):
    return [e for e in doc["traceEvents"] if e["ph"] == ph]


def _processes(doc) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in _events(doc, "M") if e["name"] == "process_name"}


def _threads(doc) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in _events(doc, "M") if e["name"] == "thread_name"}


def _roundtrip(doc) -> dict:
    return json.loads(json.dumps(doc))  # what a file holds: plain JSON


# ------------------------------------------------------------------ simulations


def test_microbenchmark_all_reduce_8_npus():
    result, _ = simulate_files(str(MICRO), NETWORK, SYSTEM, record_timeline=True)
    doc = _roundtrip(timeline_from_simulation(result))
    assert validate_trace_events(doc) == []
    assert doc["displayTimeUnit"] == "ns"
    assert _processes(doc) == {n: f"NPU {n}" for n in range(8)}
    threads = _threads(doc)
    assert {pid for pid, _ in threads} == set(range(8))
    xs = _events(doc)
    assert len(xs) == 8 and {e["cat"] for e in xs} == {"comm"}
    assert all(threads[(e["pid"], e["tid"])] == "comm" for e in xs)
    e = xs[0]
    assert e["args"]["bytes"] == 1048576 and e["args"]["kind"] == "all_reduce" and "node_id" in e["args"]
    finish = max(ev["ts"] + ev["dur"] for ev in xs)
    assert finish == pytest.approx(result.finish_ns / 1000)
    assert doc["otherData"]["finish_ns"] == result.finish_ns


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory):
    from tools import make_drop as md
    job = md.generate_job(0)  # data_parallel, 8 NPUs
    assert job.family == "data_parallel" and job.npus == 8
    folder = tmp_path_factory.mktemp("dp")
    Job(job.tables, name="dp").write(str(folder))
    return str(folder / "dp")


def test_generated_data_parallel_job(data_parallel):
    result, _ = simulate_files(data_parallel, NETWORK, SYSTEM, record_timeline=True)
    doc = _roundtrip(timeline_from_simulation(result, read_ranks(data_parallel, 8)))
    assert validate_trace_events(doc) == []
    assert len(_processes(doc)) == 8
    threads = _threads(doc)
    for pid in range(8):
        assert {"cpu", "compute", "comm"} <= {name for (p, _), name in threads.items() if p == pid}
    xs = _events(doc)
    assert len(xs) == len(result.timeline)
    # compute and communication overlap in time on NPU 0 (on different tracks)
    comm = [e for e in xs if e["pid"] == 0 and e["cat"] == "comm"]
    comp = [e for e in xs if e["pid"] == 0 and e["cat"] == "compute"]
    assert any(c["ts"] < k["ts"] + k["dur"] and k["ts"] < c["ts"] + c["dur"] for c in comm for k in comp)
    # dependency arrows cross tracks on one NPU, in s/f pairs
    starts, finishes = _events(doc, "s"), _events(doc, "f")
    assert starts and len(starts) == len(finishes) == doc["otherData"]["flows"]
    assert all(f["bp"] == "e" for f in finishes)
    by_id = {s["id"]: s for s in starts}
    assert all(by_id[f["id"]]["pid"] == f["pid"] and by_id[f["id"]]["tid"] != f["tid"] for f in finishes)
    capped = timeline_from_simulation(result, read_ranks(data_parallel, 8), max_flows=5)
    assert capped["otherData"]["flows"] == 5 and capped["otherData"]["flows_dropped"] > 0
    assert len(_events(capped, "s")) == 5


def test_concurrent_comm_ops_get_lanes():
    events = [
        TimelineEvent(0, 1, "ar_a", "comm", "all_reduce", 0, 10_000, 100),
        TimelineEvent(0, 2, "ar_b", "comm", "all_reduce", 5_000, 15_000, 100),  # partial overlap
        TimelineEvent(0, 3, "ar_c", "comm", "all_reduce", 6_000, 8_000, 100),  # inside both: concurrent
        TimelineEvent(0, 4, "ar_d", "comm", "all_reduce", 16_000, 17_000, 100),  # free again: first lane
        TimelineEvent(0, 5, "gemm", "compute", "compute", 0, 20_000, 0),
        TimelineEvent(1, 6, "ar_a", "comm", "all_reduce", 0, 10_000, 100),
    ]
    result = SimResult("unaware", [NpuResult(0), NpuResult(1)], events)
    doc = _roundtrip(timeline_from_simulation(result))
    assert validate_trace_events(doc) == []
    threads = _threads(doc)
    lane = {e["args"]["node_id"]: threads[(e["pid"], e["tid"])] for e in _events(doc)}
    assert lane == {1: "comm", 2: "comm (2)", 3: "comm (3)", 4: "comm", 5: "compute", 6: "comm"}
    ev = {e["args"]["node_id"]: e for e in _events(doc)}
    assert ev[2]["ts"] == 5 and ev[2]["dur"] == 10 and ev[2]["name"] == "ar_b" and ev[2]["cat"] == "comm"


def test_simulation_without_timeline_is_refused():
    with pytest.raises(ValueError, match="record_timeline"):
        timeline_from_simulation(SimResult("unaware", [], None))


# ------------------------------------------------------------------ real traces


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory):
    from chakra_core.convert.pytorch.job import convert_job

    out = tmp_path_factory.mktemp("gloo")
    return convert_job(str(GLOO), str(out), "t").et_files


def test_converted_trace(gloo_job):
    doc = _roundtrip(timeline_from_traces(gloo_job))
    assert validate_trace_events(doc) == []
    assert _processes(doc) == {0: "Rank 0", 1: "Rank 1"}
    names = set(_threads(doc).values())
    assert "communication" in names and "CPU thread 1" in names
    total = sum(read_table(u).num_rows for u in gloo_job)
    other = doc["otherData"]
    assert other["skipped_zero_start"] > 0
    assert len(_events(doc)) + other["skipped_zero_start"] == total
    comm = [e for e in _events(doc) if e["cat"] == "communication"]
    assert comm and all("comm_size" in e["args"] for e in comm)
    assert min(e["ts"] for e in _events(doc)) == 0  # rebased to the job's first node
    assert other["time_origin_us"] > 0
    # CPU operators nest (call stack) on their thread
    xs = [e for e in _events(doc) if e["pid"] == 0 and _threads(doc)[(0, e["tid"])] == "CPU thread 1"]
    assert any(a["ts"] <= b["ts"] and b["ts"] + b["dur"] <= a["ts"] + a["dur"] and a is not b
               for a in xs[:50] for b in xs[:50])


# ------------------------------------------------------------------ reference visualizer logs

PLAIN_LOG = """\
some unrelated line
issue,sys->id=0,tick=1000,node->id=1,node->name=COMP_NODE_gemm
issue,sys->id=0,tick=1500,node->id=2,node->name=MEM_LOAD_NODE_LOCAL_MEMORY_x
callback,sys->id=0,tick=3500,node->id=1,node->name=COMP_NODE_gemm
callback,sys->id=0,tick=2000,node->id=2,node->name=MEM_LOAD_NODE_LOCAL_MEMORY_x
issue,sys->id=1,tick=0,node->id=3,node->name=COMM_COLL_NODE_ar
issue,sys->id=1,tick=500,node->id=4,node->name=COMM_COLL_NODE_ar2
callback,sys->id=1,tick=2000,node->id=3,node->name=COMM_COLL_NODE_ar
callback,sys->id=1,tick=2500,node->id=4,node->name=COMM_COLL_NODE_ar2
issue,sys->id=1,tick=3000,node->id=5,node->name=mystery
callback,sys->id=1,tick=3100,node->id=5,node->name=mystery
issue,sys->id=1,tick=4000,node->id=6,node->name=never_finishes
"""


def _spdlog(text: str) -> str:
    return "".join(f"[2025-01-15 10:00:00.000] [D] workload: {line}\n" if line.startswith(("issue", "callback"))
                   else line + "\n" for line in text.splitlines())


@pytest.mark.parametrize("form", ["plain", "spdlog"])
def test_log(tmp_path, form):
    path = tmp_path / "log.csv"
    path.write_text(PLAIN_LOG if form == "plain" else _spdlog(PLAIN_LOG))
    doc = _roundtrip(timeline_from_log(str(path), 1000))  # 1000 MHz: 1000 cycles = 1 us
    assert validate_trace_events(doc) == []
    threads = _threads(doc)
    ev = {(e["pid"], e["args"]["node_id"]): e for e in _events(doc)}
    assert set(ev) == {(0, 1), (0, 2), (1, 3), (1, 4), (1, 5)}
    assert (ev[(0, 1)]["ts"], ev[(0, 1)]["dur"]) == (1, 2.5)
    assert (ev[(0, 2)]["ts"], ev[(0, 2)]["dur"]) == (1.5, 0.5)
    assert threads[(0, ev[(0, 1)]["tid"])] == "compute"
    assert threads[(0, ev[(0, 2)]["tid"])] == "local memory"
    assert threads[(1, ev[(1, 3)]["tid"])] == "comm"
    assert threads[(1, ev[(1, 4)]["tid"])] == "comm (2)"  # two collectives in flight
    assert threads[(1, ev[(1, 5)]["tid"])] == "other"
    assert ev[(1, 3)]["name"] == "COMM_COLL_NODE_ar"
    assert _processes(doc) == {0: "NPU 0", 1: "NPU 1"}
    assert doc["otherData"]["unfinished_issues"] == 1


def test_log_frequency(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("issue,a=0,b=3000,c=7,d=COMP_NODE\ncallback,a=0,b=4500,c=7,d=COMP_NODE\n")
    (e,) = _events(timeline_from_log(str(path), 1500))  # 1.5 GHz
    assert (e["ts"], e["dur"]) == (2, 1)
    with pytest.raises(ValueError):
        timeline_from_log(str(path), 0)


# ------------------------------------------------------------------ validator


def _doc(*xs, threads=((0, 1),)):
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "NPU 0"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": p, "tid": t, "args": {"name": f"t{t}"}} for p, t in threads]
    return {"traceEvents": meta + [{"name": "x", "ph": "X", "pid": 0, "tid": 1, **x} for x in xs]}


def test_validator_accepts_nesting_and_sequences():
    assert validate_trace_events(_doc({"ts": 0, "dur": 10}, {"ts": 2, "dur": 3}, {"ts": 5, "dur": 5},
                                      {"ts": 10, "dur": 1}, {"ts": 11, "dur": 0})) == []


def test_validator_catches_partial_overlap():
    problems = validate_trace_events(_doc({"ts": 0, "dur": 10}, {"ts": 5, "dur": 10}))
    assert len(problems) == 1 and "partially overlaps" in problems[0]
    # the same events on different threads are fine
    doc = _doc({"ts": 0, "dur": 10}, {"ts": 5, "dur": 10, "tid": 2}, threads=((0, 1), (0, 2)))
    assert validate_trace_events(doc) == []


def test_validator_catches_missing_metadata():
    problems = validate_trace_events(_doc({"ts": 0, "dur": 1, "tid": 2}))
    assert any("tid 2" in p and "thread_name" in p for p in problems)
    doc = _doc({"ts": 0, "dur": 1})
    doc["traceEvents"][0]["args"] = {}
    problems = validate_trace_events(doc)
    assert any("process_name" in p for p in problems)


def test_validator_catches_missing_key_and_bad_numbers():
    problems = validate_trace_events(_doc({"ts": 0}))
    assert any("missing" in p and "dur" in p for p in problems)
    problems = validate_trace_events(_doc({"ts": -1, "dur": 1}, {"ts": 0, "dur": "5"}))
    assert len(problems) == 2 and all("non-negative" in p for p in problems)
    assert validate_trace_events({"events": []}) != []


# ------------------------------------------------------------------ output and command line


def test_write_timeline_gzip(tmp_path):
    doc = _doc({"ts": 0, "dur": 1})
    write_timeline(doc, str(tmp_path / "t.json.gz"))
    assert json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes())) == doc
    write_timeline(doc, str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text()) == doc


def _cli(argv) -> int:
    parser = argparse.ArgumentParser(prog="chakra")
    add_timeline_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.run(args)


def test_cli_workload(tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert _cli(["timeline", "--workload", str(MICRO), "--network", NETWORK, "--system", SYSTEM,
                 "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert validate_trace_events(doc) == [] and len(_processes(doc)) == 8
    line = capsys.readouterr().out.strip()
    assert "8 events" in line and "8 NPUs" in line and str(out) in line
    assert _cli(["timeline", "--workload", str(MICRO), "-o", str(out)]) == 2


def test_cli_trace_and_log(tmp_path, gloo_job, capsys):
    out = tmp_path / "trace.json.gz"
    assert _cli(["timeline", "--trace", *gloo_job, "-o", str(out)]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert validate_trace_events(doc) == [] and len(_processes(doc)) == 2
    log = tmp_path / "log.csv"
    log.write_text(PLAIN_LOG)
    out = tmp_path / "log.json"
    assert _cli(["timeline", "--log", str(log), "--npu-frequency", "1000", "-o", str(out)]) == 0
    assert len(_events(json.loads(out.read_text()))) == 5
    assert "5 events, 2 NPUs" in capsys.readouterr().out
    assert _cli(["timeline", "--log", str(log), "-o", str(out)]) == 2
    with pytest.raises(SystemExit):
        _cli(["timeline", "--log", str(log), "--trace", gloo_job[0], "-o", str(out)])
