"""The lock's settle time is sized to how fast the broker answers (Fischer's bound)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rabbitry.provisioner import lock
from rabbitry.provisioner.lock import StackLock

answer_after = time.sleep  # the fake broker's own delay, not the lock's wait


class Register:
    """A global parameter store that answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.values: dict[str, Any] = {}

    def clone(self) -> Register:
        return self

    def global_parameter(self, name: str) -> Any:
        answer_after(self.delay)
        return self.values.get(name)

    def put_global_parameter(self, name: str, value: Any) -> None:
        answer_after(self.delay)
        self.values[name] = value


def acquired_after(delay: float, monkeypatch: pytest.MonkeyPatch) -> tuple[float, list[float]]:
    waits: list[float] = []
    monkeypatch.setattr(lock.time, "sleep", waits.append)
    held = StackLock(Register(delay), "shop")  # type: ignore[arg-type]
    held.claim()
    held.acquire()
    return held._settle_for, waits


def test_a_quick_broker_gets_the_short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    settle, waits = acquired_after(0.0, monkeypatch)
    assert settle == lock.DEFAULT_SETTLE
    assert 0.1 < max(waits) <= lock.DEFAULT_SETTLE


def test_a_slow_broker_gets_a_wait_past_its_own_answer_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settle, waits = acquired_after(0.02, monkeypatch)  # read and write: 40 ms at least
    assert settle >= lock.SETTLE_FACTOR * 0.04 > lock.DEFAULT_SETTLE
    assert max(waits) > 0.5


def test_the_wait_has_a_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    settle, _ = acquired_after(0.1, monkeypatch)
    assert settle == lock.MAX_SETTLE
