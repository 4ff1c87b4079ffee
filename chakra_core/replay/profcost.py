"""What the profiler costs per operator on the machine that recorded a trace: the document
tools/profcost.py writes (`profiler_cost.json`, beside a run's traces; docs/gpu.md, 'The
profiler's cost'), turned into the host-overhead model's per-operator terms.

The probe ran a fixed set of small operators with and without the profiler and says per case
what one call took each way, the time the trace gave its operators (`recorded_ns`) and what
the profiler saw of it (operators, inputs, launches). Two non-negative least-squares fits over
the cases give what an operator of little work of its own is recorded as (per operator, per
input, per launch) and what it takes unprofiled (per operator inside another, per launch); the
median of what a call took profiled beyond its operators' recorded spans is what the profiler
adds to a parent's own time per child: the recorded_* and op_ns / launch_ns terms of
sim/config.HostOverhead.
"""

from __future__ import annotations

import numpy as np

from chakra_core.documents import read_document
from chakra_core.replay.calibrate import CalibrationError

FILE_NAME = "profiler_cost.json"
CASE_FIELDS = ("unprofiled_ns", "profiled_ns", "recorded_ns", "ops_per_call", "inputs_per_call", "launches_per_call")
MIN_CASES = 4


def read_probe(url: str) -> dict:
    """The probe document at url, checked: one clear error naming the file and the field."""
    path, document = read_document(url)
    return checked_probe(document, path)


def checked_probe(document, where: str) -> dict:
    cases = document.get("cases") if isinstance(document, dict) else None
    if not isinstance(cases, list) or len(cases) < MIN_CASES:
        raise CalibrationError(f"{where}: cases: expected a list of at least {MIN_CASES} probe cases "
                               "(tools/profcost.py writes them)")
    for i, case in enumerate(cases):
        for name in CASE_FIELDS:
            value = case.get(name) if isinstance(case, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e12:
                raise CalibrationError(f"{where}: cases[{i}].{name}: expected a number from 0 to 1e12, got {value!r}")
    return document


def probe_terms(document: dict) -> dict[str, float]:
    """The HostOverhead terms the probe gives (ns): recorded_op_ns, recorded_input_ns and
    recorded_launch_ns (what the trace gives such an operator), op_ns and launch_ns (what it
    takes unprofiled)."""
    from scipy.optimize import nnls

    cases = document["cases"]
    ops = np.array([c["ops_per_call"] for c in cases], float)
    inputs = np.array([c["inputs_per_call"] for c in cases], float)
    launches = np.array([c["launches_per_call"] for c in cases], float)
    recorded = np.array([c["recorded_ns"] for c in cases], float)
    unprofiled = np.array([c["unprofiled_ns"] for c in cases], float)
    # relative errors: the cheap cases (a view) weigh as much as the dear ones (a module)
    (rec_op, rec_input, rec_launch), _ = nnls(np.c_[ops, inputs, launches] / recorded[:, None], np.ones(len(cases)))
    # each call is one operator called from Python, holding ops - 1 called by it: what the call
    # costs beyond its operators (Python) sits in a trace in its parent's own time, kept at `scale`
    # there, so op_ns is what an operator costs inside another (the dispatcher's, ~0.7 us on an H200)
    (_, op, launch), _ = nnls(np.c_[np.ones(len(cases)), ops - 1, launches] / unprofiled[:, None], np.ones(len(cases)))
    # the profiler's work for a call outside its operators' spans (the observer writing it out):
    # in a trace, time of the parent's
    child = float(np.median(np.maximum(0.0, np.array([c["profiled_ns"] for c in cases], float) - recorded)))
    return {"recorded_op_ns": float(rec_op), "recorded_input_ns": float(rec_input),
            "recorded_launch_ns": float(rec_launch), "recorded_child_ns": child, "op_ns": float(op),
            "launch_ns": float(launch)}
