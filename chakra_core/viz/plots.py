"""The figures performance engineers draw from the fleet pipeline's tables (matplotlib, headless).

Every plot function takes a table -- a ``pyarrow.Table``, a path/URL of one Parquet file, or a
folder (local or any fsspec URL) of hive-partitioned Parquet such as
``WAREHOUSE/tables/sim_results`` -- writes the figure to ``out`` (PNG or SVG, chosen by the
extension) and returns ``out``. Tables that lack a needed column, or have no usable rows, raise
``ValueError`` naming the table and what is missing.

- :func:`runtime_vs_npus` -- ``sim_results``: finish time vs simulated NPU count, one line per topology.
- :func:`compute_vs_exposed` -- ``sim_results``: stacked bar per system of NPU compute, host CPU
  and exposed communication.
- :func:`bandwidth_sweep` + :func:`runtime_heatmap` -- simulate a workload over a grid of
  per-dimension link bandwidths, and draw runtime as a heat map.
- :func:`message_sizes` -- ``collectives``: message-size histogram per kind (log x, one panel each).
- :func:`rank_imbalance` -- ``collectives``: per-rank bytes and node counts of one job.
- :func:`selection_error` -- ``chakra select --json`` documents: the subset's estimate error
  against the number of representatives k.
- :func:`sweep_lines` -- ``sweep_results``: finish time and exposed communication against a swept
  parameter, a line per job (panels per value of another parameter).
- :func:`pareto` -- ``sweep_results``: finish time against a cost column, with each job's Pareto front.

:func:`add_plot_parser` registers ``chakra plot KIND ...`` on the CLI's subparsers.
"""

from __future__ import annotations

import argparse
import math
import os
import uuid
from collections import defaultdict
from typing import Any, Iterable, Sequence

import pyarrow as pa

from chakra_core.outputs import open_output

SIM_COLUMNS = ("job_id", "system", "topology", "npus", "traced_npus", "status", "finish_ns",
               "max_compute_ns", "max_cpu_ns")
FORMATS = (".png", ".svg")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")

# ------------------------------------------------------------------ inputs


def load_table(table: Any, name: str = "table") -> pa.Table:
    """A pyarrow Table from a Table/RecordBatch, a Parquet file, or a folder of hive-partitioned Parquet."""
    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([table])
    if not isinstance(table, (str, os.PathLike)):
        raise ValueError(f"{name}: expected a pyarrow Table or a path/URL of Parquet, got {type(table).__name__}")
    import fsspec
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, LocalFileSystem, PyFileSystem

    url = os.fspath(table)
    fs, path = fsspec.core.url_to_fs(url)
    is_local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    arrow_fs = LocalFileSystem() if is_local else PyFileSystem(FSSpecHandler(fs))
    if any(c in path for c in "*?["):
        files = sorted(fs.glob(path))
        if not files:
            raise ValueError(f"{name}: no files match {url}")
        source: Any = files
    elif fs.isdir(path):
        source = path
    elif fs.exists(path):
        source = path
    else:
        raise ValueError(f"{name}: {url} does not exist")
    try:
        dataset = ds.dataset(source, filesystem=arrow_fs, format="parquet", partitioning="hive")
        schemas = {f.physical_schema for f in dataset.get_fragments()}
        if len(schemas) > 1:  # e.g. parts of sweeps with different parameter columns: every column, by name
            unified = pa.unify_schemas([dataset.schema, *schemas], promote_options="permissive")
            dataset = ds.dataset(source, schema=unified, filesystem=arrow_fs, format="parquet", partitioning="hive")
        return dataset.to_table()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{name}: cannot read Parquet from {url}: {exc}") from exc


