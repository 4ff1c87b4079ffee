"""The report pages (chakra report, chakra_core.viz.report over analysis.daily and job_day): the
index of days, a day's page opening with what changed, a page per job with its timeline; the
links between them; the numbers the old page got wrong, each with the case that showed it; and
that headless Chromium renders the pages without a console error or a network fetch."""

from __future__ import annotations

import gzip
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from table_rows import complete

from chakra_core.analysis import daily, job_day
from chakra_core.cli import main
from chakra_core.generate.workloads import generate
from chakra_core.viz.report_job import MAX_TIMELINE_NODES
from chakra_core.viz.timeline import validate_trace_events
from pipeline import tables

DAYS = ("2026-11-23", "2026-11-24", "2026-11-25")
LAST = DAYS[-1]
SYSTEMS = ("ring-native", "ring-8", "switch-8", "fc-8", "ring-16", "ring4xswitch4-16")
WHY_NOT = "the trace has communicator sub-groups: it scales only to a multiple of its 4 NPUs, not 6"
SPAN = 100_000_000  # gloo-w4's span of each rank over its 2 steps


def _verdict(job, rank, variant, span, busy, compute, idle, bound, steps=2):
    causes = dict(zip(("idle_host_launch_ns", "idle_synchronisation_ns", "idle_communication_ns", "idle_other_ns"),
                      idle))
    return {"job_id": job, "rank": rank, "variant": variant, "system": variant, "span_ns": span, "busy_ns": busy,
            "compute_ns": compute, "busy_share": busy / span, **causes, "exposed_comm_ns": busy - compute,
            "bound": bound, "steps": steps}


