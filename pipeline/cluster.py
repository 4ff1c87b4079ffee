"""The Ray plumbing that the nightly day (pipeline/run.py), the sweeps (pipeline/sweep_run.py)
and the synthesizer's fit share: the cluster, how often a task whose worker died is retried,
and the named stages a flow shows as Prefect tasks.

`start_ray()` connects to the cluster named by RAY_ADDRESS, or starts a local one with
`num_cpus` CPUs (never attaching to a cluster that happens to run on the machine). Tasks are
retried by Ray when their worker process dies (WORKER_RETRIES); bad input is not an exception
of a task but reject rows, so it is never retried.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

WORKER_RETRIES = 3

# runs a named step and says what it did with counts(result); the flows run each as a Prefect task
Stage = Callable[[str, Callable[[], Any], Callable[[Any], str]], Any]


def start_ray(num_cpus: int | None = None) -> None:
    """Ray's own messages at the level the `ray` logger is set to, INFO at least (ray.init would
    reset it), so a quiet command line sets that logger's level first."""
    level = max(logging.INFO, logging.getLogger("ray").level)  # before `import ray` sets it
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False, logging_level=level)
    else:  # "local": without it, ray.init joins a `ray start` cluster found on this machine
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=level)


def direct(name: str, step: Callable[[], Any], counts: Callable[[Any], str]) -> Any:
    """The default stage runner: the step itself (the flow runs each as a Prefect task instead)."""
    return step()
