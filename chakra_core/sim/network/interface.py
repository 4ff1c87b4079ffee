"""The network layer's one interface, ASTRA-sim's sim_send, that both back-ends implement:
congestion-unaware (unaware.py) and congestion-aware (network/aware.py); docs/simulator.md, 'Layers'.

A back-end whose messages share links (network/aware.py) is also a `Links`: the system layer's
aware runner and holding tables ask it for routes, hop times and link names through that
interface, and the job's network with the runner's shortcuts on is a `WatchedLinks`. Which
classes a mode uses is sim/backends.py's table.

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
    entered: dict  # link -> the tick a message first entered it, where the back-end records it (else empty)

    @property
    def notes(self) -> Sequence[str]:
        """Modelling choices beyond ASTRA-sim the back-end used."""

    def send(self, now: int, src: int, dst: int, size: int, deliver: Callable[..., None], args: tuple) -> None:
        """Sends `size` bytes from NPU src to NPU dst at tick `now`; deliver(arrival, *args) follows."""


class Links(Network, Protocol):
    """A network of directed links that messages queue for (names of links: hashable tuples)."""

    def route(self, src: int, dst: int) -> tuple[tuple[tuple, int], ...]:
        """((link, network dimension), ...) a message from src to dst crosses, in order."""

    def hop_times(self, dim_index: int, size: int) -> tuple[int, int]:
        """(ns a message of `size` bytes occupies a link of the dimension, ns until it reaches the next device)."""

    def moved_link(self, link: tuple, by: tuple[int, ...]) -> tuple:
        """The link every NPU moved by `by` coordinates along the torus of dimensions would use instead."""

    def moved_within(self, link: tuple, dim: int, move: Callable[[int], int]) -> tuple:
        """The link of dimension `dim` with each NPU end's coordinate c there moved to move(c)."""


class WatchedLinks(Links, Protocol):
    """The job's links while the aware runner times collectives from holding tables
    (system/live.py says what it checks): what entered which link from where, and when."""

    incoming: dict  # link -> the latest tick a message was scheduled to enter it
    watched: dict  # link -> its LinkWatch
    conflicts: set  # the tabled collectives something else may have delayed
    coincidences: int  # messages that entered a watched link from two places in one tick
    overtaking: bool  # whether a message may reach a link before one that left the previous link ahead of it

    def watch(self, link: tuple) -> None:
        """Watches every message that enters `link` from now on."""

    def may_overtake(self, sizes: dict[int, set[int]]) -> bool:
        """Whether, among messages of these sizes (by dimension), one may overtake another between links."""

    def same_order(self, place, other) -> bool:
        """Whether messages entering a link from `other` keep their order behind those from `place`."""
