"""A job's timeline as the simulator predicts it, for the device analysis's predicted variant.

The job runs on a Ring of its own NPU count (the reference network, sim/reference.py) with a
system file: `PREDICTION_SYSTEM` by default, the one place that says which model predicts
"the step without the profiler": the shipped host-overhead model (docs/gpu.md, 'The
profiler's cost'), which takes the profiler's cost out of host time and keeps kernels as
measured. None means the reference system (the settings of ASTRA-sim's `Ring_4chunks.json`),
which replays the host operators' recorded times, profiler cost included; any system file (a
sweep point, a fitted host-overhead model) can be given instead.
"""

from __future__ import annotations

from chakra_core.format.job import Job
from chakra_core.sim.config import DEFAULT_HOST_OVERHEAD_SYSTEM, SystemConfig, load_system
from chakra_core.sim.engine import simulate
from chakra_core.sim.reference import reference_network, reference_system
from chakra_core.sim.results import SimResult

PREDICTION_SYSTEM: str | None = DEFAULT_HOST_OVERHEAD_SYSTEM
REFERENCE_LABEL = "reference"
DEFAULT_LABEL = "shipped host-overhead model"


def prediction_system(url: str | None = PREDICTION_SYSTEM) -> tuple[SystemConfig, str]:
    """(the system, its label: the file's URL, `shipped host-overhead model` or `reference`); a bad
    file raises ConfigError."""
    if not url:
        return reference_system(), REFERENCE_LABEL
    return load_system(url), DEFAULT_LABEL if url == DEFAULT_HOST_OVERHEAD_SYSTEM else url


def predict(job: Job, system: SystemConfig) -> SimResult:
    """The job simulated on a Ring of its NPUs with `system`, timeline recorded."""
    return simulate(job, reference_network(job.npus), system, record_timeline=True)