def _day_rows(day: str, index: int, prefix: str) -> dict[str, list[dict]]:
    """One day of the fleet; the last day gpu-gpt's GEMMs are 40% slower and gen-tiny moves twice the bytes."""
    gemm = 24_000_000 * (1.4 if day == LAST else 1.0)
    kernels = [("nvjet_gemm_a", "gemm", gemm * 0.75), ("nvjet_gemm_b", "gemm", gemm * 0.25),
               ("elementwise_kernel", "elementwise", 9_000_000)]
    kernels.append(("new_fused_kernel", "elementwise", 1_000_000) if day == LAST else ("old_kernel", "other", 500_000))
    gpt_busy = int(sum(ns for *_, ns in kernels))
    history = {"gpu-gpt": {"step_ns": 180e6 - index * 1e6, "predicted_step_ns": 46e6, "busy_share": 0.2,
                           "family_ns:gemm": gemm / 2, "sim_finish_ns": 360e6, "sim_host_ns": 280e6,
                           "sim_compute_ns": 78e6, "ranks": 1},
               "gen-tiny": {"sim_finish_ns": 9e6 * (1.5 if day == LAST else 1.0 + index / 100), "sim_compute_ns": 6e6,
                            "sim_exposed_comm_ns": 3e6,
                            "comm_bytes:all_reduce": 2**30 * (2 if day == LAST else 1), "ranks": 2}}
    return {
        "traces": [{"job_id": "gpu-gpt", "rank": 0, "nodes": 18813, "source_format": "pytorch_et"},
                   *({"job_id": "gloo-w4", "rank": r, "nodes": 1000, "source_format": "pytorch_et"} for r in range(4)),
                   *({"job_id": "gen-tiny", "rank": r, "nodes": 25, "source_format": "chakra_et",
                      "path": f"{prefix}/traces/date={day}/job=gen-tiny/gen-tiny.{r}.et"} for r in range(2)),
                   {"job_id": "bad-unknown-file", "rank": 0, "nodes": 416, "source_format": "chakra_et"},
                   {"job_id": "big-job", "rank": 0, "nodes": MAX_TIMELINE_NODES + 1, "source_format": "chakra_et",
                    "path": f"{prefix}/traces/date={day}/job=big-job/big-job.0.et"}],
        "rejects": [{"job_id": "bad-unknown-file", "file": "bad-unknown-file/notes.txt", "stage": "ingest",
                     "reason": "unknown file type"}],
        "device_time": [{"job_id": "gpu-gpt", "rank": 0, "variant": v, "family": f, "ns": int(ns), "count": 3}
                        for v in ("recorded", "predicted") for f, ns in (("gemm", gemm), ("elementwise", 9e6))],
        "device_verdicts": [
            _verdict("gpu-gpt", 0, "recorded", 360_000_000, gpt_busy, gpt_busy, (262_000_000, 0, 0, 2_000_000), "host"),
            _verdict("gpu-gpt", 0, "predicted", 92_000_000, gpt_busy, gpt_busy, (8_000_000, 0, 0, 0), "device"),
            # each rank waits 60% of its span for gloo: summed over the 4 ranks that was 2.4 spans
            *(_verdict("gloo-w4", r, "recorded", SPAN, 30_000_000, 30_000_000, (10_000_000, 0, 60_000_000, 0),
                       "communication") for r in range(4))],
        "kernels": [{"job_id": "gpu-gpt", "name": n, "family": f, "count": 10, "total_ns": int(ns),
                     "median_ns": int(ns / 10), "ranks": 1} for n, f, ns in kernels],
        "sim_results": [{"job_id": "gpu-gpt", "system": s, "status": "ok" if s == "ring-native" else "not simulated",
                         "error": None if s == "ring-native" else WHY_NOT, "finish_ns": 360_000_000 if s == "ring-native"
                         else None} for s in SYSTEMS]
                       + [{"job_id": "gen-tiny", "system": s, "status": "ok", "finish_ns": 9_000_000 + 1000 * k}
                          for k, s in enumerate(SYSTEMS)],
        "representatives": [
            {"job_id": j, "npus": n, "cluster": c, "representative": True, "weight": w, "status": "ok",
             "cluster_time_share": share, "cluster_estimate_error": err, "estimate_error": 0.0123,
             "estimate_errors": json.dumps({"time": 0.0123, "jobs": 0.004})}
            for j, n, c, w, share, err in (("gpu-gpt", 1, 0, 2.0, 0.6, 0.071), ("bad-unknown-file", 1, 1, 3.0, 0.4, 0.188))],
        "colocation": [] if day != LAST else [
            {"job_id": j, "network": "cluster.yml", "placement": "interleaved", "mode": "aware", "ranks": 2,
             "finish_ns": finish, "alone_finish_ns": 9_000_000, "slowdown": finish / 9_000_000, "status": "ok",
             "top_link": "dim 0: NPU 1 -> NPU 2", "top_link_waited_ns": 4_000_000,
             "behind": json.dumps([{"job": other, "waited_ns": 9_000_000, "bytes": 1024}])}
            for j, other, finish in (("gen-tiny", "gloo-w4", 18_000_000), ("gloo-w4", "gen-tiny", 9_000_000))],
        "job_history": [{"job_id": j, "fingerprint": "fp-" + j, "metric": m, "value": v, "unit": "ns"}
                        for j, figures in history.items() for m, v in figures.items()],
        "regressions": [] if day != LAST else [
            {"job_id": "gpu-gpt", "metric": "family_ns:gemm", "before": 12e6, "after": 16.8e6, "change": 0.4,
             "threshold": 0.05, "kind": "regression", "cause": "family:gemm", "history_days": 2},
            {"job_id": "gen-tiny", "metric": "comm_bytes:all_reduce", "before": 2**30, "after": 2**31, "change": 1.0,
             "threshold": 0.01, "kind": "regression", "cause": "comm_bytes:all_reduce", "history_days": 2}],
    }