def _require(table: pa.Table, columns: Iterable[str], name: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(f"{name}: missing column(s) {', '.join(missing)} (has: {', '.join(table.column_names) or 'none'})")
    if table.num_rows == 0:
        raise ValueError(f"{name}: the table is empty")


def _sim_rows(sim_results: Any, job: str | None = None, extra: Sequence[str] = ()) -> list[dict]:
    """The usable rows of sim_results (status 'ok', finish_ns known), optionally of one job."""
    table = load_table(sim_results, "sim_results")
    _require(table, ("job_id", "system", "status", "finish_ns", *extra), "sim_results")
    rows = [r for r in table.select(["job_id", "system", "status", "finish_ns", *extra]).to_pylist()
            if r["status"] == "ok" and r["finish_ns"] is not None]
    if job is not None:
        jobs = {r["job_id"] for r in rows}
        rows = [r for r in rows if r["job_id"] == job]
        if not rows:
            raise ValueError(f"sim_results: no simulated ('ok') rows for job {job!r} "
                             f"(jobs: {', '.join(sorted(map(str, jobs))) or 'none'})")
    if not rows:
        raise ValueError("sim_results: no rows with status 'ok' and a finish time")
    return rows


def _collective_rows(collectives: Any) -> list[dict]:
    table = load_table(collectives, "collectives")
    _require(table, ("job_id", "rank", "kind", "comm_size"), "collectives")
    return table.select(["job_id", "rank", "kind", "comm_size"]).to_pylist()


# ------------------------------------------------------------------ output


def _figure(nrows: int = 1, ncols: int = 1, size=(8, 5), **kw):
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


def _check_out(out: str | os.PathLike) -> str:
    out = os.fspath(out)
    ext = os.path.splitext(out)[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"{out}: the output must end in .png or .svg")
    return out


def _save(fig, out: str) -> str:

    ext = os.path.splitext(out)[1].lower()
    with open_output(out, "wb", gzipped=False) as f:
        fig.savefig(f, format=ext[1:], dpi=120)
    return out


def _fmt_bytes(value: float, _pos=None) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            v = value / scale
            return f"{v:.0f} {unit}" if v >= 10 or v == int(v) else f"{v:.1f} {unit}"
    return f"{value:.0f} B"


# ------------------------------------------------------------------ 1. runtime vs NPUs


def runtime_vs_npus(sim_results: Any, out: str | os.PathLike, normalize: bool = True) -> str:
    """Finish time vs simulated NPU count, one line per topology, averaged over jobs.

    With normalize=True each job's finish times are divided by its *baseline*: the fastest of
    its runs at its traced NPU count (the native-size run, npus == traced_npus), or, for a job
    with no such run, the fastest of its runs at its smallest simulated NPU count. 1.0 is the
    job's own baseline; > 1 is slower. Otherwise the mean finish time in milliseconds.
    Several systems of one topology and NPU count (e.g. ring-native and ring-8 for an 8-rank
    job) are averaged first, per job.
    """
    out = _check_out(out)
    rows = _sim_rows(sim_results, extra=("topology", "npus", "traced_npus"))
    rows = [r for r in rows if r["npus"] is not None]
    if not rows:
        raise ValueError("sim_results: no 'ok' rows with an NPU count")
    baseline: dict[str, float] = {}
    if normalize:
        by_job: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            by_job[r["job_id"]].append(r)
        for job, rs in by_job.items():
            native = [r for r in rs if r["traced_npus"] is not None and r["npus"] == r["traced_npus"]]
            if not native:
                smallest = min(r["npus"] for r in rs)
                native = [r for r in rs if r["npus"] == smallest]
            baseline[job] = min(r["finish_ns"] for r in native)
    # per (topology, npus, job): mean over that job's systems; then the mean over jobs
    per_job: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        value = r["finish_ns"] / baseline[r["job_id"]] if normalize else r["finish_ns"] / 1e6
        per_job[(r["topology"], r["npus"], r["job_id"])].append(value)
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (topology, npus, _job), values in per_job.items():
        points[topology][npus].append(sum(values) / len(values))

    fig, ax = _figure()
    all_npus = sorted({n for p in points.values() for n in p})
    jobs_of: dict[str, set] = defaultdict(set)
    for topology, _npus, job_id in per_job:
        jobs_of[topology].add(job_id)
    for i, topology in enumerate(sorted(points)):
        xs = sorted(points[topology])
        ys = [sum(points[topology][n]) / len(points[topology][n]) for n in xs]
        jobs = len(jobs_of[topology])
        # distinct markers, sizes and dashes, so that topologies with equal values stay visible
        ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], markersize=max(11 - 2 * i, 4), linestyle=DASHES[i % len(DASHES)],
                linewidth=2, label=f"{topology} ({jobs} job{'s' if jobs != 1 else ''})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(all_npus, [str(n) for n in all_npus])
    ax.minorticks_off()
    ax.set_xlabel("simulated NPUs (count)")
    n_jobs = len({r["job_id"] for r in rows})
    if normalize:
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1, label="baseline (= 1)")
        ax.set_ylabel("finish time / job's baseline (×)")
        ax.set_title(f"Runtime vs NPU count, normalised per job ({n_jobs} job{'s' if n_jobs != 1 else ''})\n"
                     "baseline: the job's fastest run at its traced NPU count", fontsize=11)
    else:
        ax.set_ylabel("finish time (ms, mean over jobs)")
        ax.set_title(f"Runtime vs NPU count ({n_jobs} job{'s' if n_jobs != 1 else ''})")
    ax.grid(True, alpha=0.3)
    ax.legend(title="topology")
    return _save(fig, out)


