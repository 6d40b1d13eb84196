"""The process pool's restart rule: at once after a child that consumed, a doubling back-off
for children failing at start, never after a refusal, and a give-up after too many in a row."""

from __future__ import annotations

import signal

import pytest

from rabbitry.consumer.restarts import (
    EXIT_REFUSED,
    ChildExit,
    GiveUp,
    Restart,
    Restarts,
    after_exit,
    described,
)

RULES = Restarts(first_delay=0.5, max_delay=3.0, max_start_failures=5)


def test_a_child_that_consumed_is_started_again_at_once_and_its_failures_start_over() -> None:
    killed = ChildExit(-signal.SIGKILL, ready=True)
    assert after_exit(RULES, killed, failures=3) == Restart(0.0, 0)


def test_a_child_failing_at_start_waits_longer_each_time_up_to_the_cap() -> None:
    failures, delays = 0, []
    for _ in range(4):
        verdict = after_exit(RULES, ChildExit(1, ready=False), failures)
        assert isinstance(verdict, Restart)
        failures = verdict.failures
        delays.append(verdict.delay)
    assert delays == [0.5, 1.0, 2.0, 3.0]


def test_the_pool_gives_up_after_the_last_failure_at_start_allowed() -> None:
    verdict = after_exit(RULES, ChildExit(1, ready=False), failures=4)
    assert verdict == GiveUp("it failed 5 times in a row before consuming")


def test_a_refused_start_is_never_tried_again() -> None:
    verdict = after_exit(RULES, ChildExit(EXIT_REFUSED, ready=False), failures=0)
    assert isinstance(verdict, GiveUp)
    assert "refused to start" in verdict.reason


def test_the_refusal_code_from_a_child_that_had_consumed_is_a_crash_like_any_other() -> None:
    assert after_exit(RULES, ChildExit(EXIT_REFUSED, ready=True), failures=0) == Restart(0.0, 0)


@pytest.mark.parametrize(
    ("code", "words"),
    [(0, "exit code 0"), (3, "exit code 3"), (-9, "killed by SIGKILL"), (-15, "killed by SIGTERM")],
)
def test_an_end_is_said_as_exit_code_or_signal(code: int, words: str) -> None:
    assert described(code) == words


def test_rules_that_cannot_hold_are_refused_when_made() -> None:
    with pytest.raises(ValueError, match="first_delay"):
        Restarts(first_delay=5.0, max_delay=1.0)
    with pytest.raises(ValueError, match="max_start_failures"):
        Restarts(max_start_failures=0)
