"""The recorded timeline (chakra timeline --recorded, viz.timeline.recorded_timeline) of shipped
runs: every node of every rank at the start time and duration its converted trace holds, a
track per host thread and device stream, collectives named with their bytes; and a report's
job page linking it, the day before's and the simulated one, with a note for a job too big."""

from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

import pytest
from datapaths import GLOO, GPU_H200, JAX_CPU
from table_rows import complete

from chakra_core.cli import main
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.etfile import read_table
from chakra_core.format.nodetypes import COLL
from chakra_core.generate.workloads import generate
from chakra_core.terminal import human_bytes
from chakra_core.viz.report_job import MAX_TIMELINE_NODES
from chakra_core.viz.timeline import validate_trace_events
from pipeline import tables

RUNS = {"gpu-h200": GPU_H200 / "mlp_gloo2", "pytorch-gloo": GLOO / "mlp_ddp-w2", "jax-cpu": JAX_CPU / "mlp_dp"}
DAYS = ("2026-11-24", "2026-11-25")


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, str]:
    """Each shipped run converted once: its prefix."""
    out = tmp_path_factory.mktemp("converted")
    for name, run in RUNS.items():
        assert main(["convert", str(run), "-o", str(out / name), "--prefix", "job"]) == 0
    return {name: str(out / name / "job") for name in RUNS}


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _recorded_nodes(prefix: str) -> dict[tuple[int, int], dict]:
    """(rank, node id) -> the node's row with its recorded start and duration in ns, read from the
    rank files' columns: start_time_micros, duration_ns where kept, else duration_micros."""
    nodes, rank = {}, 0
    while Path(f"{prefix}.{rank}.et").exists():
        for r in read_table(f"{prefix}.{rank}.et").to_pylist():
            if r["start_time_micros"]:
                ns = r["duration_ns"] if r["duration_ns"] is not None else r["duration_micros"] * 1000
                nodes[(rank, r["id"])] = {**r, "start_ns": r["start_time_micros"] * 1000, "ns": ns}
        rank += 1
    return nodes


