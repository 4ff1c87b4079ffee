"""The fuzz suite (tests/fuzz/) in CI: a few hundred random and mutated inputs against the
.et decoder, the PyTorch ET and Kineto readers, the FlexFlow, ASTRA-sim text and JAX (XPlane,
trace JSON, HLO) converters, the configuration loaders, the day's lock and the history, in a process capped at 2 GiB of data and 10
CPU-minutes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).resolve().parent / "fuzz" / "run.py"


def test_every_fuzz_target_ends_in_success_or_a_chakra_error():
    run = subprocess.run([sys.executable, str(RUNNER)], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "CHAKRA_FUZZ_EXAMPLES": os.environ.get("CHAKRA_FUZZ_EXAMPLES", "60")})
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert run.stdout.count("\nok ") + run.stdout.startswith("ok ") == 23, run.stdout
