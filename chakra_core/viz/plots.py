"""The figures performance engineers draw from the fleet pipeline's tables (matplotlib, headless).

Every plot function takes a table -- a ``pyarrow.Table``, a path/URL of one Parquet file, or a
folder (local or any fsspec URL) of hive-partitioned Parquet such as
``WAREHOUSE/tables/sim_results`` -- writes the figure to ``out`` (PNG or SVG, chosen by the
extension) and returns ``out``. Tables that lack a needed column, or have no usable rows, raise
``ValueError`` naming the table and what is missing.

- :func:`runtime_vs_npus` -- ``sim_results``: finish time vs simulated NPU count, one line per topology.
- :func:`compute_vs_exposed` -- ``sim_results``: stacked bar per system of NPU compute, host CPU
  and exposed communication.
- :func:`message_sizes` -- ``collectives``: message-size histogram per kind (log x, one panel each).
- :func:`rank_imbalance` -- ``collectives``: per-rank bytes and node counts of one job.
- :func:`selection_error` -- ``chakra select --json`` documents: the subset's estimate error
  against the number of representatives k.

The figures over swept parameters (a bandwidth grid's heat map, ``sweep_results`` against a
parameter or a cost) are in ``sweep_plots``; what every figure shares (reading tables, saving)
in ``figure``. :func:`add_plot_parser` registers ``chakra plot KIND ...`` for all of them on the
CLI's subparsers.
"""

from __future__ import annotations

import argparse
import math
import os
from collections import defaultdict
from typing import Any, Sequence


from chakra_core.viz.figure import DASHES, MARKERS, check_out, figure, fmt_bytes, load_table, require, save
from chakra_core.viz.sweep_plots import bandwidth_sweep, pareto, runtime_heatmap, sweep_lines

SIM_COLUMNS = ("job_id", "system", "topology", "npus", "traced_npus", "status", "finish_ns",
               "max_compute_ns", "max_cpu_ns")


def _sim_rows(sim_results: Any, job: str | None = None, extra: Sequence[str] = ()) -> list[dict]:
    """The usable rows of sim_results (status 'ok', finish_ns known), optionally of one job."""
    table = load_table(sim_results, "sim_results")
    require(table, ("job_id", "system", "status", "finish_ns", *extra), "sim_results")
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
    require(table, ("job_id", "rank", "kind", "comm_size"), "collectives")
    return table.select(["job_id", "rank", "kind", "comm_size"]).to_pylist()


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
    out = check_out(out)
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

    fig, ax = figure()
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
    return save(fig, out)


# ------------------------------------------------------------------ 2. compute vs exposed comm


# sim_results columns that split the finish time, with their legend and colour
PARTS = (("compute_ns", "NPU compute", "#4c72b0"), ("host_ns", "host CPU", "#dd8452"),
         ("memory_ns", "memory", "#8172b3"), ("exposed_comm_ns", "exposed communication", "#c44e52"),
         ("idle_ns", "idle", "#cccccc"))


def compute_vs_exposed(sim_results: Any, out: str | os.PathLike, job: str | None = None) -> str:
    """Stacked bar per system: where the time of the NPU that finishes last went (compute_ns,
    host_ns, memory_ns, exposed_comm_ns, idle_ns: they add up to finish_ns), in milliseconds.
    For one job, or the mean over all jobs simulated on each system."""
    out = check_out(out)
    columns = tuple(column for column, _, _ in PARTS)
    rows = _sim_rows(sim_results, job, extra=columns)
    acc: dict[str, list[list[float]]] = {}
    for r in rows:
        acc.setdefault(r["system"], []).append([float(r[c] or 0) / 1e6 for c in columns])
    systems = list(acc)  # in table order (the sweep's order)
    means = [[sum(v[i] for v in acc[s]) / len(acc[s]) for i in range(len(columns))] for s in systems]
    counts = [len(acc[s]) for s in systems]
    exposed = columns.index("exposed_comm_ns")

    fig, ax = figure(size=(max(6, 1.1 * len(systems) + 3), 5))
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
    return save(fig, out)


# ------------------------------------------------------------------ 4. message sizes


