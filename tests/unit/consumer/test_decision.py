"""The pure decision core: ack, retry at a tier, park, reject, duplicates and cancellations."""

from __future__ import annotations

import pytest

from rabbitry.consumer.decision import (
    CANCEL_HEADER,
    REPLAYED_HEADER,
    Action,
    HandlerTimeout,
    cancel_target,
    decide,
    replay_headers,
)
from rabbitry.policies.delay import BinaryDelays
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    MAX_ERROR_TEXT,
    PARKED_REASON_HEADER,
    QUEUE_HEADER,
    Backoff,
    RetryPolicy,
)
from rabbitry.topology.patterns.retries import BrokerRetry, QueueRetry
from tests.unit.retry_ladders import work_retry

TIERS = work_retry(1000, 5000, never_retry=("ValueError",))
VIA_DELAY = QueueRetry(
    queue="mail",
    policy=RetryPolicy(attempts=4, backoff=Backoff(tiers_ms=(2000, 4000, 8000))),
    parking_queue="mail.parking",
    delay=BinaryDelays("delay", unit_ms=1000, levels=8),
)


BY_BROKER = QueueRetry(
    queue="jobs",
    policy=RetryPolicy(
        attempts=3, backoff=Backoff(tiers_ms=(1000, 2000)), never_retry=("ValueError",)
    ),
    parking_queue="jobs.parking",
    broker=BrokerRetry(min_ms=1000, max_ms=2000, delivery_limit=2),
)


def test_via_broker_a_failure_is_returned_to_the_queue_counted_by_the_broker() -> None:
    first = decide(BY_BROKER, "jobs", {"tenant": "acme"}, RuntimeError("down"))
    assert (first.action, first.requeue, first.attempt, first.delay_ms) == (
        Action.RETRY,
        True,
        1,
        1000,
    )
    assert not first.publishes
    assert first.headers == {"tenant": "acme", "x-delivery-count": 1}
    second = decide(BY_BROKER, "jobs", first.headers, RuntimeError("down"))
    assert (second.action, second.attempt, second.delay_ms) == (Action.RETRY, 2, 2000)
    last = decide(BY_BROKER, "jobs", second.headers, RuntimeError("down"))
    # returned all the same: past its delivery limit the broker dead-letters it
    assert (last.action, last.requeue, last.attempt) == (Action.PARK, True, 3)
    assert last.routing_key == "jobs.parking" and "delivery limit" in last.reason


def test_via_broker_a_never_retried_failure_is_rejected_without_requeue() -> None:
    verdict = decide(BY_BROKER, "jobs", {}, ValueError("bad"))
    assert (verdict.action, verdict.requeue, verdict.attempt) == (Action.PARK, False, 1)
    assert "never retried" in verdict.reason and not verdict.publishes


def test_success_acks() -> None:
    assert decide(TIERS, "work", {}, None).action is Action.ACK


def test_first_failures_walk_the_tiers_then_park() -> None:
    headers: dict[str, object] = {"tenant": "acme"}
    first = decide(TIERS, "work", headers, RuntimeError("boom"), now_ms=1)
    assert first.action is Action.RETRY
    assert (first.attempt, first.retry, first.delay_ms) == (1, 1, 1000)
    assert (first.exchange, first.routing_key) == ("", "work.retry.1s")
    assert first.headers is not None and first.headers[ATTEMPT_HEADER] == 1
    assert first.headers["tenant"] == "acme" and first.headers[QUEUE_HEADER] == "work"
    assert first.tier_label == "1s"

    second = decide(TIERS, "work", first.headers, RuntimeError("boom"), now_ms=2)
    assert (second.action, second.routing_key, second.delay_ms) == (
        Action.RETRY,
        "work.retry.5s",
        5000,
    )
    third = decide(TIERS, "work", second.headers, RuntimeError("boom again"), now_ms=3)
    assert third.action is Action.PARK and third.routing_key == "work.parking"
    assert third.exchange == ""
    assert third.headers is not None
    assert third.headers[ATTEMPT_HEADER] == 3
    assert "boom again" in third.headers[LAST_ERROR_HEADER]
    assert "3 attempts" in third.headers[PARKED_REASON_HEADER]


