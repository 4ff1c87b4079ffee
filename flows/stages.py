"""What the two flows (nightly, sweep) share: a stage of work as a Prefect task of its own, and
how a path on the command line or in a flow's parameters is read."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

# No telemetry from a data pipeline, which may run air-gapped: neither the Prefect server's
# analytics nor the client's (DO_NOT_TRACK also keeps its first-run notice off the terminal),
# nor Ray's usage statistics.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Prefect's temporary server gets 20 s to start by default: a second night started beside a first
# one (both loading Ray, the first converting) took longer and died "Timed out while attempting to
# connect to ephemeral Prefect API server" (issue 47)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

from prefect import get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.states import Failed  # noqa: E402

from pipeline import preflight  # noqa: E402
from pipeline.layout import StorageError, storage_fault  # noqa: E402

PROJECT = Path(__file__).resolve().parents[1]
# The flows' defaults are literals, folders of the checkout: `prefect deploy` evaluates the
# signature from the source without __file__, and a computed default would show as None.
CHECKOUT_SOURCE = "out/object-store/drops"
CHECKOUT_WAREHOUSE = "out/warehouse"
# what a stage fails with in one line, no traceback: storage retried already, or no drop that day
STORAGE_FAILURES = (StorageError, FileNotFoundError)
T = TypeVar("T")


def in_checkout(url: str) -> str:
    """A relative local path as a folder of the checkout; URLs and absolute paths as they are."""
    if preflight.is_local(url) and "://" not in url and not Path(url).is_absolute():
        return (PROJECT / url).as_uri()
    return url


DEFAULT_SOURCE = in_checkout(CHECKOUT_SOURCE)
DEFAULT_WAREHOUSE = in_checkout(CHECKOUT_WAREHOUSE)


def from_cwd(url: str) -> str:
    """On the command line a relative path means the current directory, as everywhere else."""
    return str(Path(url).resolve()) if preflight.is_local(url) and "://" not in url else url


def _no_empty_traceback(record: logging.LogRecord) -> bool:
    """Prefect logs a task's returned Failed state with exc_info=True and no exception, which
    prints a stray `NoneType: None`; keep the record, without it."""
    if record.exc_info and record.exc_info[0] is None:
        record.exc_info = None
    return True


logging.getLogger("prefect.task_runs").addFilter(_no_empty_traceback)


def quiet_console(verbose: bool) -> None:
    """On the command line, Prefect's and Ray's INFO lines only with -v: the console handlers
    show warnings and errors, while a Prefect server still receives every log line."""
    if verbose:
        return
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in logging.root.manager.loggerDict)]
    for handler in {h for lg in loggers if isinstance(lg, logging.Logger) for h in lg.handlers}:
        if isinstance(handler, PrefectConsoleHandler):
            handler.setLevel(logging.WARNING)
    logging.getLogger("ray").setLevel(logging.ERROR)


def transient_only(task, task_run, state) -> bool:
    """A Prefect task's retry_condition_fn: a storage step is retried only when its fault may pass
    (a timeout, a dropped connection), never when storage is full, read-only or forbids it."""
    return storage_fault(state.data) == "transient" if isinstance(state.data, BaseException) else True


class StageFailed(Exception):
    """A stage failed; the message is its name and the one line of its failure."""


def run_stage(name: str, step: Callable[[], T], counts: Callable[[T], str],
              expected: tuple[type[BaseException], ...] = STORAGE_FAILURES, log_failure: bool = False,
              announce: Callable[[str], None] | None = None) -> T:
    """A stage (pipeline/nightly/run.py's day, pipeline/sweep/run.py's sweep) as a Prefect task of its
    own that logs its counts, so that the UI shows where a run stopped; `announce` gets the same
    line, `<stage>: <counts> (<seconds> s)`, as the stage ends (the command line prints it). An
    `expected` failure fails the task with one line (log_failure: logged here too); anything else
    is a fault of the code and keeps its traceback."""
    def run():
        started = time.monotonic()
        try:
            value = step()
        except expected as e:
            if log_failure:
                get_run_logger().error(str(e))
            return Failed(message=str(e))
        line = counts(value)
        get_run_logger().info(line)
        if announce:
            announce(f"{name}: {line} ({time.monotonic() - started:.1f} s)")
        return value

    # inputs: closures; outputs: tables, kept in memory for the flow only
    state = task(name=name, cache_policy=NO_CACHE)(run)(return_state=True)
    if state.is_failed():  # the task logged why (a traceback only for a fault of the code)
        raise StageFailed(f"{name}: {state.message}")
    return state.result()
