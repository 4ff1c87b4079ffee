"""The daily report: one self-contained HTML page of a day of the warehouse.

`chakra report --warehouse URL [--date D] -o DIR` writes DIR/index.html: the day's jobs and
rejects, where device time goes across the fleet (a bar chart), the host-bound jobs, the best
system per job, the representatives and their estimate error, and the synthetic jobs'
fidelity (chakra_core.analysis.daily's sections). Plots are inline PNG (base64), styles
inline; the page has no scripts and fetches nothing, so it opens offline and as an e-mail
attachment.
"""

from __future__ import annotations

import base64
import html
import io
import sys

import pyarrow as pa

from chakra_core.outputs import open_output
from chakra_core.terminal import printable
from chakra_core.viz.figure import figure

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:72em;color:#222}"
         "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em;"
         "text-align:left;font-size:90%}th{background:#eee}h2{margin-top:1.6em}.note{color:#666}")
# section -> (heading, what it says when empty)
HEADINGS = {
    "jobs": ("Jobs", "no jobs were converted"),
    "rejects": ("Rejects", "nothing was rejected"),
    "device_jobs": ("Device time per job", "no job with device kernels"),
    "host_bound": ("Host-bound jobs", "no job is bound by its host"),
    "best_system": ("Best system per job", "no simulation finished"),
    "representatives": ("Representatives and their estimate error", "no representatives"),
    "fidelity": ("Synthetic jobs' fidelity", "no synthetic jobs were compared"),
}


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return text(str(value))


def text(value: str) -> str:
    """Untrusted text for the page: HTML escaped, and bidirectional controls (which reorder what
    a reader sees) and other control characters shown as escapes, as in the terminal."""
    return html.escape(printable(value))


def html_table(table: pa.Table) -> str:
    head = "".join(f"<th>{text(c)}</th>" for c in table.column_names)
    rows = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row.values()) + "</tr>"
                   for row in table.to_pylist())
    return f"<table><tr>{head}</tr>{rows}</table>"


def family_plot(families: pa.Table) -> str:
    """Device time by family, recorded and predicted side by side, as a base64 PNG."""
    rows = families.to_pylist()
    names = sorted({r["family"] for r in rows}, key=lambda f: -sum(r["ns"] for r in rows if r["family"] == f))
    fig, ax = figure(size=(8, 3.5))
    for offset, variant in ((-0.2, "recorded"), (0.2, "predicted")):
        ns = {r["family"]: r["ns"] for r in rows if r["variant"] == variant}
        ax.bar([i + offset for i in range(len(names))], [ns.get(n, 0) / 1e6 for n in names], 0.4, label=variant)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("device time (ms, all jobs)")
    ax.legend()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def render(day: str, sections: dict[str, pa.Table]) -> str:
    """The page's HTML."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Fleet report {html.escape(day)}"
             f"</title><style>{STYLE}</style></head><body><h1>Fleet report {html.escape(day)}</h1>"]
    jobs, rejects = sections["jobs"], sections["rejects"]
    parts.append(f"<p>{jobs.num_rows} jobs converted, {rejects.num_rows} files rejected.</p>")
    families = sections["device_families"]
    parts.append("<h2>Where device time goes across the fleet</h2>")
    if families.num_rows:
        parts.append(f"<img alt='device time by family' src='data:image/png;base64,{family_plot(families)}'>")
        parts.append(html_table(families))
    else:
        parts.append("<p class='note'>no job with device kernels</p>")
    for name, (heading, empty) in HEADINGS.items():
        table = sections[name]
        parts.append(f"<h2>{heading}</h2>")
        parts.append(html_table(table) if table.num_rows else f"<p class='note'>{empty}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(warehouse: str, out_dir: str, date: str | None = None) -> str:
    """DIR/index.html for the day (default: the latest); returns its URL."""
    from chakra_core.analysis.daily import day_sections

    day, sections = day_sections(warehouse, date)
    url = out_dir.rstrip("/") + "/index.html"
    with open_output(url, "w") as f:
        f.write(render(day, sections))
    return url


def add_report_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write a day's fleet report: one self-contained HTML page (DIR/index.html)",
        description="One page of a day of the nightly warehouse: jobs and rejects, device time by family across "
        "the fleet, device time per job and the host-bound jobs, the best system per job, the representatives "
        "and their estimate error, the synthetic jobs' fidelity. Plots inline; no network fetches.")
    p.add_argument("--warehouse", default="out/warehouse", metavar="URL", help="the warehouse (default out/warehouse)")
    p.add_argument("--date", metavar="YYYY-MM-DD", help="the day (default: the latest day of the traces table)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write index.html into")
    p.set_defaults(run=cmd_report)


def cmd_report(args) -> int:
    url = write_report(args.warehouse, args.output, args.date)
    print(f"wrote {url}", file=sys.stderr)
    return 0
