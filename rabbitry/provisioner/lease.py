"""When a stack's lock may be taken over, and when its holder must stop: the rules, with no
clock and no I/O (the caller passes its own ``time.monotonic()``).

No clock is compared across hosts. The holder writes the lock again every ``ttl / 4`` seconds
with a renewal counter that grows; a waiter watches the lock's value on its own monotonic clock
and may take it over only once it has seen the same value for ``ttl`` seconds (``Watch``). A
host whose wall clock runs minutes fast therefore still sees a live lock change, and a holder's
pause (SIGSTOP, a VM frozen) looks to a waiter like any other silence.

The holder's side (``Lease``) mirrors it: a waiter first sees a renewal no earlier than the
holder started writing it, so it cannot take over before ``ttl`` seconds after that start, on
any clock that runs at the rate of the holder's. The holder counts from the start of its last
write it knows landed and stops writing after ``HOLD_SHARE`` of ``ttl``: the rest is left for
a write already under way to land before anyone may take over. A holder also stops as soon as
it reads someone else's value in the lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_TTL = 1.0
MAX_TTL = 3600.0
HOLD_SHARE = 0.75
"""A holder stops writing after this share of ``ttl`` without a renewal it knows landed."""


def holder_ttl(value: dict[str, Any], default: float) -> float:
    """The ``ttl`` the holder of ``value`` renews within (its own, written in the lock; ``default``
    for a lock written without one), kept within ``MIN_TTL`` and ``MAX_TTL``."""
    try:
        ttl = float(value.get("ttl", default))
    except (TypeError, ValueError):
        ttl = default
    if ttl != ttl:  # NaN
        ttl = default
    return min(MAX_TTL, max(MIN_TTL, ttl))


@dataclass
class Watch:
    """A waiter's view of a lock someone else holds."""

    seen: str | None = None
    """The lock's value as last read (its canonical JSON)."""
    since: float = 0.0
    """When that value was first read, on the waiter's monotonic clock."""
    changes: int = 0
    """How often it was seen to change: a renewal, so its holder was alive then."""

    def observe(self, value: str, now: float) -> None:
        if value == self.seen:
            return
        if self.seen is not None:
            self.changes += 1
        self.seen, self.since = value, now

    def unchanged_for(self, now: float) -> float:
        return now - self.since if self.seen is not None else 0.0

    def may_take_over(self, now: float, ttl: float) -> bool:
        """Whether the holder has renewed nothing for ``ttl`` seconds as seen from here."""
        return self.seen is not None and self.unchanged_for(now) >= ttl


@dataclass
class Lease:
    """A holder's view of its own lock."""

    ttl: float
    renewed: float | None = None
    """When the last write of our value known to have landed was started (monotonic)."""
    lost: str = ""
    """Why the lock is no longer ours, once it is not."""

    def confirm(self, started: float) -> None:
        """A write of our value, started at ``started``, landed."""
        if not self.lost and (self.renewed is None or started > self.renewed):
            self.renewed = started

    def lose(self, why: str) -> None:
        if not self.lost:
            self.lost = why

    def problem(self, now: float) -> str:
        """Why this run may no longer write as the holder ('' while it may)."""
        if self.lost:
            return self.lost
        if self.renewed is None:
            return "the lock was never written"
        silent = now - self.renewed
        if silent >= HOLD_SHARE * self.ttl:
            return (
                f"no renewal of it was confirmed for {silent:.0f} s (this run was paused or"
                f" could not reach the broker), and another run may take a lock over once it"
                f" has gone unrenewed for {self.ttl:g} s"
            )
        return ""
