"""The kill switch of one queue's handler: when it fails too often, stop taking its messages.

A dead dependency (a database down, an API answering 503) makes every message fail; a worker
that goes on consuming walks each of them through its retry ladder into the parking lot. The
kill switch stops consuming that queue instead (the worker's other queues go on) and tries
again after a cool-down, as MassTransit's ``UseKillSwitch`` does. This module is the rule
alone: ``KillSwitch`` the settings, ``QueueKillSwitch`` the state machine of one queue.
Pure: no clock, no I/O, no logging; the caller passes ``now`` (monotonic seconds) and acts on
the ``Turn`` returned (the worker core cancels or resumes the queue's consumer and logs it).

    CLOSED --(failures/handled >= failure_ratio over window_s, handled >= min_messages)--> OPEN
    OPEN --(cool_down_s passed: resume)--> HALF_OPEN
    HALF_OPEN --(one failure)--> OPEN          HALF_OPEN --(probes successes)--> CLOSED

The window is counted in tenths: a tenth of ``window_s`` leaves it whole, so the counts cover
between 0.9 and 1.0 of the window. A trip or a close starts a fresh window.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass

WINDOW_SLICES = 10
"""How many slices of ``window_s`` the counts are kept in (the window moves a slice at a time)."""


class SwitchState(enum.StrEnum):
    """Where a queue's kill switch stands."""

    CLOSED = "closed"
    """Consuming; outcomes are counted over the window."""
    OPEN = "open"
    """Tripped: not consuming until the cool-down has passed."""
    HALF_OPEN = "half_open"
    """Consuming again after the cool-down: one failure trips it at once, ``probes``
    successes close it."""


@dataclass(frozen=True)
class KillSwitch:
    """When a handler's queue stops being consumed, and for how long.

    Trips when at least ``min_messages`` outcomes were counted in the last ``window_s``
    seconds and the share of failures among them reaches ``failure_ratio``; consumes again
    after ``cool_down_s``; closes after ``probes`` successes in a row (a failure before
    that trips it again at once)."""

    failure_ratio: float = 0.5
    window_s: float = 10.0
    min_messages: int = 20
    cool_down_s: float = 30.0
    probes: int = 5

    def __post_init__(self) -> None:
        if not (0 < self.failure_ratio <= 1):
            raise ValueError(
                f"failure_ratio must be above 0 and at most 1, got {self.failure_ratio}"
            )
        for name in ("window_s", "cool_down_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        for name in ("min_messages", "probes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")


@dataclass(frozen=True)
class Turn:
    """A change of state, with the counts that caused it (what the log line says)."""

    state: SwitchState
    """The state entered."""
    failures: int
    handled: int
    """Outcomes counted: in the window for a trip from CLOSED, since resuming otherwise."""
    window_s: float
    reopens_at: float | None = None
    """When the cool-down of a trip ends (monotonic seconds)."""
    resumed: bool = False
    """A trip of a half-open switch (counted since resuming, not over the window)."""

    @property
    def ratio(self) -> float:
        return self.failures / self.handled if self.handled else 0.0


class QueueKillSwitch:
    """The kill switch of one queue: ``record`` each handler outcome, ``due`` says when the
    cool-down has passed, ``resume`` half-opens it."""

    __slots__ = (
        "_failures",
        "_handled",
        "_slices",
        "probed",
        "reopens_at",
        "settings",
        "state",
        "trips",
    )

    def __init__(self, settings: KillSwitch) -> None:
        self.settings = settings
        self.state = SwitchState.CLOSED
        self.trips = 0
        self.reopens_at: float | None = None
        """When an open switch may resume (monotonic seconds); None unless OPEN."""
        self.probed = 0
        """Successes since resuming (HALF_OPEN)."""
        self._slices: deque[list[int]] = deque()  # [slice number, handled, failures]
        self._handled = 0
        self._failures = 0

    def record(self, failed: bool, now: float) -> Turn | None:
        """Count one handler outcome; the turn it causes, if any. Outcomes of handlers that
        finish while the switch is open (they started before it tripped) change nothing."""
        state = self.state
        if state is SwitchState.OPEN:
            return None
        if state is SwitchState.HALF_OPEN:
            if failed:
                return self._trip(self.probed + 1, 1, now, resumed=True)
            self.probed += 1
            if self.probed < self.settings.probes:
                return None
            self.state = SwitchState.CLOSED
            self._clear()
            return Turn(SwitchState.CLOSED, 0, self.probed, self.settings.window_s)
        self._count(failed, now)
        settings = self.settings
        handled, failures = self._handled, self._failures
        if handled >= settings.min_messages and failures >= settings.failure_ratio * handled:
            return self._trip(handled, failures, now)
        return None

    def due(self, now: float) -> bool:
        """The switch is open and its cool-down has passed."""
        return self.reopens_at is not None and now >= self.reopens_at

    def resume(self) -> Turn:
        """Half-open an open switch (the caller consumes the queue again)."""
        if self.state is not SwitchState.OPEN:
            raise ValueError(f"only an open kill switch resumes, this one is {self.state}")
        self.state = SwitchState.HALF_OPEN
        self.reopens_at = None
        self.probed = 0
        return Turn(SwitchState.HALF_OPEN, 0, 0, self.settings.window_s)

    @property
    def counts(self) -> tuple[int, int]:
        """Outcomes and failures in the window as last counted."""
        return self._handled, self._failures

    # -- internals --------------------------------------------------------------------------------

    def _trip(self, handled: int, failures: int, now: float, *, resumed: bool = False) -> Turn:
        self.state = SwitchState.OPEN
        self.trips += 1
        self.reopens_at = now + self.settings.cool_down_s
        self._clear()
        return Turn(
            SwitchState.OPEN, failures, handled, self.settings.window_s, self.reopens_at, resumed
        )

    def _count(self, failed: bool, now: float) -> None:
        number = math.floor(now * WINDOW_SLICES / self.settings.window_s)
        slices = self._slices
        oldest = number - WINDOW_SLICES + 1
        while slices and slices[0][0] < oldest:
            _, handled, failures = slices.popleft()
            self._handled -= handled
            self._failures -= failures
        if slices and slices[-1][0] == number:
            last = slices[-1]
        else:
            last = [number, 0, 0]
            slices.append(last)
        last[1] += 1
        self._handled += 1
        if failed:
            last[2] += 1
            self._failures += 1

    def _clear(self) -> None:
        self._slices.clear()
        self._handled = self._failures = 0