def _warehouse(root: Path) -> str:
    url = str(root / "warehouse")
    for index, day in enumerate(DAYS):
        rows = _day_rows(day, index, url)
        for name in tables.TABLES:
            tables.write_day(url, name, day, tables.from_rows(name, [complete(name, r) for r in rows.get(name, [])]))
        generate("mlp", 2).job().write(f"{url}/traces/date={day}/job=gen-tiny", "gen-tiny")
    return url


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> str:
    return _warehouse(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def reports(warehouse) -> Path:
    """The pages of the last two days, as `chakra report` writes them under WAREHOUSE/reports."""
    assert main(["report", "--warehouse", warehouse, "--date", DAYS[1], "--date", LAST]) == 0
    return Path(warehouse) / "reports"


def _text(path: Path) -> str:
    return html.unescape(path.read_text())


def _section(text: str, anchor: str) -> str:
    return text.split(f'id="{anchor}"', 1)[1].split("<h2", 1)[0]


def _links(page: Path) -> list[Path]:
    hrefs = re.findall(r'href="([^"#]+)"', page.read_text())
    return [(page.parent / unquote(h)).resolve() for h in hrefs]


def test_index_day_and_job_pages_link_to_files_that_exist(reports):
    index = reports / "index.html"
    index_links = _links(index)
    day = reports / f"date={LAST}" / "index.html"
    assert day.resolve() in index_links and (reports / f"date={DAYS[1]}" / "index.html").resolve() in index_links
    assert "(no page yet)" in _text(index)  # the first day has tables but no page
    job = reports / f"date={LAST}" / "job=gpu-gpt.html"
    assert job.resolve() in _links(day)
    for page in (index, day, job, reports / f"date={LAST}" / "job=gen-tiny.html"):
        missing = [str(p) for p in _links(page) if not p.exists()]
        assert missing == [], page


def test_the_day_page_opens_with_what_changed(reports):
    text = _text(reports / f"date={LAST}" / "index.html")
    assert text.index('id="changes"') < text.index('id="jobs"')
    changes = _section(text, "changes")
    assert "2 job(s) flagged" in changes
    assert "family:gemm" in changes and "12.000 ms → 16.800 ms" in changes and "+40.0 %" in changes
    assert "comm_bytes:all_reduce" in changes and "1.00 GiB → 2.00 GiB" in changes
    assert changes.count("data:image/png;base64,") == 2  # a sparkline per flagged job
    assert "step time, 3 days" in changes and "simulated finish, 3 days" in changes
    quiet = _section(_text(reports / f"date={DAYS[1]}" / "index.html"), "changes")
    assert "Nothing flagged" in quiet
    index = _text(reports / "index.html")
    row = next(r for r in index.split("<tr>") if LAST in r)
    assert "gpu-gpt" in row and "gen-tiny" in row
    quiet_row = next(r for r in index.split("<tr>") if DAYS[1] in r)
    assert re.findall(r'<td class="n">(\d+)</td>', quiet_row)[-3:] == ["0", "0", "0"]  # flagged, regressions, improvements


def test_idle_time_never_exceeds_the_step(warehouse, reports):
    """The old page summed comm idle over ranks (4 x 60 ms) against the slowest rank's span (100 ms)."""
    rows = daily.sections_of(daily.open_day(warehouse, LAST))["device_jobs"].to_pylist()
    for row in rows:
        for idle in ("idle_host_ns", "idle_comm_ns", "idle_other_ns"):
            assert row[idle] <= row["step_ns"], (row["job_id"], idle)
    gloo = next(r for r in rows if r["job_id"] == "gloo-w4")
    assert gloo["step_ns"] == SPAN / 2 and gloo["idle_comm_ns"] == 60_000_000 / 2
    device = _section(_text(reports / f"date={LAST}" / "index.html"), "device")
    assert re.search(r"gloo-w4.*?50\.00 ms.*?30\.00 ms", device, re.S)


def test_device_families_are_drawn_once_and_the_prediction_is_a_step_time(warehouse, reports):
    """Recorded and predicted family time were identical bar pairs: the model changes host time only."""
    families = daily.sections_of(daily.open_day(warehouse, LAST))["device_families"]
    assert "variant" not in families.column_names
    assert sorted(families.column("family").to_pylist()) == ["elementwise", "gemm"]
    text = _text(reports / f"date={LAST}" / "index.html")
    assert _section(text, "families").count("data:image/png;base64,") == 1
    device = _section(text, "device")
    assert "step predicted" in device and "46.00 ms" in device and "180.0 ms" in device


def test_best_system_says_how_many_systems_simulated_and_why_not(reports):
    systems = _section(_text(reports / f"date={LAST}" / "index.html"), "systems")
    gpt = next(r for r in systems.split("<tr>") if "gpu-gpt" in r)
    assert "1 of 6" in gpt and "one system" in gpt and "1.00" not in gpt
    assert "fc-8, ring-16, ring-8, ring4xswitch4-16, switch-8: not simulated" in gpt and WHY_NOT[:60] in gpt
    tiny = next(r for r in systems.split("<tr>") if "gen-tiny" in r)
    assert "6 of 6" in tiny and "1.00" in tiny and "a tie" not in tiny  # 1 µs apart: close, not a tie


def test_the_days_estimate_error_is_said_once_and_each_representative_has_its_own(reports):
    text = _section(_text(reports / f"date={LAST}" / "index.html"), "representatives")
    assert text.count("1.23 %") == 2  # once as the day's error, once in its groups (time 1.23 %, jobs 0.40 %)
    assert "at most <b>1.23 %</b>" in text and "jobs 0.40 %" in text
    assert "7.1 %" in text and "18.8 %" in text


def test_a_representative_with_rejected_files_is_flagged(reports):
    text = _text(reports / f"date={LAST}" / "index.html")
    row = next(r for r in _section(text, "representatives").split("<tr>") if "bad-unknown-file" in r)
    assert "1 rejected file(s)" in row
    job = _text(reports / f"date={LAST}" / "job=bad-unknown-file.html")
    assert "Files of this job were rejected" in job and "bad-unknown-file/notes.txt" in job


def test_jobs_placed_together_slowest_first_with_whom_they_waited_behind(reports):
    section = _section(_text(reports / f"date={LAST}" / "index.html"), "colocation")
    assert "2 job(s) placed interleaved on cluster.yml (aware network)" in section
    assert section.index("gen-tiny") < section.index("gloo-w4")  # the slowdown of 2.000 first
    assert "2.000" in section
    assert "dim 0: NPU 1 -> NPU 2 (4.00 ms)" in section and "gloo-w4: 9.00 ms" in section
    earlier = _section(_text(reports / f"date={DAYS[1]}" / "index.html"), "colocation")
    assert "No placement what-if ran" in earlier


def test_numbers_are_ms_percent_and_binary_sizes(reports):
    for page in (reports / f"date={LAST}" / "index.html", reports / f"date={LAST}" / "job=gpu-gpt.html"):
        text = re.sub(r"<[^>]+>", " ", _text(page).split('id="glossary"')[0])
        assert not re.findall(r"(?<![\w.,])\d{5,}(?![\w.,])", text), page  # no raw nanoseconds or bytes
        assert not re.findall(r"(?<![\w.])0\.\d{3,}(?! ?(ms|%))", text), page  # no bare fractions
    device = _section(_text(reports / f"date={LAST}" / "index.html"), "device")
    assert "30.0 %" in device  # gloo-w4's busy share


def test_the_job_page_explains_recorded_predicted_and_simulated_bounds(reports):
    text = _text(reports / f"date={LAST}" / "job=gpu-gpt.html")
    views = _section(text, "views")
    assert "recorded step" in views and "predicted step" in views and "simulated trace" in views
    assert "host-bound" in views and "predicted step is device-bound" in views and "the profiler, not the job" in views
    assert "77.8 % of its 360.0 ms on the host" in views and "profiler's cost included" in views


def test_the_job_page_breaks_down_each_rank_and_compares_with_the_day_before(reports):
    text = _text(reports / f"date={LAST}" / "job=gpu-gpt.html")
    assert "data:image/png;base64," in _section(text, "breakdown")
    kernels = _section(text, "kernels")
    assert kernels.index("nvjet_gemm_a") < kernels.index("elementwise_kernel")
    diff = _section(text, "diff")
    assert f"chakra diff of gpu-gpt on {DAYS[1]} and gpu-gpt on {LAST}" in diff
    raw = _section((reports / f"date={LAST}" / "job=gpu-gpt.html").read_text(), "diff")
    assert "<td title=\"family_ns:gemm\">gemm kernel time per step</td>" in raw and "&lt;t" not in raw  # the figures' table is HTML, not its tags as text
    gemm = next(r for r in diff.split("<tr>") if "family_ns:gemm" in r)
    assert "+40.0 %" in gemm and "yes" in gemm and "regression" in gemm
    for name, status in (("new_fused_kernel", "added"), ("old_kernel", "vanished"), ("nvjet_gemm_a", "changed")):
        assert re.search(rf"{name}.*?<td>{status}</td>", diff, re.S), name
    assert "1 added, 1 vanished, 2 changed, 1 the same" in diff
    assert "data:image/png;base64," in _section(text, "history")
    no_device = _section(_text(reports / f"date={LAST}" / "job=gen-tiny.html"), "breakdown")
    assert "No device kernels" in no_device and "data:image/png;base64," in no_device  # the simulated parts


def test_each_step_breakdown_adds_up_to_the_span():
    verdict = _verdict("j", 0, "recorded", 90, 50, 40, (20, 10, 5, 5), "device", steps=3)
    families = [{"family": "gemm", "ns": 30}, {"family": "memcpy_htod", "ns": 20}, {"family": "communication", "ns": 12}]
    parts = job_day.step_parts(verdict, families)  # gemm and memcpy overlap: 50 ns of them in 40 ns of compute
    assert sum(parts.values()) == pytest.approx(30)
    assert parts["gemm"] == pytest.approx(8) and parts["memcpy"] == pytest.approx(40 / 3 * 2 / 5)
    assert parts["communication"] == pytest.approx(10 / 3) and parts["idle: host launch"] == pytest.approx(20 / 3)


def test_a_job_page_has_its_perfetto_timeline_unless_too_large(reports):
    folder = reports / f"date={LAST}"
    assert "job=gen-tiny.timeline.json.gz" in _section(_text(folder / "job=gen-tiny.html"), "timeline")
    doc = json.loads(gzip.decompress((folder / "job=gen-tiny.timeline.json.gz").read_bytes()))
    assert validate_trace_events(doc) == [] and doc["otherData"]["npus"] == 2
    big = _section(_text(folder / "job=big-job.html"), "timeline")
    assert f"more than the {MAX_TIMELINE_NODES:,}" in big and not (folder / "job=big-job.timeline.json.gz").exists()
    assert "No timeline" in _section(_text(folder / "job=gpu-gpt.html"), "timeline")  # no converted traces


def _render(path: Path, tmp: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Headless Chromium on a page: (the run, the URLs the page itself fetched, from Chromium's
    net log: requests the page initiated, not the browser's own background ones)."""
    chromium = shutil.which("chromium")
    assert chromium, "scripts/setup.sh installs Debian's chromium package"
    netlog = tmp / "net.json"
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--window-size=1280,2400", f"--screenshot={tmp / 'page.png'}",
                           f"--log-net-log={netlog}", "--dump-dom", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    events = json.loads(netlog.read_text()).get("events", []) if netlog.exists() else []
    fetched = sorted({e["params"]["url"] for e in events if "url" in e.get("params", {})
                      and e["params"].get("initiator", "not an origin") != "not an origin"
                      and not e["params"]["url"].startswith(("file:", "data:"))})
    return done, fetched


def test_the_fetch_check_sees_a_page_that_fetches(tmp_path):
    page = tmp_path / "fetches.html"
    page.write_text("<!DOCTYPE html><html><body><img src='https://example.invalid/x.png'></body></html>")
    assert _render(page, tmp_path)[1] == ["https://example.invalid/x.png"]


@pytest.mark.parametrize("page", ["index.html", f"date={LAST}/index.html", f"date={LAST}/job=gpu-gpt.html"])
def test_chromium_renders_the_pages_without_console_errors_or_fetches(reports, page, tmp_path):
    path = reports / page
    text = path.read_text()
    assert "<script" not in text and not re.search(r"""(src|href)=['"]?(https?:)?//|url\(""", text)
    done, fetched = _render(path, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<h1>" in done.stdout and "Terms" in done.stdout
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == [] and fetched == []
    assert (tmp_path / "page.png").stat().st_size > 10_000


def test_the_nightly_flows_call_writes_the_day_and_the_index_beside_it(warehouse, tmp_path):
    from chakra_core.viz.report import write_report

    url = write_report(warehouse, str(tmp_path / "reports" / f"date={LAST}"), LAST)
    assert url.endswith(f"date={LAST}/index.html") and Path(url).exists()
    assert (tmp_path / "reports" / "index.html").exists()


def test_a_folder_without_tables_is_one_line(tmp_path, capsys):
    assert main(["report", "--warehouse", str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no tables/ folder" in err
