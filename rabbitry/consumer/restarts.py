"""When the process pool of ``rabbitry worker run --processes N`` starts a child again.

One pure rule (no clock, no processes): given how a child ended (``ChildExit``) and how many
times in a row its slot failed before consuming, ``after_exit`` answers ``Restart`` (after
a delay) or ``GiveUp`` (with the reason). The supervisor (``consumer.supervisor``) does the
waiting and the starting.

- A child that consumed and then ended (a crash, an ``os._exit``, a SIGKILL) is started
  again at once: its slot's failures start over.
- A child that ended before it consumed failed at start: it is started again after a delay
  that doubles with each failure in a row (``first_delay`` .. ``max_delay``), so a child that
  dies at start does not hot-loop; after ``max_start_failures`` in a row the pool gives up.
- A child that exited with ``EXIT_REFUSED`` (the broker lacks what its handlers need, the
  worker's start-up check) is never started again: the next start would be refused alike.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

__all__ = ["EXIT_REFUSED", "ChildExit", "GiveUp", "Restart", "Restarts", "after_exit", "described"]

EXIT_REFUSED = 3
"""A child's exit code when its worker refused to start (``TopologyMissing``)."""


@dataclass(frozen=True, kw_only=True)
class Restarts:
    """The pool's restart rule: back-off for children failing at start, and when to stop."""

    first_delay: float = 0.5
    """Seconds before the first restart of a child that failed at start."""
    max_delay: float = 30.0
    """The back-off doubles up to this many seconds."""
    max_start_failures: int = 5
    """Failures at start in a row (one slot) after which the pool gives up."""

    def __post_init__(self) -> None:
        if not 0 <= self.first_delay <= self.max_delay:
            raise ValueError("Restarts: want 0 <= first_delay <= max_delay")
        if self.max_start_failures < 1:
            raise ValueError("Restarts: max_start_failures must be at least 1")


@dataclass(frozen=True)
class ChildExit:
    """How one child ended: ``code`` as ``Popen.returncode`` (negative: killed by that
    signal) and whether it had consumed (``ready``) before it ended."""

    code: int
    ready: bool


@dataclass(frozen=True)
class Restart:
    """Start the slot's child again after ``delay`` seconds; ``failures`` in a row so far."""

    delay: float
    failures: int


@dataclass(frozen=True)
class GiveUp:
    """Stop the pool: ``reason`` says why, in a sentence."""

    reason: str


def after_exit(rules: Restarts, ended: ChildExit, failures: int) -> Restart | GiveUp:
    """What to do about a child that ended, its slot having failed ``failures`` times in a
    row before (0 when its last child consumed)."""
    if ended.ready:
        return Restart(0.0, 0)
    if ended.code == EXIT_REFUSED:
        return GiveUp("its worker refused to start: the broker lacks what the handlers need")
    failures += 1
    if failures >= rules.max_start_failures:
        return GiveUp(f"it failed {failures} times in a row before consuming")
    delay = min(rules.max_delay, rules.first_delay * 2 ** (failures - 1))
    return Restart(delay, failures)


def described(code: int) -> str:
    """``Popen.returncode`` in words: ``exit code 1``, ``killed by SIGKILL``."""
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}"
