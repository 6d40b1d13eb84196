"""The lock's settle time is sized to how fast the broker answers (Fischer's bound)."""

from __future__ import annotations

from typing import Any

from rabbitry.provisioner import lock
from rabbitry.provisioner.lock import StackLock


class Clock:
    """Time that passes only when the fake broker answers or the lock waits: the settle time
    is sized to the answer times, and a loaded machine must not stretch them."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


class Register:
    """A global parameter store that answers after ``delay`` seconds."""

    def __init__(self, delay: float, clock: Clock) -> None:
        self.delay = delay
        self.clock = clock
        self.values: dict[str, Any] = {}

    def clone(self) -> Register:
        return self

    def global_parameter(self, name: str) -> Any:
        self.clock.now += self.delay
        return self.values.get(name)

    def put_global_parameter(self, name: str, value: Any) -> None:
        self.clock.now += self.delay
        self.values[name] = value


def acquired_after(delay: float) -> tuple[float, list[float]]:
    clock = Clock()
    held = StackLock(
        Register(delay, clock),  # type: ignore[arg-type]
        "shop",
        monotonic=clock,
        sleep=clock.sleep,
    )
    held.claim()
    held.acquire()
    return held._settle_for, clock.waits


def test_a_quick_broker_gets_the_short_wait() -> None:
    settle, waits = acquired_after(0.0)
    assert settle == lock.DEFAULT_SETTLE
    assert 0.1 < max(waits) <= lock.DEFAULT_SETTLE


def test_a_slow_broker_gets_a_wait_past_its_own_answer_times() -> None:
    settle, waits = acquired_after(0.02)  # read and write: 40 ms at least
    assert settle >= lock.SETTLE_FACTOR * 0.04 > lock.DEFAULT_SETTLE
    assert max(waits) > 0.5


def test_the_wait_has_a_ceiling() -> None:
    settle, _ = acquired_after(0.1)
    assert settle == lock.MAX_SETTLE
