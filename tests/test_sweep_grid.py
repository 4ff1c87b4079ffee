"""Grid sweeps (pipeline/sweep/file.py, pipeline/sweep/run.py, flows/sweep.py): a sweep file's grid
expanded and checked, then simulated on local Ray over small generated jobs, resumably."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from chakra_core.generate.workloads import generate
from chakra_core.sim import reference
from chakra_core.sim.config import load_system
from pipeline.sweep_point import network_values
from pipeline.sweep.file import SweepError, load_sweep_file
from pipeline.sweep.jobs import Sources
from pipeline.sweep.run import batches, plan
from pipeline.sweep.where import WhereError

REPO = Path(__file__).resolve().parents[1]
RING_SYSTEM = REPO / "pipeline" / "sweeps" / "ring_system.json"
# 2 topologies x 2 NPU counts x 3 bandwidths
GRID = f"""system: {RING_SYSTEM}
grid:
  topology: [Ring, Switch]
  npus_count: [4, 8]
  bandwidth: [50, 100, 200]
"""


def _sweep_file(folder: Path, text: str, name: str = "grid.yaml") -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Path:
    """Three small generated jobs, each in its own folder: <name>/<name>.<rank>.et."""
    root = tmp_path_factory.mktemp("jobs")
    for name, workload, npus, options in (("mlp4", "mlp", 4, {}), ("dlrm4", "dlrm", 4, {}),
                                          ("mlp8", "mlp", 8, {"layers": 2})):
        generate(workload, npus, **options).write(str(root / name), name)
    return root


def _rows(warehouse: Path, name: str) -> list[dict]:
    return duckdb.sql(f"SELECT * FROM read_parquet('{warehouse}/tables/sweep_results/sweep={name}/*.parquet')"
                      ).to_arrow_table().to_pylist()


# ------------------------------------------------------------------ the file: no Ray


def test_a_grid_is_every_combination_named_from_its_values(tmp_path):
    sweep = load_sweep_file(_sweep_file(tmp_path, GRID))
    assert len(sweep.points) == 12 and sweep.columns == ["topology_0", "npus_count_0", "bandwidth_0"]
    first = sweep.points[0]
    assert first.name == "topology=Ring npus_count=4 bandwidth=50"
    assert network_values(first.network) == {"topology": ["Ring"], "npus_count": [4], "bandwidth": [50.0],
                                             "latency": [500.0]}
    assert first.system == load_system(str(RING_SYSTEM))
    assert len({p.key for p in sweep.points}) == 12


def test_multi_dimensional_values_where_and_cost(tmp_path):
    sweep = load_sweep_file(_sweep_file(tmp_path, """
grid:
  - {topology: [[Ring]], npus_count: [4, 16], bandwidth: [100]}
  - {topology: [[Ring, Switch]], npus_count: [4, 16], bandwidth: [100, [200, 50]],
     all-reduce-implementation: [ring, direct]}
