"""The daily report page (chakra report, chakra_core.viz.report over analysis.daily): its
sections from a warehouse's tables, and that headless Chromium renders it without a console
error or a network fetch."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from table_rows import complete

from chakra_core.cli import main
from pipeline import tables

DATE = "2026-11-20"


def _warehouse(root) -> str:
    url = str(root / "warehouse")
    rows = {
        "traces": [{"job_id": "gpu-gpt", "rank": 0, "nodes": 18813, "source_format": "pytorch_et"},
                   {"job_id": "gpu-tiny", "rank": 0, "nodes": 3699, "source_format": "pytorch_et"}],
        "rejects": [{"job_id": "bad", "file": "bad/rank0.et.json.gz", "stage": "convert", "reason": "cut short"}],
        "device_time": [{"job_id": "gpu-gpt", "rank": 0, "variant": v, "family": f, "ns": ns, "count": 3}
                        for v in ("recorded", "predicted") for f, ns in (("gemm", 24_000_000), ("elementwise", 9e6))],
        "device_verdicts": [{"job_id": j, "rank": 0, "variant": "predicted", "system": "reference", "span_ns": 5e7,
                             "busy_share": share, "idle_host_launch_ns": 1, "idle_synchronisation_ns": 0,
                             "idle_communication_ns": 0, "bound": bound}
                            for j, share, bound in (("gpu-gpt", 0.8, "device"), ("gpu-tiny", 0.03, "host"))],
        "sim_results": [{"job_id": "gpu-gpt", "system": s, "status": "ok", "finish_ns": ns}
                        for s, ns in (("ring-native", 5e7), ("switch-8", 4e7))],
        "representatives": [{"job_id": "gpu-gpt", "npus": 1, "representative": True, "weight": 2.0,
                             "estimate_error": 0.01}],
    }
    for name in tables.TABLES:
        tables.write_day(url, name, DATE, tables.from_rows(name, [
            complete(name, {k: int(v) if isinstance(v, float) and k.endswith("ns") else v for k, v in r.items()})
            for r in rows.get(name, [])]))
    return url


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    assert main(["report", "--warehouse", _warehouse(root), "-o", str(root / "out")]) == 0  # the latest day
    return root / "out" / "index.html"


def test_sections_and_self_contained(page):
    text = page.read_text()
    assert f"Fleet report {DATE}" in text and "2 jobs converted, 1 files rejected" in text
    for heading in ("Where device time goes across the fleet", "Host-bound jobs", "Best system per job",
                    "Representatives and their estimate error", "Synthetic jobs&#x27; fidelity"
                    if "&#x27;" in text else "Synthetic jobs' fidelity"):
        assert heading in text
    assert "data:image/png;base64," in text and "<script" not in text
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", text)  # nothing to fetch
    host_bound = text.split("Host-bound jobs")[1].split("<h2>")[0]
    assert "gpu-tiny" in host_bound and "gpu-gpt" not in host_bound
    assert "switch-8" in text.split("Best system per job")[1].split("<h2>")[0]


def test_chromium_renders_it_without_console_errors(page, tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "scripts/setup.sh installs Debian's chromium package"
    shot = tmp_path / "page.png"
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--window-size=1280,2400", f"--screenshot={shot}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Fleet report" in done.stdout and "<img" in done.stdout
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == []
    assert shot.stat().st_size > 10_000


def test_a_folder_without_tables_is_one_line(tmp_path, capsys):
    assert main(["report", "--warehouse", str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no tables/ folder" in err
