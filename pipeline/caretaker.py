"""A night's caretaker: ends what a killed night left running.

A night's own process (the driver) starts Ray's local processes and Prefect's temporary server;
its exit handlers end them (pipeline/cluster.py), but a `kill -9` runs no handler, and they went
on running. The caretaker is a small process of its own, started beside Ray: it holds the read
end of a pipe whose write end only the driver has, notes the driver's descendants every second,
and when the pipe closes (the driver gone, however it ended) ends every process it noted, SIGTERM
then SIGKILL after a grace, and exits.

    python -m pipeline.caretaker DRIVER_PID PIPE_FD
"""

from __future__ import annotations

import os
import select
import signal
import sys

from pipeline.cluster import descendants, end_processes, process_start

LOOK_EVERY_S = 1.0
GRACE_S = 3.0


def watch(driver: int, pipe: int) -> dict[int, str]:
    """The driver's descendants (but this process) noted until the pipe closes, each with its
    start (cluster.process_start), so that a pid reused since by another process is not taken
    for it; those that ended are forgotten as they end."""
    noted: dict[int, str] = {}
    while True:
        readable, _, _ = select.select([pipe], [], [], LOOK_EVERY_S)
        if readable and not os.read(pipe, 1):
            return noted
        noted = {pid: start for pid, start in noted.items() if process_start(pid) == start}
        for pid in descendants(driver) - {os.getpid()} - set(noted):
            start = process_start(pid)
            if start is not None:
                noted[pid] = start


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the terminal is the driver's to handle
    driver, pipe = int(argv[0]), int(argv[1])
    end_processes({pid for pid, start in watch(driver, pipe).items() if process_start(pid) == start}, GRACE_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
