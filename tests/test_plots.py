"""chakra_core.viz.plots: figures from real pipeline tables (generated jobs simulated by the sweep)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import matplotlib  # noqa: F401  (needed: a missing dependency fails, not skips)

from datapaths import MICROBENCHMARKS  # noqa: E402

from chakra_core.analysis.stats import collective_rows  # noqa: E402
from chakra_core.format.etfile import read_table, write_table  # noqa: E402
from chakra_core.viz import plots  # noqa: E402
from pipeline.simulation import load_sweep, simulate_row  # noqa: E402
from tools.make_drop import generate_job  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

ALL_REDUCE_8 = MICROBENCHMARKS / "all_reduce" / "8npus_1MB" / "all_reduce"
SYSTEM_2D = REPO / "pipeline" / "sweeps" / "ring_system_2d.json"
JOBS = (0, 1, 2, 3)  # data_parallel n8, tensor_parallel n4, pipeline_parallel n4, dlrm n8

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, pa.Table]:
    """sim_results and collectives rows made the way the pipeline makes them, without Ray."""
    root = tmp_path_factory.mktemp("jobs")
    specs = load_sweep()
    sim, coll = [], []
    for index in JOBS:
        job = generate_job(index)
        for rank, table in enumerate(job.tables):
            url = str(root / f"{job.job_id}.{rank}.et")
            write_table(table, url)
            rows = collective_rows(read_table(url))
            coll.append(rows.add_column(0, "job_id", pa.array([job.job_id] * rows.num_rows, pa.string()))
                        .add_column(1, "rank", pa.array([rank] * rows.num_rows, pa.int32())))
        sim += [simulate_row(job.job_id, str(root / job.job_id), job.npus, None, spec) for spec in specs]
    sim_table = pa.Table.from_pylist(sim)
    assert "ok" in set(sim_table.column("status").to_pylist())
    return {"sim_results": sim_table, "collectives": pa.concat_tables(coll)}


@pytest.fixture(scope="module")
def sweep_table(tmp_path_factory) -> pa.Table:
    net = tmp_path_factory.mktemp("plots") / "ring4xswitch2.yml"
    net.write_text("topology: [ Ring, Switch ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50.0, 25.0 ]\n"
                   "latency: [ 500.0, 500.0 ]\n")
    return plots.bandwidth_sweep(str(ALL_REDUCE_8), str(net), str(SYSTEM_2D), [50, 100, 200], [25, 50, 100])


def _check_figure(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000
    if path.suffix == ".png":
        assert data.startswith(PNG_MAGIC)
    else:
        assert b"<svg" in data[:2000]


def _draw(name: str, tmp_path: Path, fn, *args, **kw) -> None:
    for ext in (".png", ".svg"):
        out = tmp_path / f"{name}{ext}"
        assert fn(*args, str(out), **kw) == str(out)
        _check_figure(out)
    if os.environ.get("CHAKRA_PLOTS_DIR"):  # keep the PNG to look at
        fn(*args, os.path.join(os.environ["CHAKRA_PLOTS_DIR"], f"{name}.png"), **kw)


def test_runtime_vs_npus(tables, tmp_path):
    _draw("runtime_vs_npus", tmp_path, plots.runtime_vs_npus, tables["sim_results"])
    _draw("runtime_vs_npus_abs", tmp_path, plots.runtime_vs_npus, tables["sim_results"], normalize=False)


def test_compute_vs_exposed(tables, tmp_path):
    _draw("compute_vs_exposed", tmp_path, plots.compute_vs_exposed, tables["sim_results"])
    _draw("compute_vs_exposed_job", tmp_path, plots.compute_vs_exposed, tables["sim_results"], job="gen-tp-001-n4")


def test_message_sizes(tables, tmp_path):
    _draw("message_sizes", tmp_path, plots.message_sizes, tables["collectives"])


def test_rank_imbalance(tables, tmp_path):
    _draw("rank_imbalance", tmp_path, plots.rank_imbalance, tables["collectives"], job="gen-dlrm-003-n8")
    _draw("rank_imbalance_auto", tmp_path, plots.rank_imbalance, tables["collectives"])


def test_bandwidth_sweep_is_monotonic_and_heatmap(sweep_table, tmp_path):
    assert sweep_table.column_names == ["bandwidth_dim0", "bandwidth_dim1", "finish_ns"]
    assert sweep_table.num_rows == 9
    finish = {(r["bandwidth_dim0"], r["bandwidth_dim1"]): r["finish_ns"] for r in sweep_table.to_pylist()}
    for b0 in (50, 100, 200):
        values = [finish[(b0, b1)] for b1 in (25, 50, 100)]
        assert values == sorted(values, reverse=True), (b0, values)
    for b1 in (25, 50, 100):
        values = [finish[(b0, b1)] for b0 in (50, 100, 200)]
        assert values == sorted(values, reverse=True), (b1, values)
    assert finish[(200, 100)] < finish[(50, 25)]
    _draw("bandwidth_heatmap", tmp_path, plots.runtime_heatmap, sweep_table)


def test_reads_parquet_file_and_hive_folder(tables, tmp_path):
    sim = tables["sim_results"]
    pq.write_table(sim, tmp_path / "one.parquet")
    folder = tmp_path / "tables" / "sim_results"
    for date, half in (("2024-01-01", sim.slice(0, 9)), ("2024-01-02", sim.slice(9))):
        (folder / f"date={date}").mkdir(parents=True)
        pq.write_table(half, folder / f"date={date}" / "part-0.parquet")
    loaded = plots.load_table(str(folder))
    assert loaded.num_rows == sim.num_rows and "date" in loaded.column_names
    assert plots.load_table(str(tmp_path / "one.parquet")).num_rows == sim.num_rows
    out = tmp_path / "from_folder.png"
    plots.compute_vs_exposed(str(folder), str(out))
    _check_figure(out)


def test_invalid_inputs(tables, tmp_path):
    out = str(tmp_path / "x.png")
    sim, coll = tables["sim_results"], tables["collectives"]
    with pytest.raises(ValueError, match="missing column.*finish_ns"):
        plots.runtime_vs_npus(sim.drop_columns(["finish_ns"]), out)
    with pytest.raises(ValueError, match="missing column.*comm_size"):
        plots.message_sizes(coll.drop_columns(["comm_size"]), out)
    with pytest.raises(ValueError, match="empty"):
        plots.compute_vs_exposed(sim.slice(0, 0), out)
    with pytest.raises(ValueError, match="empty"):
        plots.rank_imbalance(coll.slice(0, 0), out)
    with pytest.raises(ValueError, match="empty"):
        plots.runtime_heatmap(pa.table({"bandwidth_dim0": pa.array([], pa.float64()),
                                        "bandwidth_dim1": pa.array([], pa.float64()),
                                        "finish_ns": pa.array([], pa.int64())}), out)
    with pytest.raises(ValueError, match="no .*job 'nope'"):
        plots.compute_vs_exposed(sim, out, job="nope")
    with pytest.raises(ValueError, match="no rows for job 'nope'"):
        plots.rank_imbalance(coll, out, job="nope")
    failed = sim.set_column(sim.column_names.index("status"), "status", pa.array(["failed"] * sim.num_rows))
    with pytest.raises(ValueError, match="status 'ok'"):
        plots.runtime_vs_npus(failed, out)
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plots.message_sizes(coll, str(tmp_path / "x.pdf"))
    with pytest.raises(ValueError, match="does not exist"):
        plots.message_sizes(str(tmp_path / "missing.parquet"), out)
    with pytest.raises(ValueError, match="two dimensions"):
        plots.bandwidth_sweep(str(ALL_REDUCE_8), str(REPO / "pipeline/sweeps/Ring_8npus.yml"), str(SYSTEM_2D),
                              [50], [50])
    assert not os.path.exists(out)


def test_cli(tables, tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="chakra")
    plots.add_plot_parser(parser.add_subparsers(dest="command", required=True))
    sim_path, coll_path = tmp_path / "sim.parquet", tmp_path / "coll.parquet"
    pq.write_table(tables["sim_results"], sim_path)
    pq.write_table(tables["collectives"], coll_path)
    commands = [
        ["runtime-vs-npus", str(sim_path), "-o", str(tmp_path / "a.png")],
        ["compute-vs-exposed", str(sim_path), "-o", str(tmp_path / "b.svg"), "--job", "gen-dp-000-n8"],
        ["message-sizes", str(coll_path), "-o", str(tmp_path / "c.png")],
        ["rank-imbalance", str(coll_path), "-o", str(tmp_path / "d.png"), "--job", "gen-dp-000-n8"],
    ]
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring, Switch ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50.0, 25.0 ]\n"
                   "latency: [ 500.0, 500.0 ]\n")
    commands.append(["bandwidth-heatmap", "--workload", str(ALL_REDUCE_8), "--network", str(net),
                     "--system", str(SYSTEM_2D), "--bw0", "50,200", "--bw1", "25,100", "-o", str(tmp_path / "e.png")])
    for argv in commands:
        args = parser.parse_args(["plot", *argv])
        assert args.run(args) == 0
        out = argv[argv.index("-o") + 1]
        assert capsys.readouterr().out.strip() == out
        _check_figure(Path(out))


@pytest.fixture(scope="module")
def sweep_results(tmp_path_factory) -> Path:
    """A sweep's folder of two parts whose parameter columns differ (latency_0 only in the second),
    as two runs of a sweep file that gained a parameter write them."""
    folder = tmp_path_factory.mktemp("wh") / "tables" / "sweep_results" / "sweep=bw"
    folder.mkdir(parents=True)
    rows = [{"job_id": job, "status": "ok", "topology_0": topology, "bandwidth_0": bandwidth, "latency_0": latency,
             "finish_ns": int(scale * (1e9 / bandwidth + latency * 1e3)),
             "exposed_comm_ns": int(scale * 5e8 / bandwidth),
             "cost": 8 * 0.01 * bandwidth}
            for job, scale in (("a", 1.0), ("b", 2.5)) for topology in ("Ring", "Switch")
            for bandwidth in (50.0, 100.0, 200.0, 400.0) for latency in (500.0, 1000.0)]
    first = pa.Table.from_pylist([r for r in rows if r["latency_0"] == 500.0]).drop_columns(["latency_0"])
    pq.write_table(first, folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist([r for r in rows if r["latency_0"] == 1000.0]), folder / "part-1.parquet")
    return folder


def test_a_sweep_folder_reads_every_part_by_column_name(sweep_results):
    table = plots.load_table(str(sweep_results))
    assert table.num_rows == 32 and table.column("latency_0").null_count == 16


def test_sweep_and_pareto(sweep_results, tmp_path):
    _draw("sweep", tmp_path, plots.sweep_lines, str(sweep_results), x="bandwidth_0", facet="topology_0")
    _draw("sweep_categorical", tmp_path, plots.sweep_lines, str(sweep_results), x="topology_0")
    _draw("pareto", tmp_path, plots.pareto, str(sweep_results))
    with pytest.raises(ValueError, match="missing column.*npus_count_0"):
        plots.sweep_lines(str(sweep_results), str(tmp_path / "x.png"), x="npus_count_0")
    with pytest.raises(ValueError, match="missing column.*watts"):
        plots.pareto(str(sweep_results), str(tmp_path / "x.png"), cost="watts")


def test_sweep_plot_cli(sweep_results, tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="chakra")
    plots.add_plot_parser(parser.add_subparsers(dest="command", required=True))
    for argv in (["sweep", str(sweep_results), "--x", "bandwidth_0", "--facet", "topology_0",
                  "-o", str(tmp_path / "s.png")],
                 ["pareto", str(sweep_results), "--cost", "cost", "-o", str(tmp_path / "p.svg")]):
        args = parser.parse_args(["plot", *argv])
        assert args.run(args) == 0
        assert capsys.readouterr().out.strip() == argv[-1]
        _check_figure(Path(argv[-1]))
