"""The Ray plumbing that the nightly day (pipeline/nightly/run.py), the sweeps (pipeline/sweep/run.py)
and the synthesizer's fit share: the cluster, how often a task whose worker died is retried,
and the named stages a flow shows as Prefect tasks.

`start_ray()` connects to the cluster named by RAY_ADDRESS, or starts a local one with
`num_cpus` CPUs (never attaching to a cluster that happens to run on the machine). Tasks are
retried by Ray when their worker process dies (WORKER_RETRIES); bad input is not an exception
of a task but reject rows, so it is never retried.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

WORKER_RETRIES = 3
_AT_EXIT: list = []  # what this process registered with atexit
_CARETAKER_PIPE: list[int] = []  # the write end of the caretaker's pipe
_STOP_SIGNAL: list[str] = []  # the stop signal received, once one is

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
        if _stop_local_ray not in _AT_EXIT:  # once a process; runs before Ray's own exit handler (registered later,
            _AT_EXIT.append(_stop_local_ray)  # run first)
            atexit.register(_stop_local_ray)
            _start_caretaker()
        if threading.current_thread() is threading.main_thread():  # ray.init replaced SIGTERM's handler with its own
            end_on_signals()


def _start_caretaker() -> None:
    """pipeline/caretaker.py, which ends what this process started if it dies without its exit
    handlers (kill -9). The pipe's write end stays open here, unused, until this process ends."""
    read, write = os.pipe()
    subprocess.Popen([sys.executable, "-m", "pipeline.caretaker", str(os.getpid()), str(read)], pass_fds=(read,),
                     stdin=subprocess.DEVNULL, start_new_session=True)
    os.close(read)
    _CARETAKER_PIPE.append(write)  # (kept referenced; never written)


def end_on_signals() -> None:
    """SIGTERM and SIGHUP (a scheduler's or `kill`'s stop) end the run as Ctrl-C does: it unwinds
    (its lock released, its end recorded by Prefect), then the exit handlers end Ray's processes
    and Prefect's temporary server. Ending them here instead would leave the unwinding talking
    to dead servers: Prefect's client retries for minutes, Ray's exception hook waits on its GCS."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)


def stopped_by(error: BaseException) -> str | None:
    """What stopped a run that ended in `error`: the stop signal's name whatever Prefect made of
    its interrupt (a bare KeyboardInterrupt, a crashed task's error, a failed stage), or "Ctrl-C"."""
    if _STOP_SIGNAL:
        return _STOP_SIGNAL[0]
    return "Ctrl-C" if isinstance(error, KeyboardInterrupt) else None


def _interrupt(signum, frame) -> None:
    _STOP_SIGNAL[:] = [signal.Signals(signum).name]
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def _stop_local_ray(grace_s: float = 3.0) -> None:
    """Ends every process this one started, Ray's and Prefect's temporary server included:
    ray.shutdown asks Ray's to stop, and one still alive `grace_s` later after a SIGTERM (Ray's
    dashboard agent on a loaded machine, a server's graceful shutdown) is killed, so that a
    stopped run leaves nothing of its own running."""
    import ray

    if threading.current_thread() is threading.main_thread():  # already ending: a stop signal now would cut it short
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
    started = descendants(os.getpid())
    try:
        ray.shutdown()
    finally:
        end_processes(started, grace_s)


def end_processes(pids: set[int], grace_s: float) -> None:
    """SIGTERM each process, then SIGKILL those still running `grace_s` later."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if running(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """Every process below pid, from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                if entry.isdigit():
                    parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(parent, []).append(int(entry))
    found, pending = set(), [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.add(child)
            pending.append(child)
    return found


def process_start(pid: int) -> str | None:
    """The process's start on this host (boot id and start time in clock ticks), which a reused
    pid does not share; None where /proc does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot, open(f"/proc/{pid}/stat") as proc:
            return f"{boot.read().strip()}:{proc.read().rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def direct(name: str, step: Callable[[], Any], counts: Callable[[Any], str]) -> Any:
    """The default stage runner: the step itself (the flow runs each as a Prefect task instead)."""
    return step()
