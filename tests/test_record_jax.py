"""tools/record_jax.py records a JAX run live (here: a ring of collective-permutes on two host
devices, in a few seconds) that chakra convert takes as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chakra_core.convert.jax.run import convert_jax_run
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import RECV, SEND

REPO = Path(__file__).resolve().parents[1]


def test_a_ring_recorded_live_converts_with_one_send_per_pair(tmp_path):
    run = tmp_path / "ring"
    done = subprocess.run([sys.executable, "-m", "tools.record_jax", "--model", "ring", "--devices", "2",
                           "--out", str(run), "--timed-steps", "3"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    timing = json.loads((run / "timing.json").read_text())
    assert timing["devices"] == 2 and len(timing["steps_ns"]) == 3 and timing["recorded_steps"] == 2
    assert sorted(p.name.split(".", 2)[2] for p in (run / "hlo").iterdir()) == [
        "before_optimizations.txt", "cpu_after_optimizations-buffer-assignment.txt", "cpu_after_optimizations.txt"]
    assert '"/' not in (run / "step.hlo.txt").read_text().split("FunctionNames")[0]  # no path of this machine
    result = convert_jax_run(str(run), str(tmp_path / "out"), "ring")
    assert result.source["steps"] == [0, 1] and result.unprofiled_step_ns == timing["steps_ns"]
    for device, table in enumerate(Job.read(str(tmp_path / "out" / "ring")).tables):
        rows = table.to_pylist()
        # a ring of two: one collective-permute a step, each device sending to and receiving from the other
        assert [(r["comm_dst"], r["comm_size"]) for r in rows if r["type"] == SEND] == [(1 - device, 64 * 256 * 4)] * 2
        assert [(r["comm_src"], r["comm_size"]) for r in rows if r["type"] == RECV] == [(1 - device, 64 * 256 * 4)] * 2