# ------------------------------------------------------------------ 2. compute vs exposed comm


# sim_results columns that split the finish time, with their legend and colour
PARTS = (("compute_ns", "NPU compute", "#4c72b0"), ("host_ns", "host CPU", "#dd8452"),
         ("memory_ns", "memory", "#8172b3"), ("exposed_comm_ns", "exposed communication", "#c44e52"),
         ("idle_ns", "idle", "#cccccc"))


def compute_vs_exposed(sim_results: Any, out: str | os.PathLike, job: str | None = None) -> str:
    """Stacked bar per system: where the time of the NPU that finishes last went (compute_ns,
    host_ns, memory_ns, exposed_comm_ns, idle_ns: they add up to finish_ns), in milliseconds.
    For one job, or the mean over all jobs simulated on each system."""
    out = _check_out(out)
    columns = tuple(column for column, _, _ in PARTS)
    rows = _sim_rows(sim_results, job, extra=columns)
    acc: dict[str, list[list[float]]] = {}
    for r in rows:
        acc.setdefault(r["system"], []).append([float(r[c] or 0) / 1e6 for c in columns])
    systems = list(acc)  # in table order (the sweep's order)
    means = [[sum(v[i] for v in acc[s]) / len(acc[s]) for i in range(len(columns))] for s in systems]
    counts = [len(acc[s]) for s in systems]
    exposed = columns.index("exposed_comm_ns")

    fig, ax = _figure(size=(max(6, 1.1 * len(systems) + 3), 5))
    xs = range(len(systems))
    bottom = [0.0] * len(systems)
    for i, (_, label, color) in enumerate(PARTS):
        heights = [m[i] for m in means]
        ax.bar(xs, heights, bottom=bottom, label=label, color=color, width=0.65)
        bottom = [b + h for b, h in zip(bottom, heights)]
    top = max(bottom) or 1.0
    for x, total, m in zip(xs, bottom, means):
        share = 100 * m[exposed] / total if total else 0
        ax.text(x, total + 0.01 * top, f"{total:.3g} ms\n{share:.0f}% exposed", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.18)
    labels = systems if job is not None or len(set(counts)) == 1 else [f"{s}\n(n={c})" for s, c in zip(systems, counts)]
    ax.set_xticks(list(xs), labels, rotation=20 if len(systems) > 4 else 0, ha="right" if len(systems) > 4 else "center")
    ax.set_xlabel("system (configuration)")
    ax.set_ylabel("time (ms)")
    if job is not None:
        ax.set_title(f"Compute vs exposed communication: job {job}")
    else:
        n_jobs = len({r["job_id"] for r in rows})
        ax.set_title(f"Compute vs exposed communication, mean over {n_jobs} job{'s' if n_jobs != 1 else ''}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the bars carry their own labels
    return _save(fig, out)


# ------------------------------------------------------------------ 3. bandwidth sweep + heat map


def _network_text(base: dict, bandwidths: list[float]) -> str:
    def fmt(values):
        return "[ " + ", ".join(str(v) for v in values) + " ]"

    lines = [f"topology: {fmt(base['topology'])}", f"npus_count: {fmt(base['npus_count'])}",
             f"bandwidth: {fmt([float(b) for b in bandwidths])}", f"latency: {fmt(base['latency'])}"]
    return "\n".join(lines) + "\n"


def bandwidth_sweep(prefix: str, network_yaml: str, system_json: str, bandwidths_dim0: Sequence[float],
                    bandwidths_dim1: Sequence[float], comm_group: str | None = None, **simulate_options) -> pa.Table:
    """Simulate the workload PREFIX.<npu>.et on the network of NETWORK_YAML (an ASTRA-sim
    analytical YAML with at least two dimensions) with every pair of dimension-0 and
    dimension-1 link bandwidths (GB/s; the other dimensions keep theirs). Returns a table
    ``bandwidth_dim0, bandwidth_dim1`` (GB/s), ``finish_ns``, one row per pair."""
    import fsspec
    import yaml

    from chakra_core.sim.workload import simulate_files

    bw0 = [float(b) for b in bandwidths_dim0]
    bw1 = [float(b) for b in bandwidths_dim1]
    if not bw0 or not bw1:
        raise ValueError("bandwidth_sweep: give at least one bandwidth per dimension")
    if any(not (b > 0 and math.isfinite(b)) for b in bw0 + bw1):
        raise ValueError(f"bandwidth_sweep: bandwidths must be positive numbers (GB/s), got {bw0} and {bw1}")
    with fsspec.open(network_yaml, "r") as f:
        base = yaml.safe_load(f)
    if not isinstance(base, dict) or not all(k in base for k in ("topology", "npus_count", "bandwidth", "latency")):
        raise ValueError(f"{network_yaml}: expected an ASTRA-sim analytical network (topology, npus_count, "
                         "bandwidth, latency)")
    dims = len(base["topology"])
    if dims < 2 or len(base["bandwidth"]) != dims:
        raise ValueError(f"{network_yaml}: a bandwidth sweep over two dimensions needs a network with at least "
                         f"two dimensions (this one has {dims})")
    folder = f"memory://chakra-bandwidth-sweep/{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    rows: dict[str, list] = {"bandwidth_dim0": [], "bandwidth_dim1": [], "finish_ns": []}
    try:
        for a in bw0:
            for b in bw1:
                url = f"{folder}/net_{a:g}_{b:g}.yml"
                with fsspec.open(url, "w") as f:
                    f.write(_network_text(base, [a, b, *base["bandwidth"][2:]]))
                result, _ = simulate_files(prefix, url, system_json, comm_group, **simulate_options)
                rows["bandwidth_dim0"].append(a)
                rows["bandwidth_dim1"].append(b)
                rows["finish_ns"].append(int(result.finish_ns))
    finally:
        fs.rm(folder.removeprefix("memory://"), recursive=True)
    return pa.table({"bandwidth_dim0": pa.array(rows["bandwidth_dim0"], pa.float64()),
                     "bandwidth_dim1": pa.array(rows["bandwidth_dim1"], pa.float64()),
                     "finish_ns": pa.array(rows["finish_ns"], pa.int64())})


def runtime_heatmap(table: Any, out: str | os.PathLike, x: str = "bandwidth_dim0", y: str = "bandwidth_dim1",
                    value: str = "finish_ns", title: str | None = None) -> str:
    """Heat map of runtime (µs, annotated) over two swept parameters, e.g. bandwidth_sweep's output."""
    out = _check_out(out)
    t = load_table(table, "bandwidth sweep")
    _require(t, (x, y, value), "bandwidth sweep")
    cells: dict[tuple, list[float]] = defaultdict(list)
    for r in t.select([x, y, value]).to_pylist():
        if r[x] is not None and r[y] is not None and r[value] is not None:
            cells[(r[x], r[y])].append(float(r[value]))
    if not cells:
        raise ValueError("bandwidth sweep: no rows with values")
    xs = sorted({k[0] for k in cells})
    ys = sorted({k[1] for k in cells})
    grid = [[(sum(cells[(a, b)]) / len(cells[(a, b)]) / 1e3) if (a, b) in cells else math.nan for a in xs] for b in ys]

    fig, ax = _figure(size=(max(5, 1.1 * len(xs) + 3), max(4, 0.8 * len(ys) + 2.5)))
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
    return _save(fig, out)


# ------------------------------------------------------------------ 4. message sizes


def message_sizes(collectives: Any, out: str | os.PathLike) -> str:
    """Message-size distribution per communication kind (all_reduce, all_to_all, ..., send,
    recv) over every job and rank of the table: one log-x histogram panel per kind (bins are
    powers of two: [2^k, 2^(k+1)) bytes; shared x axis), kinds with most messages first.
    Panels rather than overlaid curves, because kinds often share one exact size."""
    out = _check_out(out)
    rows = _collective_rows(collectives)
    sizes: dict[str, list[int]] = defaultdict(list)
    skipped = 0
    for r in rows:
        if r["comm_size"] is None or r["comm_size"] <= 0:
            skipped += 1
        else:
            sizes[r["kind"] or "unknown"].append(int(r["comm_size"]))
    if not sizes:
        raise ValueError("collectives: no rows with a positive comm_size")
    from matplotlib.ticker import FuncFormatter, LogLocator

    kinds = sorted(sizes, key=lambda k: (-len(sizes[k]), k))
    lo = min(min(v) for v in sizes.values()).bit_length() - 1
    hi = max(max(v) for v in sizes.values()).bit_length()
    edges = [2.0 ** k for k in range(lo, hi + 1)]
    fig, axes = _figure(len(kinds), 1, size=(8, 1.0 + 1.15 * len(kinds)), sharex=True, squeeze=False)
    colors = [f"C{i % 10}" for i in range(len(kinds))]
    for ax, kind, color in zip(axes[:, 0], kinds, colors):
        values = sorted(sizes[kind])
        n = len(values)
        ax.hist(values, bins=edges, color=color, edgecolor="white",
                label=f"{kind}: n={n:,}, median {_fmt_bytes(values[(n - 1) // 2])}")
        ax.set_xscale("log", base=2)
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(y=0.25)
        ax.legend(loc="upper left", fontsize=8, handlelength=1, frameon=False)
    bottom = axes[-1, 0]
    bottom.xaxis.set_major_locator(LogLocator(base=4))
    bottom.xaxis.set_major_formatter(FuncFormatter(_fmt_bytes))
    bottom.set_xlabel("message size (bytes, log scale; bins [2^k, 2^(k+1)))")
    fig.supylabel("messages (count)", fontsize=10)
    jobs = len({r["job_id"] for r in rows})
    note = f"; {skipped} without a size left out" if skipped else ""
    fig.suptitle(f"Message-size distribution per kind ({jobs} job{'s' if jobs != 1 else ''}{note})", fontsize=11)
    return _save(fig, out)


# ------------------------------------------------------------------ 5. rank imbalance


def _per_rank(rows: list[dict]) -> tuple[list[int], list[int], list[int]]:
    nbytes: dict[int, int] = defaultdict(int)
    count: dict[int, int] = defaultdict(int)
    for r in rows:
        nbytes[r["rank"]] += int(r["comm_size"] or 0)
        count[r["rank"]] += 1
    ranks = sorted(nbytes)
    return ranks, [nbytes[k] for k in ranks], [count[k] for k in ranks]


def _ratio(values: list[int]) -> float:
    lo = min(values)
    return math.inf if lo == 0 else max(values) / lo


def rank_imbalance(collectives: Any, out: str | os.PathLike, job: str | None = None) -> str:
    """Per-rank total communication bytes (sum of comm_size over every collective, send and
    recv of the rank, as the imbalance query of docs/pipeline.md) and node counts of one job, the ranks
    with most and fewest bytes highlighted and the max/min ratio in the title. With job=None:
    the table's only job, or, with several, the one with the largest bytes max/min ratio."""
    out = _check_out(out)
    rows = [r for r in _collective_rows(collectives) if r["rank"] is not None]
    by_job: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_job[r["job_id"]].append(r)
    if not by_job:
        raise ValueError("collectives: no rows with a rank")
    chosen_note = ""
    if job is None:
        if len(by_job) == 1:
            job = next(iter(by_job))
        else:
            job = max(sorted(by_job, key=str), key=lambda j: _ratio(_per_rank(by_job[j])[1]))
            chosen_note = f" (most imbalanced of {len(by_job)} jobs)"
    elif job not in by_job:
        raise ValueError(f"collectives: no rows for job {job!r} (jobs: {', '.join(sorted(map(str, by_job)))})")
    ranks, nbytes, counts = _per_rank(by_job[job])
    ratio = _ratio(nbytes)
    count_ratio = _ratio(counts)
    hi = nbytes.index(max(nbytes))
    lo = len(nbytes) - 1 - nbytes[::-1].index(min(nbytes))  # the last minimum: differs from hi unless one rank

    fig, (ax_b, ax_c) = _figure(2, 1, size=(max(7, 0.35 * len(ranks) + 5), 6.5), sharex=True)
    colors = ["#8c8c8c"] * len(ranks)
    colors[lo] = "#4c72b0"
    colors[hi] = "#c44e52"
    mib = [b / (1 << 20) for b in nbytes]
    ax_b.bar(ranks, mib, color=colors)
    ax_b.axhline(sum(mib) / len(mib), color="black", linestyle="--", linewidth=1, label="mean")
    # legend proxies for the highlighted bars
    same = nbytes[hi] == nbytes[lo]
    ax_b.bar([ranks[hi]], [0], color="#c44e52", label=f"max: rank {ranks[hi]} ({_fmt_bytes(nbytes[hi])})")
    ax_b.bar([ranks[lo]], [0], color="#4c72b0", label=f"min: rank {ranks[lo]} ({_fmt_bytes(nbytes[lo])})"
             + ("\nall ranks equal" if same else ""))
    ax_b.set_ylabel("communication (MiB)")
    ax_b.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_b.grid(True, axis="y", alpha=0.3)
    ax_c.bar(ranks, counts, color="#55a868", label="communication nodes")
    ax_c.set_ylabel("nodes (count)")
    ax_c.set_xlabel("rank")
    ax_c.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_c.grid(True, axis="y", alpha=0.3)
    if len(ranks) <= 32:
        ax_c.set_xticks(ranks, [str(r) for r in ranks])
    ratio_text = "∞ (a rank sends nothing)" if math.isinf(ratio) else f"{ratio:.2f}"
    count_text = "∞" if math.isinf(count_ratio) else f"{count_ratio:.2f}"
    fig.suptitle(f"Per-rank communication: job {job}{chosen_note}\n"
                 f"bytes max/min = {ratio_text}   nodes max/min = {count_text}", fontsize=11)
    return _save(fig, out)


# ------------------------------------------------------------------ 6. selection error against k


def _selection_curves(selections: Sequence[Any]) -> list[tuple[str, list[dict]]]:
    """(label, curve) per selection: a `chakra select --json` document, or the path of one."""
    import json

    import fsspec

    curves = []
    for i, selection in enumerate(selections):
        label = f"selection {i + 1}"
        if isinstance(selection, (str, os.PathLike)):
            label = os.path.splitext(os.path.basename(os.fspath(selection)))[0]
            with fsspec.open(os.fspath(selection), "r") as f:
                selection = json.load(f)
        if not isinstance(selection, dict) or not selection.get("curve"):
            raise ValueError(f"{label}: not a `chakra select --json` document with an error curve ('curve')")
        curves.append((label, selection["curve"]))
    return curves


def selection_error(selections: Sequence[Any], out: str | os.PathLike, target: float | None = None) -> str:
    """The largest estimate error (solid) and each metric group's (thin) against k, one colour
    per selection (`chakra select --json` documents or their paths: the curve runs up to their
    k); a log y axis, since errors fall by orders of magnitude; `target` as a dotted line."""
    out = _check_out(out)
    curves = _selection_curves(selections)
    fig, ax = _figure()
    floor = 1e-4  # an exact estimate (error 0) is drawn on the axis floor, not dropped from a log scale
    for i, (label, curve) in enumerate(curves):
        ks = [point["k"] for point in curve]
        color = f"C{i % 10}"
        ax.plot(ks, [max(point["error"], floor) for point in curve], color=color, marker=MARKERS[i % len(MARKERS)],
                linewidth=2, label=f"{label}: largest error")
        for j, group in enumerate(sorted({g for point in curve for g in point["errors"]})):
            ax.plot(ks, [max(point["errors"].get(group, 0.0), floor) for point in curve], color=color,
                    linestyle=DASHES[1 + j % (len(DASHES) - 1)], linewidth=0.8, alpha=0.6,
                    label=group if i == 0 else None)
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", linewidth=1, label=f"target {target:.0%}")
    ax.set_yscale("log")
    ax.set_xlabel("representatives (k)")
    ax.set_ylabel(f"estimate error (fraction; {floor:g} = exact)")
    ax.set_title("What the subset estimates of the fleet: error against k", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out)


# ------------------------------------------------------------------ 7. sweeps: a parameter, and cost


def _sweep_rows(table: Any, columns: Sequence[str]) -> list[dict]:
    """The 'ok' rows of a sweep_results table that have every one of `columns`."""
    t = load_table(table, "sweep_results")
    _require(t, ("job_id", "status", *columns), "sweep_results")
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
    out = _check_out(out)
    rows = _sweep_rows(sweep_results, ["finish_ns", "exposed_comm_ns", x, *([facet] if facet else [])])
    facets = _ordered(r[facet] for r in rows) if facet else [None]
    numeric = all(isinstance(r[x], (int, float)) for r in rows)
    ticks = _ordered(r[x] for r in rows)
    jobs = _ordered(r["job_id"] for r in rows)
    fig, axes = _figure(2, len(facets), size=(4 * len(facets) + 3, 7), sharex=True, squeeze=False)
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
    return _save(fig, out)


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
    out = _check_out(out)
    rows = _sweep_rows(sweep_results, ["finish_ns", cost])
    jobs = _ordered(r["job_id"] for r in rows)
    fig, ax = _figure(size=(9, 6))
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
    return _save(fig, out)


# ------------------------------------------------------------------ CLI


def _floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _done(path: str) -> int:
    print(path)
    return 0


def add_plot_parser(subparsers) -> argparse.ArgumentParser:
    """Register `chakra plot KIND ...` (KIND: runtime-vs-npus, compute-vs-exposed, message-sizes,
    rank-imbalance, bandwidth-heatmap, selection-error, sweep, pareto); each subcommand sets `run` to a function(args) -> 0."""
    plot = subparsers.add_parser(
        "plot", help="draw performance figures (PNG or SVG) from the pipeline's Parquet tables",
        description="Draw a figure from the fleet pipeline's tables (a Parquet file, a folder of "
        "hive-partitioned Parquet such as WAREHOUSE/tables/sim_results, or any fsspec URL). "
        "The format follows the output's extension: .png or .svg.")
    kinds = plot.add_subparsers(dest="plot_kind", required=True, metavar="KIND")

    def output(p):
        p.add_argument("-o", "--output", required=True, help="the figure to write (.png or .svg)")

    p = kinds.add_parser("runtime-vs-npus", help="sim_results: finish time vs NPU count, one line per topology")
    p.add_argument("sim_results", help="sim_results Parquet file or folder")
    output(p)
    p.add_argument("--absolute", action="store_true", help="plot milliseconds instead of normalising per job")
    p.set_defaults(run=lambda a: _done(runtime_vs_npus(a.sim_results, a.output, normalize=not a.absolute)))

    p = kinds.add_parser("compute-vs-exposed", help="sim_results: NPU compute, host CPU and exposed comm per system")
    p.add_argument("sim_results", help="sim_results Parquet file or folder")
    output(p)
    p.add_argument("--job", help="one job (default: the mean over jobs)")
    p.set_defaults(run=lambda a: _done(compute_vs_exposed(a.sim_results, a.output, job=a.job)))

    p = kinds.add_parser("message-sizes", help="collectives: message-size histogram per kind (log x)")
    p.add_argument("collectives", help="collectives Parquet file or folder")
    output(p)
    p.set_defaults(run=lambda a: _done(message_sizes(a.collectives, a.output)))

    p = kinds.add_parser("rank-imbalance", help="collectives: per-rank bytes and node counts of a job")
    p.add_argument("collectives", help="collectives Parquet file or folder")
    output(p)
    p.add_argument("--job", help="the job (default: the only one, else the most imbalanced)")
    p.set_defaults(run=lambda a: _done(rank_imbalance(a.collectives, a.output, job=a.job)))

    p = kinds.add_parser("bandwidth-heatmap", help="simulate a workload over a grid of per-dimension bandwidths")
    p.add_argument("--workload", required=True, help="PREFIX of PREFIX.<npu>.et")
    p.add_argument("--network", required=True, help="ASTRA-sim analytical network YAML (>= 2 dimensions)")
    p.add_argument("--system", required=True, help="ASTRA-sim system JSON")
    p.add_argument("--comm-group", help="communicator-group JSON")
    p.add_argument("--bw0", required=True, type=_floats, help="dimension-0 bandwidths, GB/s, e.g. 50,100,200")
    p.add_argument("--bw1", required=True, type=_floats, help="dimension-1 bandwidths, GB/s, e.g. 25,50,100")
    output(p)

    def heatmap(a) -> int:
        _check_out(a.output)
        table = bandwidth_sweep(a.workload, a.network, a.system, a.bw0, a.bw1, a.comm_group)
        return _done(runtime_heatmap(table, a.output, title=f"Runtime vs per-dimension bandwidth: "
                                     f"{os.path.basename(a.workload)}\n(cells: finish time, µs)"))

    p.set_defaults(run=heatmap)

    p = kinds.add_parser("selection-error", help="chakra select --json: estimate error against k")
    p.add_argument("selections", nargs="+", metavar="SELECTION.json",
                   help="`chakra select --json` output(s); the curve runs up to each one's k")
    output(p)
    p.add_argument("--target", type=float, help="draw this error (a fraction, e.g. 0.05) as a line")
    p.set_defaults(run=lambda a: _done(selection_error(a.selections, a.output, target=a.target)))

    p = kinds.add_parser("sweep", help="sweep_results: finish time and exposed comm against a parameter, per job")
    p.add_argument("sweep_results", help="sweep_results Parquet file or folder, e.g. WAREHOUSE/tables/sweep_results/"
                   "sweep=NAME")
    p.add_argument("--x", required=True, metavar="PARAM", help="the parameter column along x, e.g. bandwidth_0")
    p.add_argument("--facet", metavar="PARAM", help="a panel per value of this column, e.g. topology_0")
    output(p)
    p.set_defaults(run=lambda a: _done(sweep_lines(a.sweep_results, a.output, a.x, a.facet)))

    p = kinds.add_parser("pareto", help="sweep_results: finish time against a cost column, each job's Pareto front")
    p.add_argument("sweep_results", help="sweep_results Parquet file or folder")
    p.add_argument("--cost", default="cost", metavar="COLUMN", help="the cost column (default: cost)")
    output(p)
    p.set_defaults(run=lambda a: _done(pareto(a.sweep_results, a.output, a.cost)))
    return plot
