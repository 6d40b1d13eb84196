"""Per-handler limits, pure: which held-back deliveries may start, and when to look again."""

from __future__ import annotations

import pytest

from rabbitry.consumer import App, AppError
from rabbitry.consumer.limits import Gate, Limits, TokenBucket


def test_at_most_n_run_at_once_and_each_end_lets_the_next_start_in_order() -> None:
    gate: Gate[str] = Gate(Limits(concurrency=2), now=0.0)
    for item in "abcd":
        gate.add(item)
    assert gate.release(0.0) == ["a", "b"]
    assert gate.release(0.0) == [], "both slots are taken"
    gate.done()
    assert gate.release(0.0) == ["c"]
    gate.done()
    gate.done()
    assert gate.release(0.0) == ["d"] and gate.running == 1
    assert gate.wake_at is None, "only the rate sets a wake-up"


def test_a_rate_spaces_starts_and_says_when_the_next_may_start() -> None:
    gate: Gate[int] = Gate(Limits(rate=4), now=10.0)
    for item in range(3):
        gate.add(item)
    assert gate.release(10.0) == [0], "the bucket starts with one token (burst 1)"
    assert gate.wake_at == pytest.approx(10.25)
    assert gate.release(10.1) == [] and gate.wake_at == pytest.approx(10.25)
    assert gate.release(10.25) == [1]
    assert gate.release(11.0) == [2], "a late look starts the next at once"
    assert gate.wake_at is None


def test_a_burst_lets_that_many_start_back_to_back_then_the_rate_holds() -> None:
    bucket = TokenBucket(rate=10, burst=3, now=0.0)
    started = 0
    while bucket.wait(0.0) == 0:
        bucket.take()
        started += 1
    assert started == 3
    assert bucket.wait(0.0) == pytest.approx(0.1)
    assert bucket.wait(100.0) == 0 and bucket.tokens == 3, "never more than the burst saved up"


def test_both_limits_together_and_waiting_deliveries_can_be_taken_back() -> None:
    gate: Gate[str] = Gate(Limits(concurrency=1, rate=1000), now=0.0)
    for item in "xyz":
        gate.add(item)
    assert gate.release(0.0) == ["x"]
    gate.done()
    assert gate.release(0.0005) == [] and gate.wake_at == pytest.approx(0.001)
    assert gate.take_waiting() == ["y", "z"] and gate.wake_at is None
    assert gate.running == 0


def test_limits_are_checked_when_the_handler_is_registered() -> None:
    app = App()
    for options, problem in (
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"rate": 0}, "rate must be a positive number"),
        ({"rate": float("inf")}, "rate must be a positive number"),
        ({"rate": 5, "burst": 0}, "burst must be at least 1"),
    ):
        with pytest.raises(AppError, match=problem):
            app.add("q", lambda m: None, **options)  # type: ignore[arg-type]
    route = app.add("q", lambda m: None, concurrency=3, rate=2.5, burst=2)
    assert route.limits == Limits(concurrency=3, rate=2.5, burst=2)
    assert App().add("q", lambda m: None).limits is None
