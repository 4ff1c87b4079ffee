"""Figures over swept parameters: a workload simulated over a grid of per-dimension bandwidths
and its heat map, and the ad hoc sweeps' `sweep_results` (docs/sweeps.md) drawn against a
parameter or against a cost column with each job's Pareto front."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Any, Sequence

import pyarrow as pa

from chakra_core.viz.figure import MARKERS, check_out, figure, load_table, require, save


def bandwidth_sweep(prefix: str, network_yaml: str, system_json: str, bandwidths_dim0: Sequence[float],
                    bandwidths_dim1: Sequence[float], comm_group: str | None = None, **simulate_options) -> pa.Table:
    """Simulate the workload PREFIX.<npu>.et on the network of NETWORK_YAML (an ASTRA-sim
    analytical YAML with at least two dimensions) with every pair of dimension-0 and
    dimension-1 link bandwidths (GB/s; the other dimensions keep theirs). Returns a table
    ``bandwidth_dim0, bandwidth_dim1`` (GB/s), ``finish_ns``, one row per pair. The job is read once."""
    from chakra_core.format.job import Job
    from chakra_core.sim.config import load_network, load_system
    from chakra_core.sim.engine import simulate

    bw0 = [float(b) for b in bandwidths_dim0]
    bw1 = [float(b) for b in bandwidths_dim1]
    if not bw0 or not bw1:
        raise ValueError("bandwidth_sweep: give at least one bandwidth per dimension")
    if any(not (b > 0 and math.isfinite(b)) for b in bw0 + bw1):
        raise ValueError(f"bandwidth_sweep: bandwidths must be positive numbers (GB/s), got {bw0} and {bw1}")
    network = load_network(network_yaml)
    if len(network.dims) < 2:
        raise ValueError(f"{network_yaml}: a bandwidth sweep over two dimensions needs a network with at least "
                         f"two dimensions (this one has {len(network.dims)})")
    system = load_system(system_json)
    job = Job.read(prefix, network.npus, comm_group)
    rows = [(a, b, simulate(job, _with_bandwidths(network, a, b), system, **simulate_options).finish_ns)
            for a in bw0 for b in bw1]
    return pa.table({"bandwidth_dim0": pa.array([r[0] for r in rows], pa.float64()),
                     "bandwidth_dim1": pa.array([r[1] for r in rows], pa.float64()),
                     "finish_ns": pa.array([int(r[2]) for r in rows], pa.int64())})


def _with_bandwidths(network, dim0: float, dim1: float):
    dims = [d.model_copy(update={"bandwidth_gbps": bw}) for d, bw in zip(network.dims, (dim0, dim1))]
    return network.model_copy(update={"dims": (*dims, *network.dims[2:])})


def runtime_heatmap(table: Any, out: str | os.PathLike, x: str = "bandwidth_dim0", y: str = "bandwidth_dim1",
                    value: str = "finish_ns", title: str | None = None) -> str:
    """Heat map of runtime (µs, annotated) over two swept parameters, e.g. bandwidth_sweep's output."""
    out = check_out(out)
    t = load_table(table, "bandwidth sweep")
    require(t, (x, y, value), "bandwidth sweep")
    cells: dict[tuple, list[float]] = defaultdict(list)
    for r in t.select([x, y, value]).to_pylist():
        if r[x] is not None and r[y] is not None and r[value] is not None:
            cells[(r[x], r[y])].append(float(r[value]))
    if not cells:
        raise ValueError("bandwidth sweep: no rows with values")
    xs = sorted({k[0] for k in cells})
    ys = sorted({k[1] for k in cells})
    grid = [[(sum(cells[(a, b)]) / len(cells[(a, b)]) / 1e3) if (a, b) in cells else math.nan for a in xs] for b in ys]

    fig, ax = figure(size=(max(5, 1.1 * len(xs) + 3), max(4, 0.8 * len(ys) + 2.5)))
    image = ax.imshow(grid, origin="lower", cmap="viridis_r", aspect="auto")
    finite = [v for row in grid for v in row if not math.isnan(v)]
    lo, hi = min(finite), max(finite)
    for j, row in enumerate(grid):
        for i, v in enumerate(row):
            if not math.isnan(v):
                dark = hi > lo and (v - lo) / (hi - lo) > 0.5
                ax.text(i, j, f"{v:.4g}", ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(xs)), [f"{a:g}" for a in xs])
    ax.set_yticks(range(len(ys)), [f"{b:g}" for b in ys])

    def label(name: str) -> str:
        if name.startswith("bandwidth_dim"):
            return f"dimension {name.removeprefix('bandwidth_dim')} link bandwidth (GB/s)"
        return name

    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    fig.colorbar(image, ax=ax, label="finish time (µs)")
    ax.set_title(title or "Runtime vs per-dimension bandwidth (cells: finish time, µs)", fontsize=11)
    return save(fig, out)


def _sweep_rows(table: Any, columns: Sequence[str]) -> list[dict]:
    """The 'ok' rows of a sweep_results table that have every one of `columns`."""
    t = load_table(table, "sweep_results")
    require(t, ("job_id", "status", *columns), "sweep_results")
    rows = [r for r in t.select(list(dict.fromkeys(["job_id", "status", *columns]))).to_pylist()
            if r["status"] == "ok" and all(r[c] is not None for c in columns)]
    if not rows:
        raise ValueError(f"sweep_results: no rows with status 'ok' and values of {', '.join(columns)}")
    return rows


