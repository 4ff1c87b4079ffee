"""The report pages' HTML: Jinja2 templates (chakra_core/viz/templates/), the filters that write
numbers as people read them, and the glossary that explains the terms where they first appear.

Numbers: times in ms (`ms`), shares and changes in % (`pct`, `signed`), sizes in binary units
(`size`, humanize), a job_history metric by its unit (`figure`). Every page extends
`base.html.j2`: inline styles, no scripts, nothing fetched.
"""

from __future__ import annotations

import functools
import math
from urllib.parse import quote

import humanize
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from chakra_core.analysis.history import shown, words
from chakra_core.literal import file_name_of
from chakra_core.terminal import printable

# term -> what it means (title attributes where a term first appears, and each page's glossary)
GLOSSARY = {
    "step": "One training iteration as the device ran it. A job's step time is the slowest rank's mean step "
            "(its span over the recorded steps).",
    "span": "From the start of a step's first device work to the end of its last: the time the step takes.",
    "busy share": "The part of the span in which the device runs anything (kernels of any stream, copies, "
                  "communication), mean over ranks.",
    "idle causes": "Why the device is idle: host launch (nothing launched yet: it waits for the host), "
                   "synchronisation (the host waits for the device to drain, e.g. .item()), communication (the "
                   "host runs communication the device waits for, e.g. gloo), other (launched work waiting for "
                   "another stream or an event). Per step, mean over ranks.",
    "exposed communication": "Communication with no computation running beside it: the part of communication "
                             "that costs time.",
    "families": "Kernels grouped by name: gemm, attention, convolution, elementwise, reduction, normalisation, "
                "optimizer, embedding, memory copies and sets, communication, other.",
    "recorded": "As the profiler recorded the job, the profiler's own cost on the host included.",
    "predicted": "The step as the simulator predicts it without the profiler: the host-overhead model takes the "
                 "profiler's cost out of host time and keeps every kernel as recorded.",
    "bound": "What holds the step: device (computing), host (idle waiting for launches or synchronisation) or "
             "communication (communication alone, or idle waiting for it), whichever takes most of the span.",
    "reference system": "A Ring of exactly the job's NPUs (50 GB/s, 500 ns per hop) with ring collectives; the "
                        "whole trace is replayed, host operators at their recorded times.",
    "noise": "A job's own day-to-day variation of a figure: the median relative change between consecutive "
             "days of the same program. A change is flagged beyond max(floor, 4 x noise).",
    "worst / best": "The slowest simulated system's finish over the fastest's, among the systems that simulated "
                    "the job.",
    "estimate error": "How far the representatives' weighted figures are from the whole day's (the largest error "
                      "over the estimated groups).",
    "cluster error": "|weight x representative's time - its cluster's time| / the cluster's time: how well this "
                     "representative stands for the jobs of its cluster.",
}


def ms(ns) -> str:
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    value = ns / 1e6
    digits = 1 if abs(value) >= 100 else 2 if abs(value) >= 1 else 3
    return f"{value:,.{digits}f} ms"


def pct(share, digits: int = 1) -> str:
    return "–" if share is None else f"{share * 100:.{digits}f} %"


def signed(change) -> str:
    return "–" if change is None else f"{change * 100:+.1f} %"


def size(n) -> str:
    return "–" if n is None else humanize.naturalsize(n, binary=True, format="%.2f")


def count(n) -> str:
    return "–" if n is None else f"{n:,.0f}"


def figure(value, metric: str) -> str:
    """A job_history value as people read it, by its metric's unit: as the terminal shows it."""
    return "–" if value is None else shown(metric, value)


def _untrusted(value):
    """Every string a page shows, as text: control and bidirectional characters (which reorder
    what a reader sees) written as escapes, as in the terminal (autoescape then escapes HTML).
    Markup is the templates' own HTML (a macro's output), whose values were made text inside it."""
    return printable(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def page_of(job_id: str) -> str:
    """The file name of a job's page beside its day page (a job id is data: literal.file_name_of)."""
    return f"job={file_name_of(job_id)}.html"


def timeline_of(job_id: str) -> str:
    """The file name of a job's timeline beside its page."""
    return f"job={file_name_of(job_id)}.timeline.json.gz"


def recorded_timeline_of(job_id: str) -> str:
    """The file name of a job's recorded timeline beside its page."""
    return f"job={file_name_of(job_id)}.recorded.json.gz"


def href(name: str) -> str:
    return quote(name, safe="=/.")


@functools.cache
def environment() -> Environment:
    env = Environment(loader=PackageLoader("chakra_core.viz", "templates"), autoescape=select_autoescape(["j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      finalize=_untrusted)
    env.filters.update(ms=ms, pct=pct, signed=signed, size=size, count=count, figure=figure, words=words, href=href,
                       page_of=page_of)
    env.globals["GLOSSARY"] = GLOSSARY
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
