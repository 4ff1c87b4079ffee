"""The daily report: self-contained HTML pages of the nightly warehouse.

`write_report(warehouse, out_dir, date)` writes, for one day (default: the latest):

- `out_dir/index.html`, the day's page: what changed since the day before (each flagged job,
  its changed figures and causes, and a sparkline of its step time over the days held), then
  the day's jobs and rejects, device time by family across the fleet, device time per job, the
  host-bound jobs, the simulated systems per job, the representatives and the synthetic jobs'
  fidelity (chakra_core.analysis.daily's sections);
- `out_dir/job=<id>.html` per job (report_job.py) and its timelines, `job=<id>.timeline.json.gz`
  (simulated) and `job=<id>.recorded.json.gz` (as recorded);
- the index of days, `index.html` in out_dir's parent: every day of the warehouse with its
  counts and flagged changes, linking the day pages found beside it.

The nightly flow passes `WAREHOUSE/reports/date=<d>`; `chakra report` does the same under its
`-o` folder. Plots are inline PNG, styles inline; the pages have no scripts and fetch nothing, so
they open offline.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import fsspec

from chakra_core.analysis import daily
from chakra_core.days import iso_day
from chakra_core.outputs import open_output
from chakra_core.viz import report_plots
from chakra_core.viz.pages import ms, page_of, render
from chakra_core.viz.report_job import job_page

HEADLINE_TRENDS = ("step_ns", "sim_finish_ns")  # a flagged job's sparkline: the first of these it has


def folder_of(date: str) -> str:
    """A day's folder under the reports root."""
    return f"date={date}"


def _exists(url: str) -> bool:
    fs, path = fsspec.core.url_to_fs(url)
    return fs.exists(path)


def _write(url: str, text: str) -> str:
    with open_output(url, "w") as f:
        f.write(text)
    return url


def write_report(warehouse: str, out_dir: str, date: str | None = None) -> str:
    """The day's page, its job pages and timelines in out_dir, the index of days in its parent;
    returns the day page's URL."""
    day = daily.open_day(warehouse, date)
    sections = {name: table.to_pylist() for name, table in daily.sections_of(day).items()}
    out_dir = out_dir.rstrip("/")
    root = out_dir.rsplit("/", 1)[0] if "/" in out_dir else "."
    days = daily.days_index(daily.open_day(warehouse, day.date, window=False))  # every day, not the window
    earlier = [d["date"] for d in days if d["date"] < day.date and _exists(f"{root}/{folder_of(d['date'])}/index.html")]
    previous = {"date": earlier[0], "folder": folder_of(earlier[0])} if earlier else None
    jobs = [j["job_id"] for j in sections["jobs"]]
    history_rows = daily.history(day, jobs).to_pylist()
    by_job: dict[str, list[dict]] = defaultdict(list)
    for row in history_rows:
        by_job[row["job_id"]].append(row)
    models = job_models(sections, previous)
    for job in jobs:
        _write(f"{out_dir}/{page_of(job)}", job_page(day, job, models[job], by_job[job], out_dir))
    url = _write(f"{out_dir}/index.html", render("day.html.j2", **day_context(day, sections, by_job, previous)))
    write_index(day, days, root)
    return url


def job_models(sections: dict[str, list[dict]], previous: dict | None) -> dict[str, dict]:
    """What the day's sections say of each job, for its page."""
    pick = {name: {r["job_id"]: r for r in sections[name]} for name in ("device_jobs", "systems")}
    grouped = {name: defaultdict(list) for name in ("rejects", "not_simulated", "changes")}
    for name, rows in grouped.items():
        for r in sections[name]:
            rows[r["job_id"]].append(r)
    return {j["job_id"]: {"info": j, "device": pick["device_jobs"].get(j["job_id"]),
                          "systems": pick["systems"].get(j["job_id"]),
                          "not_simulated": grouped["not_simulated"][j["job_id"]],
                          "rejected": grouped["rejects"][j["job_id"]], "flagged": grouped["changes"][j["job_id"]],
                          "previous": previous}
            for j in sections["jobs"]}


