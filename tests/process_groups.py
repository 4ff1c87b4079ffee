"""Stopping what a test or benchmark started in process groups of its own (`ray start --block`
nodes, a nightly's subprocess): only those, by their group, never anyone else's processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def stop_process_groups(procs: list[subprocess.Popen]) -> None:
    """The process groups of procs (each started in a session of its own): all terminated
    together (a Ray node waits for the others otherwise), killed after 5 s."""
    def signal_all(sig):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_all(signal.SIGKILL)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