def message_sizes(collectives: Any, out: str | os.PathLike) -> str:
    """Message-size distribution per communication kind (all_reduce, all_to_all, ..., send,
    recv) over every job and rank of the table: one log-x histogram panel per kind (bins are
    powers of two: [2^k, 2^(k+1)) bytes; shared x axis), kinds with most messages first.
    Panels rather than overlaid curves, because kinds often share one exact size."""
    out = check_out(out)
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
    fig, axes = figure(len(kinds), 1, size=(8, 1.0 + 1.15 * len(kinds)), sharex=True, squeeze=False)
    colors = [f"C{i % 10}" for i in range(len(kinds))]
    for ax, kind, color in zip(axes[:, 0], kinds, colors):
        values = sorted(sizes[kind])
        n = len(values)
        ax.hist(values, bins=edges, color=color, edgecolor="white",
                label=f"{kind}: n={n:,}, median {fmt_bytes(values[(n - 1) // 2])}")
        ax.set_xscale("log", base=2)
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(y=0.25)
        ax.legend(loc="upper left", fontsize=8, handlelength=1, frameon=False)
    bottom = axes[-1, 0]
    bottom.xaxis.set_major_locator(LogLocator(base=4))
    bottom.xaxis.set_major_formatter(FuncFormatter(fmt_bytes))
    bottom.set_xlabel("message size (bytes, log scale; bins [2^k, 2^(k+1)))")
    fig.supylabel("messages (count)", fontsize=10)
    jobs = len({r["job_id"] for r in rows})
    note = f"; {skipped} without a size left out" if skipped else ""
    fig.suptitle(f"Message-size distribution per kind ({jobs} job{'s' if jobs != 1 else ''}{note})", fontsize=11)
    return save(fig, out)


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
    out = check_out(out)
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

    fig, (ax_b, ax_c) = figure(2, 1, size=(max(7, 0.35 * len(ranks) + 5), 6.5), sharex=True)
    colors = ["#8c8c8c"] * len(ranks)
    colors[lo] = "#4c72b0"
    colors[hi] = "#c44e52"
    mib = [b / (1 << 20) for b in nbytes]
    ax_b.bar(ranks, mib, color=colors)
    ax_b.axhline(sum(mib) / len(mib), color="black", linestyle="--", linewidth=1, label="mean")
    # legend proxies for the highlighted bars
    same = nbytes[hi] == nbytes[lo]
    ax_b.bar([ranks[hi]], [0], color="#c44e52", label=f"max: rank {ranks[hi]} ({fmt_bytes(nbytes[hi])})")
    ax_b.bar([ranks[lo]], [0], color="#4c72b0", label=f"min: rank {ranks[lo]} ({fmt_bytes(nbytes[lo])})"
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
    return save(fig, out)


# ------------------------------------------------------------------ 6. selection error against k


def _selection_curves(selections: Sequence[Any]) -> list[tuple[str, list[dict]]]:
    """(label, curve) per selection: a `chakra select --json` document, or the path of one."""
    import json

    from chakra_core.inputs import open_input

    curves = []
    for i, selection in enumerate(selections):
        label = f"selection {i + 1}"
        if isinstance(selection, (str, os.PathLike)):
            label = os.path.splitext(os.path.basename(os.fspath(selection)))[0]
            with open_input(os.fspath(selection)) as f:
                selection = json.load(f)
        if not isinstance(selection, dict) or not selection.get("curve"):
            raise ValueError(f"{label}: not a `chakra select --json` document with an error curve ('curve')")
        curves.append((label, selection["curve"]))
    return curves


def selection_error(selections: Sequence[Any], out: str | os.PathLike, target: float | None = None) -> str:
    """The largest estimate error (solid) and each metric group's (thin) against k, one colour
    per selection (`chakra select --json` documents or their paths: the curve runs up to their
    k); a log y axis, since errors fall by orders of magnitude; `target` as a dotted line."""
    out = check_out(out)
    curves = _selection_curves(selections)
    fig, ax = figure()
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
    return save(fig, out)


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
        check_out(a.output)
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