where: ["total_npus <= 64", "bandwidth_1 <= bandwidth_0", "total_npus >= traced_npus"]
cost: {bandwidth: 0.01, npus: 1}
"""))
    ring_switch = [p for p in sweep.points if p.topology == "RingxSwitch"]
    # a single value is every dimension's; 16 x 16 NPUs is pruned; [100, 100] passes bandwidth_1 <= bandwidth_0
    assert {tuple((d.npus, d.bandwidth_gbps) for d in p.network.dims) for p in ring_switch} == {
        ((4, 100), (4, 100)), ((4, 200), (4, 50))}
    assert all([i.name for i in p.system.all_reduce] in (["ring", "ring"], ["direct", "direct"]) for p in ring_switch)
    assert "bandwidth_1" in sweep.columns and "all_reduce_implementation_1" in sweep.columns
    ring = next(p for p in sweep.points if p.topology == "Ring")  # the reference system's, filled in
    assert ring.params["all_reduce_implementation_0"] == "ring" and ring.params.get("bandwidth_1") is None
    assert [c.text for c in sweep.where] == ["total_npus >= traced_npus"]  # checked per job
    assert len(sweep.points_for(16)) < len(sweep.points_for(4))
    assert sweep.cost == {"bandwidth": 0.01, "npus": 1.0}


@pytest.mark.parametrize("text, message", [
    ("grid: {bandwith: [50], npus_count: [8]}", r"grid: bandwith: unknown key \(a typo\?\)"),
    ("grid: {topology: [[Ring, Switch]], npus_count: [[8, 2, 2]]}",
     r"grid: npus_count: \[8, 2, 2\] has 3 dimension\(s\) but topology \['Ring', 'Switch'\] has 2"),
    ("grid: {topology: [[Ring]], bandwidth: [[50, 50]], npus_count: [8]}", r"grid: bandwidth: \[50, 50\] has 2"),
    ("grid: {npus_count: [8], bandwidth: [-5]}", r"network bandwidth\[0\]: .*greater than 0"),
    ("grid: {npus_count: [8], active-chunks-per-dimension: [0]}", r"system active-chunks-per-dimension: "),
    ("grid: {npus_count: [8], mode: [fast]}", r"grid.mode: 'fast' is not one of unaware, aware"),
    ("grid: {bandwidth: [50]}", r"grid: npus_count: missing"),
    ("grid: {npus_count: 8}", r"grid: npus_count: expected a non-empty list of values, got 8"),
    ("grid: {npus_count: [8]}\ncost: {watts: 1}", r"cost.watts: unknown key"),
    ("grids: {npus_count: [8]}", r"grids: unknown key"),
    ("systems: [{name: a, network: native-ring}]", r"systems\[0\]\.system: missing$"),
    ("systems: [{name: a, network: native-ring, system: reference, mode: fast}]",
     r"systems\[0\]\.mode: Input should be 'unaware' or 'aware', got 'fast'$"),
    ("grid: {npus_count: [8]}\ncost: {npus: true, bandwidth: -1}",  # every problem, each by its key
     r"cost\.npus: Input should be a valid number, got True; cost\.bandwidth: .* greater than or equal to 0, got -1$"),
    ("where: [total_npus > 1]", r"grid\.yaml: expected `systems: \[\{name, network, system\}, \.\.\.\]` or `grid"),
])
def test_a_bad_sweep_file_is_one_line_naming_the_key(tmp_path, text, message):
    with pytest.raises(SweepError, match=message) as raised:
        load_sweep_file(_sweep_file(tmp_path, text))
    assert "\n" not in str(raised.value) and str(raised.value).startswith(str(tmp_path))


def test_where_is_parsed_not_evaluated(tmp_path):
    with pytest.raises(WhereError, match=r"where\[0\]: totl_npus: unknown name"):
        load_sweep_file(_sweep_file(tmp_path, "grid: {npus_count: [8]}\nwhere: ['totl_npus <= 4']"))
    with pytest.raises(WhereError, match="is not NAME OP VALUE"):
        load_sweep_file(_sweep_file(tmp_path, "grid: {npus_count: [8]}\nwhere: ['__import__(\"os\")']"))
    sweep = load_sweep_file(_sweep_file(tmp_path, "grid: {npus_count: [8], topology: [Ring, Switch]}\n"
                                                   "where: ['topology_0 != Switch']"))
    assert [p.topology for p in sweep.points] == ["Ring"]


def test_the_point_limit_refuses(tmp_path, jobs):
    path = _sweep_file(tmp_path, GRID)
    with pytest.raises(SweepError, match="12 points exceed the limit of 10 .--max-points raises it."):
        load_sweep_file(path, max_points=10)
    with pytest.raises(SweepError, match=r"36 simulations \(3 jobs x 12 points\) exceed the limit of 20"):
        plan(load_sweep_file(path), Sources(folders=(str(jobs),)), max_points=20)
    values = ",".join(map(str, range(1, 102)))
    huge = f"grid: {{npus_count: [{values}], bandwidth: [{values}], latency: [{values}]}}"
    with pytest.raises(SweepError, match="1,030,301 combinations"):  # refused before expanding it
        load_sweep_file(_sweep_file(tmp_path, huge, "huge.yaml"))


def test_batches_hold_one_job_and_the_costliest_come_first(tmp_path, jobs):
    sweep = load_sweep_file(_sweep_file(tmp_path, GRID))
    planned = plan(sweep, Sources(folders=(str(jobs),)), 10_000)
    work = [(job, planned.points[job.job_id]) for job in planned.jobs]
    made = batches(work, cpus=2)
    assert sorted((j.job_id, p.key) for j, points in made for p in points) == sorted(
        (j.job_id, p.key) for j, points in work for p in points)
    costs = [sum(max(p.npus, j.npus) for p in points) for j, points in made]
    assert len(made) >= 8 and costs == sorted(costs, reverse=True)


def test_the_reference_system_file_is_the_reference_system():
    assert load_system(str(RING_SYSTEM)) == reference.reference_system()


# ------------------------------------------------------------------ on Ray, through the flow


@pytest.fixture(scope="module")
def ray_local():
    import ray
    import prefect  # noqa: F401  (needed: a missing dependency fails, not skips)
    from pipeline.cluster import start_ray

    ray.shutdown()
    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def _main(*argv: str) -> int:
    from flows.sweep import main

    return main(list(argv))


@pytest.mark.slow
def test_a_grid_sweep_gives_a_row_per_job_and_point_and_a_rerun_adds_nothing(tmp_path, jobs, ray_local, capsys):
    warehouse = tmp_path / "wh"
    argv = ["--jobs", str(jobs), "--sweep", _sweep_file(tmp_path, GRID), "--name", "bw", "--warehouse", str(warehouse)]
    assert _main(*argv) == 0
    rows = _rows(warehouse, "bw")
    assert len(rows) == 3 * 12 and {r["status"] for r in rows} == {"ok"}
    assert len({(r["job_id"], r["topology_0"], r["npus_count_0"], r["bandwidth_0"]) for r in rows}) == 36
    assert all(r["npus"] == r["npus_count_0"] and r["job_sha256"] and r["compute_ns"] >= 0 for r in rows)
    for job in ("mlp4", "dlrm4", "mlp8"):  # more bandwidth never makes a job slower on a fixed topology
        for topology in ("Ring", "Switch"):
            for npus in (4, 8):
                finish = [r["finish_ns"] for r in sorted(rows, key=lambda r: r["bandwidth_0"])
                          if (r["job_id"], r["topology_0"], r["npus_count_0"]) == (job, topology, npus)]
                assert len(finish) == 3 and finish == sorted(finish, reverse=True), (job, topology, npus, finish)
    parts = sorted(p.name for p in (warehouse / "tables" / "sweep_results" / "sweep=bw").iterdir())
    assert len(parts) == 1 and parts[0].startswith("part-0-")  # part-<n>-<run id>
    capsys.readouterr()
    assert _main(*argv) == 0  # the re-run finds every point done
    assert "0 simulations (0 ok), 36 already done" in capsys.readouterr().out
    assert sorted(p.name for p in (warehouse / "tables" / "sweep_results" / "sweep=bw").iterdir()) == parts
    from chakra_core.warehouse.query import open_warehouse, run_query

    con, _, _ = open_warehouse(str(warehouse))  # `chakra query` sees the parameter columns
    grouped = run_query(con, "SELECT topology_0, bandwidth_0, count(*) n FROM sweep_results GROUP BY ALL").to_pylist()
    assert len(grouped) == 6 and {r["n"] for r in grouped} == {6}


def test_a_bad_grid_key_is_one_line_and_exit_2(tmp_path, capsys):
    path = _sweep_file(tmp_path, "grid: {npus_count: [8], bandwith: [50]}")
    assert _main("--jobs", str(tmp_path), "--sweep", path, "--warehouse", str(tmp_path / "wh")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bandwith: unknown key" in err and "Traceback" not in err
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize("extra, message", [
    (("--name", "../x"), "--name '../x': a sweep's name is letters, digits"),
    (("--name", "a\nb"), "a sweep's name is letters, digits"),
])
def test_a_bad_sweep_name_is_refused_before_ray_starts(tmp_path, extra, message):
    path = _sweep_file(tmp_path, "grid: {npus_count: [8]}")  # a process of its own: all it says is one line
    run = subprocess.run([sys.executable, "-m", "flows.sweep", "--jobs", str(tmp_path), "--sweep", path,
                          "--warehouse", str(tmp_path / "wh"), *extra], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    assert "Ray" not in run.stderr and not (tmp_path / "wh").exists() and not (tmp_path / "x").exists()


def test_a_where_that_matches_nothing_is_refused(tmp_path, jobs):
    with pytest.raises(SweepError, match="where: no point of the grid meets every condition"):
        load_sweep_file(_sweep_file(tmp_path, "grid: {npus_count: [8, 16]}\nwhere: ['total_npus > 64']"))
    per_job = load_sweep_file(_sweep_file(tmp_path, "grid: {npus_count: [8]}\nwhere: ['traced_npus > 1000']"))
    with pytest.raises(SweepError, match=r"where: no point meets the conditions on traced_npus for any of the 3 jobs"):
        plan(per_job, Sources(folders=(str(jobs),)), max_points=100)


@pytest.mark.slow
def test_too_many_simulations_are_refused_before_any_starts(tmp_path, jobs):
    warehouse = tmp_path / "wh"  # a process of its own: the command's whole stderr, Prefect's lines included
    run = subprocess.run([sys.executable, "-m", "flows.sweep", "--jobs", str(jobs), "--sweep",
                          _sweep_file(tmp_path, GRID), "--warehouse", str(warehouse), "--max-points", "20"],
                         cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[-1] == ("sweep: plan: 36 simulations (3 jobs x 12 points) exceed the limit of 20 "
                                           "(--max-points raises it)")
    assert not (warehouse / "tables").exists()


@pytest.mark.slow
def test_a_failed_point_is_recorded_and_the_rest_go_on(tmp_path, jobs, ray_local):
    from pipeline.sweep.run import run_sweep

    broken = tmp_path / "broken"  # a job whose rank 1 is cut short
    for rank in (0, 1):
        data = (jobs / "mlp4" / f"mlp4.{rank}.et").read_bytes()
        (broken / "cut").mkdir(parents=True, exist_ok=True)
        (broken / "cut" / f"cut.{rank}.et").write_bytes(data if rank == 0 else data[: len(data) // 2])
    sweep = load_sweep_file(_sweep_file(tmp_path, f"system: {RING_SYSTEM}\n"
                                                   "grid: {npus_count: [4], bandwidth: [1.0e-300, 100]}\n"))
    sources = Sources(folders=(str(jobs / "mlp4"), str(broken)))
    result = run_sweep(sweep, plan(sweep, sources, 100), str(tmp_path / "wh"), "f")
    rows = {(r["job_id"], r["bandwidth_0"]): r for r in _rows(tmp_path / "wh", "f")}
    assert result.status == {"ok": 1, "failed": 3} and len(rows) == 4
    assert rows[("mlp4", 100.0)]["status"] == "ok"
    assert "does not fit in int64" in rows[("mlp4", 1e-300)]["error"]  # a time no column holds
    for bandwidth in (1e-300, 100.0):  # the cut job: both points, with the file and the reason
        assert rows[("cut", bandwidth)]["status"] == "failed"
        error = rows[("cut", bandwidth)]["error"]
        assert "cannot read the job" in error and "cut.1.et" in error
    # a re-run retries the failed points (a lost worker would succeed now) and skips the ok one;
    # the failed attempts stay beside the new rows
    again = run_sweep(sweep, plan(sweep, sources, 100), str(tmp_path / "wh"), "f")
    assert again.skipped == 1 and again.status == {"failed": 3}
    rows = _rows(tmp_path / "wh", "f")
    assert len(rows) == 7 and [r["status"] for r in rows].count("ok") == 1
    assert len({r["run_id"] for r in rows}) == 2


def test_two_runs_of_one_sweep_at_once_write_different_parts(tmp_path):
    """Both find the folder empty and number their first part 0; the run id in the name keeps
    both parts (before it, the second move replaced the first)."""
    import pyarrow.parquet as pq

    from pipeline.sweep.table import PartWriter, parts, sweep_folder
    from pipeline.tables import SCHEMAS

    folder = sweep_folder(str(tmp_path / "wh"), "twice")
    first, second = (PartWriter(folder, SCHEMAS["sweep_results"], run) for run in ("aaaa", "bbbb"))
    written = [first.write([{"job_id": "a", "status": "ok"}]), second.write([{"job_id": "b", "status": "ok"}])]
    assert len(set(written)) == 2 and [p.rsplit("/", 1)[1] for p in parts(folder)] == ["part-0-aaaa.parquet",
                                                                                       "part-0-bbbb.parquet"]
    assert sorted(pq.read_table(p.removeprefix("file://"))["job_id"][0].as_py() for p in parts(folder)) == ["a", "b"]