def day_context(day: daily.Day, sections: dict[str, list[dict]], history: dict[str, list[dict]],
                previous: dict | None) -> dict:
    """The day page's template context."""
    rejected = defaultdict(int)
    for r in sections["rejects"]:
        rejected[r["job_id"]] += len(r["files"])
    flagged = defaultdict(int)
    for r in sections["changes"]:
        flagged[r["job_id"]] += 1
    jobs = [{**j, "rejected_files": rejected[j["job_id"]], "flagged": flagged[j["job_id"]]} for j in sections["jobs"]]
    not_simulated = defaultdict(list)
    for r in sections["not_simulated"]:
        not_simulated[r["job_id"]].append(r)
    estimate = sections["estimate"][0] if sections["estimate"] else None
    if estimate:
        estimate = {**estimate, "errors": _json_map(estimate["estimate_errors"])}
    families = sections["device_families"]
    return {
        "day": day.date, "previous": previous, "jobs": jobs, "rejects": sections["rejects"],
        "rejected_files": sum(rejected.values()), "rejected_jobs": len({r["job_id"] for r in sections["rejects"]}),
        "has_history": day.has("job_history"), "changes": change_blocks(sections["changes"], history),
        "compared": sum(1 for rows in history.values() if len({str(r["date"]) for r in rows}) > 1),
        "families": families, "family_plot": report_plots.family_bars(families) if families else None,
        "device_jobs": sections["device_jobs"],
        "host_bound": [d for d in sections["device_jobs"] if "host" in (d["bound"], d["predicted_bound"])],
        "systems": [{**s, "not_simulated": not_simulated[s["job_id"]]} for s in sections["systems"]],
        "representatives": [{**r, "rejected_files": rejected[r["job_id"]]} for r in sections["representatives"]],
        "estimate": estimate, "fidelity": sections["fidelity"],
        "colocation": [{**c, "behind": _json_list(c["behind"])} for c in sections["colocation"]],
    }


def _json_list(text: str | None) -> list:
    """A JSON list cell of the warehouse; a damaged one shows as empty."""
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return found if isinstance(found, list) else []


def _json_map(text: str | None) -> dict:
    """A JSON object cell of the warehouse; a damaged one (not JSON, not an object) shows as none."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def change_blocks(changes: list[dict], history: dict[str, list[dict]]) -> list[dict]:
    """The flagged changes by job, each with a sparkline of its step time over the days held; the
    jobs by what their costliest change costs the step."""
    by_job: dict[str, list[dict]] = defaultdict(list)
    for r in changes:
        by_job[r["job_id"]].append(r)
    blocks = []
    for job, rows in by_job.items():
        block = {"job": job, "rows": rows, "spark": None}
        for metric in HEADLINE_TRENDS:
            points = [(str(h["date"]), h["value"]) for h in history.get(job, []) if h["metric"] == metric]
            if len(points) >= 2:
                values = [v for _, v in points]
                block.update(spark=report_plots.sparkline(points), spark_days=len(points),
                             spark_label="step time" if metric == "step_ns" else "simulated finish",
                             spark_range=f"{ms(min(values))} to {ms(max(values))}, today {ms(values[-1])}")
                break
        blocks.append(block)
    return sorted(blocks, key=lambda b: -max(abs(r["step_impact"] or 0.0) for r in b["rows"]))


def write_index(day: daily.Day, days: list[dict], root: str) -> str:
    """root/index.html: every day of the warehouse, linking the day pages found under root."""
    keys = ("jobs", "ranks", "rejected_files", "simulations_ok", "simulations", "flagged", "regressions",
            "improvements")
    rows = []
    for d in days:
        folder = folder_of(d["date"])
        page = f"{folder}/index.html" if _exists(f"{root}/{folder}/index.html") else None
        rows.append({**{k: d.get(k) for k in keys}, "flagged_jobs": d.get("flagged_jobs") or [], "date": d["date"],
                     "folder": folder, "page": page})
    return _write(f"{root}/index.html", render("index.html.j2", days=rows))


def add_report_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write the fleet report's pages: an index of days, a page per day and per job",
        description="Self-contained HTML pages of the nightly warehouse under DIR: DIR/index.html (every day, its "
        "counts and flagged changes), DIR/date=<d>/index.html (what changed since the day before, then the day's "
        "jobs, rejects, device time, simulated systems, representatives and synthetic jobs) and "
        "DIR/date=<d>/job=<id>.html per job (per-rank step breakdown, top kernels, history, the comparison with "
        "the day before) with Perfetto timelines beside it, simulated and as recorded. Plots inline; no scripts, no network fetches.")
    p.add_argument("--warehouse", default="out/warehouse", metavar="URL", help="the warehouse (default out/warehouse)")
    p.add_argument("--date", action="append", metavar="YYYY-MM-DD", type=iso_day,
                   help="the day (default: the latest night of the warehouse); repeat it for several days")
    p.add_argument("-o", "--output", metavar="DIR", help="the reports folder (default: WAREHOUSE/reports, where the "
                   "nightly flow writes them)")
    p.set_defaults(run=cmd_report)




def cmd_report(args) -> int:
    root = (args.output or args.warehouse.rstrip("/") + "/reports").rstrip("/")
    dates = sorted(args.date) if args.date else [daily.open_day(args.warehouse).date]
    for date in dates:  # oldest first, so that each day page finds the one before it
        url = write_report(args.warehouse, f"{root}/{folder_of(date)}", date)
        print(f"wrote {url}", file=sys.stderr)
    print(f"index: {root}/index.html", file=sys.stderr)
    return 0