def _ordered(values) -> list:
    return sorted(set(values), key=lambda v: (v is None, str(type(v)), v if v is not None else 0))


def sweep_lines(sweep_results: Any, out: str | os.PathLike, x: str, facet: str | None = None) -> str:
    """Finish time (top) and exposed communication (bottom), in ms, against the parameter column
    `x`, a line per job; a column of panels per value of `facet`. Where other parameters vary
    too, the line is the median over them and the shaded band their range."""
    out = check_out(out)
    rows = _sweep_rows(sweep_results, ["finish_ns", "exposed_comm_ns", x, *([facet] if facet else [])])
    facets = _ordered(r[facet] for r in rows) if facet else [None]
    numeric = all(isinstance(r[x], (int, float)) for r in rows)
    ticks = _ordered(r[x] for r in rows)
    jobs = _ordered(r["job_id"] for r in rows)
    fig, axes = figure(2, len(facets), size=(4 * len(facets) + 3, 7), sharex=True, squeeze=False)
    for col, value in enumerate(facets):
        for i, job in enumerate(jobs):
            mine = [r for r in rows if r["job_id"] == job and (facet is None or r[facet] == value)]
            for row, column in enumerate(("finish_ns", "exposed_comm_ns")):
                _median_line(axes[row][col], mine, x, column, ticks, numeric, i, job if row == 0 else None)
        if facet:
            axes[0][col].set_title(f"{facet} = {value}", fontsize=10)
        axes[1][col].set_xlabel(x)
    axes[0][0].set_ylabel("finish time (ms)")
    axes[1][0].set_ylabel("exposed communication (ms)")
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
        if numeric and min(ticks) > 0 and max(ticks) / min(ticks) >= 8:
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.minorticks_off()
        elif not numeric:
            ax.set_xticks(range(len(ticks)), [str(t) for t in ticks])
    if len(jobs) <= 12:  # more jobs than that make a legend no one reads
        lines = {label: line for ax in axes[0] for line, label in zip(*ax.get_legend_handles_labels())}
        axes[0][-1].legend(lines.values(), lines.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                           title="job")
    fig.suptitle(f"Sweep: finish time and exposed communication against {x} ({len(jobs)} job"
                 f"{'s' if len(jobs) != 1 else ''})\nline: the median over the other parameters, band: their range",
                 fontsize=10)
    return save(fig, out)


def _median_line(ax, rows: list[dict], x: str, column: str, ticks: list, numeric: bool, index: int,
                 label: str | None) -> None:
    by_x: dict[Any, list[float]] = defaultdict(list)
    for r in rows:
        by_x[r[x]].append(r[column] / 1e6)
    if not by_x:
        return
    xs = [t for t in ticks if t in by_x]
    values = [sorted(by_x[t]) for t in xs]
    positions = xs if numeric else [ticks.index(t) for t in xs]
    color = f"C{index % 10}"
    ax.plot(positions, [v[(len(v) - 1) // 2] for v in values], marker=MARKERS[index % len(MARKERS)], color=color,
            linewidth=1.5, markersize=4, label=label)
    if any(len(v) > 1 for v in values):
        ax.fill_between(positions, [v[0] for v in values], [v[-1] for v in values], color=color, alpha=0.12)


def pareto(sweep_results: Any, out: str | os.PathLike, cost: str = "cost") -> str:
    """Finish time (ms) against the column `cost`, a colour per job: every simulated point, and
    the job's Pareto front (the points no other point beats on both cost and time) as a line."""
    out = check_out(out)
    rows = _sweep_rows(sweep_results, ["finish_ns", cost])
    jobs = _ordered(r["job_id"] for r in rows)
    fig, ax = figure(size=(9, 6))
    for i, job in enumerate(jobs):
        points = sorted((float(r[cost]), r["finish_ns"] / 1e6) for r in rows if r["job_id"] == job)
        color = f"C{i % 10}"
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=12, color=color, alpha=0.35)
        front, best = [], math.inf
        for c, t in points:  # cheapest first: a point is on the front when it is faster than every cheaper one
            if t < best:
                front.append((c, t))
                best = t
        ax.plot([p[0] for p in front], [p[1] for p in front], marker=MARKERS[i % len(MARKERS)], color=color,
                linewidth=1.5, markersize=5, label=job if len(jobs) <= 12 else None)
    costs = [float(r[cost]) for r in rows]
    if min(costs) > 0 and max(costs) / min(costs) >= 100:
        from matplotlib.ticker import FuncFormatter, NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(cost)
    ax.set_ylabel("finish time (ms)")
    ax.set_title(f"Finish time against {cost}: every point, and each job's Pareto front ({len(jobs)} job"
                 f"{'s' if len(jobs) != 1 else ''})", fontsize=11)
    ax.grid(True, alpha=0.3)
    if len(jobs) <= 12:
        ax.legend(fontsize=8, title="job")
    return save(fig, out)
