"""Copies of a shipped JAX run to damage, and the one line `chakra convert` prints on bad input
(tests/test_jax_hlo.py, tests/test_jax_hostile.py)."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from datapaths import JAX_CPU

from chakra_core.cli import main
from chakra_core.convert.jax.xplane import XSpace


@pytest.fixture
def run_copy(tmp_path, monkeypatch):
    """A copy of datasets/jax-cpu/tp_mlp (4 devices, 3 steps), with tracebacks off."""
    monkeypatch.delenv("CHAKRA_DEBUG", raising=False)
    run = tmp_path / "run"
    shutil.copytree(JAX_CPU / "tp_mlp", run)
    return run


def one_line(capsys, *argv) -> str:
    """The one line a command prints on stderr as it exits 2."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def convert_line(capsys, run) -> str:
    return one_line(capsys, "convert", str(run), "-o", str(run.parent / "out"))


def edit_xplane(run, change) -> None:
    """change(space) on the run's XPlane, written back."""
    path = next(run.rglob("*.xplane.pb"))
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    change(space)
    path.write_bytes(space.SerializeToString())


def device_events(space):
    """(line, event, its device_ordinal stat) of every op that names its device, in file order."""
    for plane in space.planes:
        ordinal = next((k for k, m in plane.stat_metadata.items() if m.name == "device_ordinal"), None)
        for line in plane.lines:
            for event in line.events:
                for stat in event.stats:
                    if stat.metadata_id == ordinal:
                        yield line, event, stat


def edit_trace(run, change) -> None:
    """change(traceEvents) on the run's host trace JSON, which is then read (the XPlane removed)."""
    next(run.rglob("*.xplane.pb")).unlink()
    path = next(run.rglob("vm.trace.json.gz"))
    document = json.loads(gzip.decompress(path.read_bytes()))
    change(document["traceEvents"])
    path.write_bytes(gzip.compress(json.dumps(document).encode()))


def trace_ops(events: list) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and "device_ordinal" in e.get("args", {})]


def edit_hlo(run, old: str, new: str):
    """The run's compiled module (both copies of it) with `old` replaced once; the dump's copy."""
    paths = [run / "step.hlo.txt", *run.glob("hlo/*after_optimizations.txt")]
    for path in paths:
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new, 1))
    return paths[-1]
