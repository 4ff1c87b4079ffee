"""The report pages' plots, each returned as a `data:image/png;base64,...` URI to inline in the
page (so that it opens offline): a step-time sparkline, a job's trends over the days, where
each rank's step goes (stacked bars), and the fleet's device time by kernel family.
Times are drawn in ms; colours are fixed per part, so a family has one colour on every page."""

from __future__ import annotations

import statistics

import base64
import datetime as dt
import io
from collections.abc import Mapping, Sequence

from chakra_core.analysis.job_day import IDLE_LABELS
from chakra_core.viz.figure import figure

# fixed colours: device work in colours, communication in red, idle in greys
PART_COLOURS = {
    "gemm": "#1f77b4", "attention": "#9467bd", "convolution": "#17becf", "elementwise": "#2ca02c",
    "reduction": "#bcbd22", "normalisation": "#8c564b", "optimizer": "#e377c2", "embedding": "#ff7f0e",
    "other": "#7f7f7f", "memcpy": "#c49c94", "communication": "#d62728", "compute": "#1f77b4", "host": "#ffbb78",
    "idle": "#dddddd",
    IDLE_LABELS["host_launch"]: "#dddddd", IDLE_LABELS["synchronisation"]: "#bbbbbb",
    IDLE_LABELS["communication"]: "#ff9896", IDLE_LABELS["other"]: "#eeeeee",
}
_SPARE = ("#aec7e8", "#98df8a", "#ffbb78", "#c5b0d5", "#f7b6d2", "#dbdb8d", "#9edae5")


def colour(part: str) -> str:
    if part in PART_COLOURS:
        return PART_COLOURS[part]
    return _SPARE[sum(map(ord, part)) % len(_SPARE)]  # a family the table does not name: stable across pages


def png_uri(fig, dpi: int = 100) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _days(points: Sequence[tuple[str, float]]) -> list[int]:
    """Days as numbers (date ordinals): a date axis's locators cost more than the rest of a small plot."""
    return [dt.date.fromisoformat(str(d)).toordinal() for d, _ in points]


def _day_ticks(ax, xs: Sequence[int], most: int = 4) -> None:
    ticks = sorted(set(xs))
    ticks = ticks[:: max(1, -(-len(ticks) // most))]
    ax.set_xticks(ticks, [dt.date.fromordinal(t).strftime("%m-%d") for t in ticks], fontsize=7)


SPARK_SPAN = 0.25  # a sparkline's height is at least ±25% of the job's median: +0.5% stays flat, +50% is steep


def sparkline(points: Sequence[tuple[str, float]], scale: float = 1e6) -> str:
    """A small line of a job's values (ns: drawn in ms) over its days, the last day marked. Its
    scale is fixed relative to the job's median (SPARK_SPAN, wider only for a bigger swing), so
    every job's line shows the size of its change, not a change stretched to fill the box."""
    fig, ax = figure(size=(2.4, 0.6), layout=None)
    fig.subplots_adjust(0.02, 0.08, 0.98, 0.92)
    xs, ys = _days(points), [v / scale for _, v in points]
    ax.plot(xs, ys, color="#1f77b4", linewidth=1.2)
    ax.plot(xs[-1:], ys[-1:], "o", color="#d62728", markersize=3)
    ax.set_axis_off()
    middle = statistics.median(ys) or 1.0
    span = max(SPARK_SPAN, *(abs(y / middle - 1) * 1.1 for y in ys))
    ax.set_ylim(middle * (1 - span), middle * (1 + span))
    return png_uri(fig)


def trends(series: Mapping[str, Sequence[tuple[str, float]]], labels: Mapping[str, str]) -> str:
    """A job's times (ns, drawn in ms) over its days, a line per metric: series {metric: [(day,
    value)]}, labels {metric: legend label}."""
    fig, ax = figure(size=(7, 2.4), layout=None)
    fig.subplots_adjust(left=0.09, right=0.7, bottom=0.14, top=0.95)
    xs_all: list[int] = []
    for metric, points in series.items():
        xs = _days(points)
        xs_all += xs
        ax.plot(xs, [v / 1e6 for _, v in points], "o-", markersize=3, label=labels[metric])
    ax.set_ylabel("ms", fontsize=8)
    ax.tick_params(labelsize=7)
    _day_ticks(ax, xs_all)
    ax.set_ylim(bottom=0)
    ax.set_xlim(min(xs_all) - 0.5, max(xs_all) + 0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return png_uri(fig)


def step_bars(entries: Sequence[dict], xlabel: str = "ms per step") -> str:
    """Stacked horizontal bars, one per entry (label and parts in ns: job_day.breakdown's entries),
    in ms per step."""
    order: list[str] = []
    for e in entries:
        order += [p for p in e["parts"] if p not in order]
    order.sort(key=lambda p: (p.startswith("idle"), p == "communication", p in ("memcpy", "host")))
    labels = [e["label"] for e in entries]
    height = max(0.9 + 0.32 * len(entries), 0.3 + 0.16 * len(order))
    fig, ax = figure(size=(9, height), layout=None)  # margins by hand: labels and legend have known widths
    fig.subplots_adjust(left=1.3 / 9, right=1 - 1.9 / 9, bottom=0.5 / height, top=1 - 0.1 / height)
    left = [0.0] * len(entries)
    for part in order:
        widths = [e["parts"].get(part, 0.0) / 1e6 for e in entries]
        ax.barh(range(len(entries)), widths, left=left, color=colour(part), label=part, edgecolor="white",
                linewidth=0.3)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(entries)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return png_uri(fig)


def family_bars(families: Sequence[dict]) -> str:
    """The fleet's recorded device time by family (rows: family, ns), in ms, once per family."""
    fig, ax = figure(size=(8, 3), layout=None)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.3, top=0.95)
    names = [f["family"] for f in families]
    ax.bar(range(len(names)), [f["ns"] / 1e6 for f in families], color=[colour(n) for n in names])
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("ms, all jobs")
    return png_uri(fig)


def critical_path(segments: Sequence[Sequence], ranks: int) -> str:
    """A step's critical path across the ranks (segments: rank, kind, start ns, end ns, as
    `chakra stragglers` gives them): one lane per rank, each stretch of the path on the rank that
    held it, coloured by kind (`compute:<class>` by its class), a thin line where it crosses to the
    rank that closed a join."""
    height = 0.9 + 0.28 * ranks
    fig, ax = figure(size=(9, height), layout=None)
    fig.subplots_adjust(left=0.8 / 9, right=1 - 1.9 / 9, bottom=0.5 / height, top=1 - 0.1 / height)
    origin = segments[0][2] if segments else 0
    drawn: set = set()
    for k, (rank, kind, start, end) in enumerate(segments):
        part = kind.split(":", 1)[-1]
        ax.barh(rank, (end - start) / 1e6, left=(start - origin) / 1e6, color=colour(part), height=0.6,
                label=None if part in drawn else part)
        drawn.add(part)
        if k and segments[k - 1][0] != rank:
            ax.plot([(start - origin) / 1e6] * 2, [segments[k - 1][0], rank], color="black", linewidth=0.6)
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms into the step")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return png_uri(fig)
