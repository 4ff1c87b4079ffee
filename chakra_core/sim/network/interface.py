"""The network layer's one interface, ASTRA-sim's sim_send, that both back-ends implement:
congestion-unaware (unaware.py) and congestion-aware (network/aware.py); docs/simulator.md, 'Layers'.

A back-end calls deliver(arrival, *args) once the arrival tick is certain: the unaware one at
the send itself, as nothing can delay a message (reports_at_send = True); the aware one when
the message arrives. Who must act at the arrival tick itself (a collective's packet machines,
system/packets.py) schedules it then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class Network(Protocol):
    reports_at_send: bool  # True: deliver() is called from send() itself
    free: dict  # link -> the tick it is free from (an unaware network has no links)

    @property
    def notes(self) -> Sequence[str]:
        """Modelling choices beyond ASTRA-sim the back-end used."""

    def send(self, now: int, src: int, dst: int, size: int, deliver: Callable[..., None], args: tuple) -> None:
        """Sends `size` bytes from NPU src to NPU dst at tick `now`; deliver(arrival, *args) follows."""