def test_never_retried_errors_park_at_once() -> None:
    verdict = decide(TIERS, "work", None, ValueError("bad input"))
    assert verdict.action is Action.PARK and verdict.attempt == 1
    assert "never retried" in verdict.reason


def test_timeouts_are_retryable_failures() -> None:
    verdict = decide(TIERS, "work", None, HandlerTimeout("too slow"))
    assert verdict.action is Action.RETRY


def test_error_text_in_headers_is_bounded() -> None:
    verdict = decide(TIERS, "work", None, RuntimeError("x" * 100_000))
    assert verdict.headers is not None
    assert len(verdict.headers[LAST_ERROR_HEADER]) <= MAX_ERROR_TEXT


def test_retries_via_delay_levels_route_to_the_queue_address() -> None:
    verdict = decide(VIA_DELAY, "mail", {ATTEMPT_HEADER: 1}, RuntimeError("smtp down"))
    assert verdict.action is Action.RETRY and verdict.delay_ms == 4000
    assert verdict.exchange == "delay.layout.binary-1000ms-8"  # the layout's entry
    assert verdict.routing_key.endswith(".mail")
    assert BinaryDelays("delay", 1000, 8).decode(verdict.routing_key) == (4, "mail")


def test_no_retry_setup_rejects_to_the_broker() -> None:
    verdict = decide(None, "plain", None, RuntimeError("x"))
    assert verdict.action is Action.REJECT and not verdict.publishes


def test_broker_headers_are_stripped_on_retry() -> None:
    headers = {"x-death": [{"count": 1}], "x-delivery-count": 3, "keep": 1}
    verdict = decide(TIERS, "work", headers, RuntimeError("x"))
    assert verdict.headers is not None
    assert "x-death" not in verdict.headers and "x-delivery-count" not in verdict.headers
    assert verdict.headers["keep"] == 1


@pytest.mark.parametrize(
    ("duplicate", "cancelled", "action"),
    [
        (True, False, Action.DUPLICATE),
        (False, True, Action.CANCELLED),
        (True, True, Action.CANCELLED),
    ],
)
def test_skips_before_the_handler(duplicate: bool, cancelled: bool, action: Action) -> None:
    verdict = decide(TIERS, "work", {}, None, duplicate=duplicate, cancelled=cancelled)
    assert verdict.action is action


def test_cancel_messages_are_noted_not_handled() -> None:
    assert cancel_target({CANCEL_HEADER: b"job-7"}) == "job-7"
    assert cancel_target({"other": 1}) is None
    assert decide(TIERS, "work", {CANCEL_HEADER: "job-7"}, None).action is Action.CANCEL_NOTED


def test_replay_resets_the_ladder_and_counts_replays() -> None:
    parked = {
        ATTEMPT_HEADER: 3,
        LAST_ERROR_HEADER: "boom",
        PARKED_REASON_HEADER: "gave up",
        QUEUE_HEADER: "work",
        "x-death": [],
        "tenant": "acme",
    }
    out = replay_headers(parked)
    assert ATTEMPT_HEADER not in out and LAST_ERROR_HEADER not in out and "x-death" not in out
    assert out[QUEUE_HEADER] == "work" and out["tenant"] == "acme"
    assert out[REPLAYED_HEADER] == 1
    assert replay_headers(out)[REPLAYED_HEADER] == 2


def test_retries_through_a_delay_with_lanes_take_the_lane_of_the_clock() -> None:
    scheme = BinaryDelays("delay", unit_ms=1000, levels=8, lanes=3)
    retry = QueueRetry("mail", VIA_DELAY.policy, "mail.parking", delay=scheme)
    lanes = [
        scheme.decode_lane(decide(retry, "mail", None, RuntimeError("x"), now_ms=ms).routing_key)
        for ms in (30, 31, 32)
    ]
    assert lanes == [(2, "mail", 0), (2, "mail", 1), (2, "mail", 2)]