@pytest.mark.parametrize("run", RUNS)
def test_the_recorded_spans_are_the_traces_recorded_times(converted, run, tmp_path):
    out = tmp_path / "recorded.json.gz"
    assert main(["timeline", "--recorded", converted[run], "-o", str(out)]) == 0
    doc = _load(out)
    assert validate_trace_events(doc) == []
    nodes = _recorded_nodes(converted[run])
    events = {(e["pid"], e["args"]["node_id"]): e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert events.keys() == nodes.keys()  # every timed node of every rank, once
    origin = min(n["start_ns"] for n in nodes.values())
    assert doc["otherData"]["time_origin_us"] * 1000 == origin
    for key, node in nodes.items():
        span = events[key]
        assert (round(span["ts"] * 1000), round(span["dur"] * 1000)) == (node["start_ns"] - origin, node["ns"]), key
    ranks = {rank for rank, _ in nodes}
    processes = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert processes == {rank: f"Rank {rank}" for rank in ranks}


@pytest.mark.parametrize("run", RUNS)
def test_a_track_per_host_thread_and_device_stream_and_collectives_say_their_bytes(converted, run, tmp_path):
    out = tmp_path / "recorded.json.gz"
    assert main(["timeline", "--recorded", converted[run], "-o", str(out)]) == 0
    doc = _load(out)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    events = {(e["pid"], e["args"]["node_id"]): e for e in doc["traceEvents"] if e["ph"] == "X"}
    collectives = 0
    for (rank, node_id), node in _recorded_nodes(converted[run]).items():
        span = events[(rank, node_id)]
        track = re.sub(r" \(\d+\)$", "", threads[(rank, span["tid"])])  # a sub-track of overlapping work
        if node["type"] == COLL:
            collectives += 1
            kind = COMM_TYPES[node["comm_type"]].lower()
            assert track == "communication" and span["args"]["comm_size"] == node["comm_size"]
            assert span["name"] == f"{node['name']} ({kind}, {human_bytes(node['comm_size'])})"
        elif node["is_cpu_op"] is False:
            assert track == f"stream {node['stream']}"
        else:
            assert track == ("CPU" if node["tid"] is None else f"CPU thread {node['tid']}")
    assert collectives > 0


def test_device_work_keeps_its_nanoseconds(converted, tmp_path):
    """Kineto times kernels to the ns; the H200 run's spans keep that (not whole microseconds)."""
    out = tmp_path / "recorded.json.gz"
    assert main(["timeline", "--recorded", converted["gpu-h200"], "-o", str(out)]) == 0
    kernels = [e for e in _load(out)["traceEvents"] if e["ph"] == "X" and e["args"]["kind"] == "kernel"]
    assert sum(round(e["dur"] * 1000) % 1000 != 0 for e in kernels) > len(kernels) // 2


def test_a_prefix_without_rank_files_is_one_line(tmp_path, capsys):
    assert main(["timeline", "--recorded", str(tmp_path / "none"), "-o", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no rank files" in err and not (tmp_path / "t.json").exists()


def test_a_job_without_recorded_times_is_one_line(tmp_path, capsys):
    generate("mlp", 2).job().write(str(tmp_path), "gen")  # a generated job: no start times
    assert main(["timeline", "--recorded", str(tmp_path / "gen"), "-o", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no node has a recorded start time" in err and not (tmp_path / "t.json").exists()


# ------------------------------------------------------------------ the job page


def _warehouse(root: Path, prefix: str) -> str:
    """Two days of one real job (pytorch-gloo's mlp_ddp-w2, converted) and of a job too big to draw;
    a job new on the second day (the same traces)."""
    url = str(root / "warehouse")
    ranks = sum(1 for _ in Path(prefix).parent.glob("job.*.et"))
    for day in DAYS:
        folder = Path(url) / "traces" / f"date={day}" / "job=gloo-w2"
        folder.mkdir(parents=True)
        for rank in range(ranks):
            (folder / f"job.{rank}.et").write_bytes(Path(f"{prefix}.{rank}.et").read_bytes())
        jobs = [("gloo-w2", 500), ("big-job", MAX_TIMELINE_NODES + 1)] + [("new-job", 500)] * (day == DAYS[1])
        rows = [{"job_id": job, "rank": rank, "nodes": nodes, "source_format": "pytorch_et",
                 "path": f"{folder}/job.{rank}.et"} for job, nodes in jobs for rank in range(ranks)]
        for name in tables.TABLES:
            chosen = rows if name == "traces" else []
            tables.write_day(url, name, day, tables.from_rows(name, [complete(name, r) for r in chosen]))
    return url


def test_the_job_page_links_the_recorded_timeline_the_day_befores_and_the_simulated(converted, tmp_path):
    warehouse = _warehouse(tmp_path, converted["pytorch-gloo"])
    assert main(["report", "--warehouse", warehouse, "--date", DAYS[0], "--date", DAYS[1]]) == 0
    folder = Path(warehouse) / "reports" / f"date={DAYS[1]}"
    page = html.unescape((folder / "job=gloo-w2.html").read_text())
    links = re.findall(r'href="([^"]+\.json\.gz)"', page)
    assert links == ["job=gloo-w2.timeline.json.gz", "job=gloo-w2.recorded.json.gz",
                     f"../date={DAYS[0]}/job=gloo-w2.recorded.json.gz"]
    assert all((folder / link).exists() for link in links)
    recorded = _load(folder / "job=gloo-w2.recorded.json.gz")
    assert validate_trace_events(recorded) == [] and recorded["otherData"]["npus"] == 2
    assert _load(folder / links[0])["otherData"]["source"] == "simulation"
    assert _load(folder / links[2])["otherData"]["prefix"].endswith(f"date={DAYS[0]}/job=gloo-w2/job")
    # the page's file is the command's
    out = tmp_path / "cli.json.gz"
    prefix = str(Path(warehouse) / "traces" / f"date={DAYS[1]}" / "job=gloo-w2" / "job")
    assert main(["timeline", "--recorded", prefix, "-o", str(out)]) == 0
    assert _load(out) == recorded
    # the first day has no day before: its page links its own recorded timeline only
    first = (Path(warehouse) / "reports" / f"date={DAYS[0]}" / "job=gloo-w2.html").read_text()
    assert re.findall(r'href="([^"]+\.json\.gz)"', first) == links[:2]
    new = re.findall(r'href="([^"]+\.json\.gz)"', (folder / "job=new-job.html").read_text())
    assert new == ["job=new-job.timeline.json.gz", "job=new-job.recorded.json.gz"]  # no day before to link
    big = html.unescape((folder / "job=big-job.html").read_text())
    assert f"No recorded timeline: the job has {2 * (MAX_TIMELINE_NODES + 1):,} trace nodes" in big
    assert not (folder / "job=big-job.recorded.json.gz").exists()
