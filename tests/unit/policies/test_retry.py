"""Retry policies: schedules, verdicts, and the headers a retried message carries."""

from __future__ import annotations

import math
import random

import pytest

from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    PARKED_REASON_HEADER,
    QUEUE_HEADER,
    Backoff,
    ImmediateRetry,
    Outcome,
    RetryConfigError,
    RetryPolicy,
    cause_chain,
    distinct_tiers,
    failed_attempts,
    failure_headers,
)


def test_exponential_schedule_is_capped() -> None:
    backoff = Backoff(initial_ms=1000, multiplier=3, max_ms=20_000)
    assert backoff.schedule_ms(5) == [1000, 3000, 9000, 20_000, 20_000]
    assert distinct_tiers(backoff.schedule_ms(5)) == [1000, 3000, 9000, 20_000]


def test_fixed_tiers_repeat_the_last() -> None:
    assert Backoff(tiers_ms=(100, 500)).schedule_ms(4) == [100, 500, 500, 500]


def test_jitter_stays_within_its_fraction() -> None:
    backoff = Backoff(initial_ms=10_000, jitter=0.2)
    rng = random.Random(7)
    delays = {backoff.delay_ms(1, rng) for _ in range(200)}
    assert min(delays) >= 8000 and max(delays) <= 12_000 and len(delays) > 50


def test_walks_the_ladder_then_parks_after_exactly_n_attempts() -> None:
    policy = RetryPolicy(attempts=4, backoff=Backoff(tiers_ms=(1000, 2000, 4000)))
    verdicts = [policy.decide(n, RuntimeError("boom")) for n in range(4)]
    assert [v.outcome for v in verdicts] == [Outcome.RETRY] * 3 + [Outcome.PARK]
    assert [v.delay_ms for v in verdicts[:3]] == [1000, 2000, 4000]
    assert verdicts[-1].attempt == 4 and "4 attempts" in verdicts[-1].reason


class Invalid(ValueError):
    pass


def test_never_retry_matches_by_class_name_or_base_or_dotted_path() -> None:
    assert policy_parks(RetryPolicy(never_retry=("ValueError",)), Invalid("x"))
    assert policy_parks(RetryPolicy(never_retry=(f"{__name__}.Invalid",)), Invalid("x"))
    assert not policy_parks(RetryPolicy(never_retry=("KeyError",)), Invalid("x"))


def policy_parks(policy: RetryPolicy, error: Exception) -> bool:
    return policy.decide(0, error).outcome is Outcome.PARK


def test_failure_headers_strip_broker_death_and_bound_error_text() -> None:
    policy = RetryPolicy(attempts=2)
    incoming = {
        "x-delivery-count": 2,
        "x-death": [{"count": 1}],
        "x-first-death-queue": "q",
        "app": "kept",
        ATTEMPT_HEADER: 1,
    }
    verdict = policy.decide(failed_attempts(incoming), RuntimeError("x" * 5000))
    headers = failure_headers(incoming, verdict, RuntimeError("x" * 5000), "work", now_ms=1)
    assert "x-death" not in headers and "x-first-death-queue" not in headers
    assert "x-delivery-count" not in headers
    assert headers["app"] == "kept" and headers[ATTEMPT_HEADER] == 2
    assert headers[QUEUE_HEADER] == "work" and headers[PARKED_REASON_HEADER]
    assert len(headers[LAST_ERROR_HEADER]) == 1024


def test_bad_policies_are_refused() -> None:
    with pytest.raises(RetryConfigError):
        RetryPolicy(attempts=0)
    with pytest.raises(RetryConfigError):
        Backoff(jitter=1.5)
    assert failed_attempts({ATTEMPT_HEADER: "garbage"}) == 0


def test_longest_ms_bounds_every_jittered_delay() -> None:
    backoff = Backoff(initial_ms=1001, multiplier=3, max_ms=60_000, jitter=0.5)
    assert backoff.longest_ms(3) == math.ceil(9009 * 1.5)
    rng = random.Random(7)
    assert max(backoff.delay_ms(n, rng) for n in (1, 2, 3) for _ in range(2000)) <= 13_514
    assert Backoff(tiers_ms=(500, 2000)).longest_ms(5) == 2000
    assert Backoff().longest_ms(0) == 0


class Transient(ConnectionError):
    pass


def raised(outer: Exception, cause: Exception | None = None, *, context: bool = False) -> Exception:
    """``outer`` raised ``from cause`` (or, with ``context``, while handling ``cause``)."""
    try:
        if cause is None:
            raise outer
        try:
            raise cause
        except Exception as inner:
            if context:
                raise outer  # noqa: B904 - the implicit context is what is tested
            raise outer from inner
    except Exception as exc:
        return exc
    raise AssertionError("unreachable")


def test_retry_on_retries_only_the_listed_errors_and_parks_the_others_at_once() -> None:
    policy = RetryPolicy(attempts=3, retry_on=("ConnectionError",))
    assert policy.decide(0, Transient("down")).outcome is Outcome.RETRY
    parked = policy.decide(0, KeyError("id"))
    assert parked.outcome is Outcome.PARK and parked.attempt == 1
    assert parked.reason == "KeyError is not in retry_on (ConnectionError)"


def test_an_error_caused_by_an_allow_listed_one_retries() -> None:
    policy = RetryPolicy(retry_on=(f"{__name__}.Transient",))
    assert policy.is_retryable(raised(RuntimeError("wrapped"), Transient("down")))
    assert policy.is_retryable(raised(RuntimeError("wrapped"), Transient("down"), context=True))
    assert not policy.is_retryable(raised(RuntimeError("wrapped"), KeyError("id")))


def test_never_retry_matches_the_cause_chain_too_and_wins_over_retry_on() -> None:
    policy = RetryPolicy(never_retry=("ValueError",), retry_on=("RuntimeError",))
    parked = policy.decide(0, raised(RuntimeError("wrapped"), Invalid("bad")))
    assert parked.outcome is Outcome.PARK
    assert parked.reason == "Invalid (cause of RuntimeError) is never retried"


def test_raise_from_none_hides_the_context_from_the_rules() -> None:
    try:
        try:
            raise Invalid("bad")
        except Invalid:
            raise RuntimeError("clean") from None
    except RuntimeError as exc:
        hidden = exc
    assert RetryPolicy(never_retry=("ValueError",)).is_retryable(hidden)


def test_a_cause_cycle_ends_the_chain() -> None:
    a, b = RuntimeError("a"), KeyError("b")
    a.__cause__, b.__cause__ = b, a
    assert [type(e) for e in cause_chain(a)] == [RuntimeError, KeyError]


def test_a_name_in_both_lists_is_refused() -> None:
    with pytest.raises(RetryConfigError, match="both retry_on and never_retry"):
        RetryPolicy(never_retry=("KeyError",), retry_on=("KeyError",))


def test_immediate_retry_needs_a_call_and_no_negative_pause() -> None:
    with pytest.raises(RetryConfigError, match="at least 1"):
        ImmediateRetry(attempts=0)
    with pytest.raises(RetryConfigError, match="negative"):
        ImmediateRetry(pause_ms=-1)
