"""What happens to one delivered message: the pure verdict both workers act on.

Inputs are plain values: the message's headers and id, the queue's resolved retry set-up
(``QueueRetry``, from the spec), how the handler ended (success, or the exception), and whether
the idempotency store saw the id before or the job was cancelled. The output is a ``Verdict``:
ack, retry at tier k after d ms (where to publish, with which headers), park, reject (no retry
declared: the broker dead-letters by the queue's arguments), skip a failed delivery of a
stream (``after_stream_failure``), or drop a duplicate / a cancelled job. No clock, no I/O:
the caller passes ``now_ms``.

A queue that retries ``via: broker`` has its verdicts carried out by the broker, not by a
publish (``Verdict.requeue``): the attempt count is the broker's ``x-delivery-count`` (failed
deliveries so far); a retryable failure is returned as failed, and the quorum queue holds it
for its delay, or dead-letters it to the parking lot once past its delivery limit (the last
attempt); a failure that is never retried is rejected without requeue, dead-lettered at once.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rabbitry.errors import HandlerTimeout as HandlerTimeout
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    FIRST_FAILURE_HEADER,
    LAST_ERROR_HEADER,
    LAST_FAILURE_HEADER,
    PARKED_REASON_HEADER,
    STACK_TRACE_HEADER,
    Outcome,
    failed_attempts,
    failure_headers,
)
from rabbitry.topology.patterns.retry_setup import QueueRetry, duration_label

DELIVERY_COUNT_HEADER = "x-delivery-count"
"""Set by quorum queues on delivery: the failed deliveries of the message so far."""
CANCEL_HEADER = "x-rabbitry-cancel"
"""On a control message: the message id of the job to withdraw."""
REPLAYED_HEADER = "x-rabbitry-replayed"
"""How often ``rabbitry dlq replay`` sent the message back."""


class Action(enum.StrEnum):
    """The closed set of things a worker does with a delivery."""

    ACK = "ack"
    RETRY = "retry"
    PARK = "park"
    REJECT = "reject"
    """No retry set-up: reject without requeue; the broker dead-letters by the queue's rules."""
    DUPLICATE = "duplicate"
    """Already handled (by message id): ack without running the handler."""
    CANCELLED = "cancelled"
    """Withdrawn by a cancel message: ack without running the handler."""
    CANCEL_NOTED = "cancel-noted"
    """A cancel message itself: remember the id, ack."""
    RESCHEDULED = "rescheduled"
    """An occurrence of a periodic job not due yet, or made under an old schedule: another
    occurrence is published in its place, then it is acked without running."""
    DROPPED = "dropped"
    """An occurrence of a periodic job the app does not have: ack without running."""
    SKIPPED = "skipped"
    """A failed delivery of a stream queue: logged and acked (the ack only returns credit).
    A stream cannot dead-letter and keeps the message: it can be read again by offset."""
    HELD = "held"
    """The queue's kill switch is open: the handler did not run; the delivery waits, unacked,
    and is handled first when the switch half-opens (``kill_switch``)."""


@dataclass(frozen=True)
class Verdict:
    """One decision. For RETRY and PARK: publish ``headers`` to ``exchange``/``routing_key``
    with a confirm, then ack the original."""

    action: Action
    attempt: int = 0
    """Failed attempts including this one (0 when nothing failed)."""
    retry: int = 0
    """Which retry this is (1 = the first); the tier index is ``retry - 1``."""
    delay_ms: int = 0
    exchange: str = ""
    routing_key: str = ""
    headers: Mapping[str, Any] | None = None
    reason: str = ""
    requeue: bool | None = None
    """``via: broker``: the broker carries the verdict out, nothing is published. True: the
    message is returned as failed (basic.reject with requeue), retried after the queue's
    delay or, past its delivery limit, dead-lettered to the parking lot; False: rejected
    without requeue, dead-lettered at once. ``headers`` are then those of the next delivery."""

    @property
    def publishes(self) -> bool:
        return self.requeue is None and (self.action is Action.RETRY or self.action is Action.PARK)

    @property
    def tier_label(self) -> str:
        """``1s``/``250ms``: the counter label of a retry."""
        return duration_label(self.delay_ms)


ACK = Verdict(Action.ACK)
DUPLICATE = Verdict(Action.DUPLICATE, reason="message id already handled")
CANCELLED = Verdict(Action.CANCELLED, reason="job cancelled by id")
CANCEL_NOTED = Verdict(Action.CANCEL_NOTED)


def cancel_target(headers: Mapping[str, Any] | None) -> str | None:
    """The job id a control message cancels (None for an ordinary message)."""
    if not headers:
        return None
    value = headers.get(CANCEL_HEADER)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value) if value not in (None, "") else None


def before_handler(
    headers: Mapping[str, Any] | None, *, duplicate: bool = False, cancelled: bool = False
) -> Verdict | None:
    """The verdict when the handler must not run (None: run it)."""
    if cancel_target(headers) is not None:
        return CANCEL_NOTED
    if cancelled:
        return CANCELLED
    if duplicate:
        return DUPLICATE
    return None


def after_failure(
    retry: QueueRetry | None,
    queue: str,
    headers: Mapping[str, Any] | None,
    error: BaseException | str,
    *,
    now_ms: int,
    rng: random.Random | None = None,
) -> Verdict:
    """The verdict for a failed handler: where the message goes next and with which headers."""
    if retry is None:
        name = error if isinstance(error, str) else type(error).__name__
        return Verdict(Action.REJECT, reason=f"{name}; {queue} declares no retry")
    if retry.broker is not None:
        return _by_broker(retry, headers, error)
    decision = retry.policy.decide(failed_attempts(headers), error, rng)
    out = failure_headers(headers, decision, error, queue, now_ms)
    if decision.outcome is Outcome.PARK:
        return _parked(retry, decision.attempt, decision.reason, out)
    # through the queue's delay (its levels round the pause), else through the tier queue
    delay_ms, exchange, routing_key = decision.delay_ms, "", ""
    if retry.delay is not None:
        # the clock picks the lane: retries spread over a delay's lanes without a counter
        route = retry.delay.route(decision.delay_ms / 1000, queue, now_ms)
        delay_ms, exchange, routing_key = route.delay_ms, route.exchange, route.routing_key
    else:
        routing_key = retry.tier_queue(decision.delay_ms)
    return Verdict(
        Action.RETRY,
        attempt=decision.attempt,
        retry=decision.retry,
        delay_ms=delay_ms,
        exchange=exchange,
        routing_key=routing_key,
        headers=out,
    )


def after_stream_failure(queue: str, offset: int | None, error: BaseException | str) -> Verdict:
    """The verdict for a failed handler of a stream queue: skip it.

    A stream never dead-letters, and a reject or nack would leave it where it is; retrying in
    place would stop the stream's readers behind one poison message. So the message is skipped
    (logged with its offset, where it stays to be read again), like a failure without a retry
    set-up, and the handler goes on with the next one."""
    name = error if isinstance(error, str) else type(error).__name__
    at = f" at offset {offset}" if offset is not None else ""
    return Verdict(
        Action.SKIPPED,
        attempt=1,
        reason=f"{name}; {queue} is a stream: the message{at} is skipped (streams cannot"
        " dead-letter; read it again from its offset)",
    )


def broker_failures(headers: Mapping[str, Any] | None) -> int:
    """Failed deliveries the broker counted (``x-delivery-count``; 0 when absent or bad)."""
    return failed_attempts(headers, DELIVERY_COUNT_HEADER)


def _parked(
    retry: QueueRetry,
    attempt: int,
    reason: str,
    headers: Mapping[str, Any] | None = None,
    *,
    requeue: bool | None = None,
) -> Verdict:
    """PARK to the queue's parking lot (``requeue``: how the broker carries it out, or None
    when the worker publishes the parked copy itself)."""
    return Verdict(
        Action.PARK,
        attempt=attempt,
        routing_key=retry.parking_queue,
        headers=headers,
        reason=reason,
        requeue=requeue,
    )


def _by_broker(
    retry: QueueRetry, headers: Mapping[str, Any] | None, error: BaseException | str
) -> Verdict:
    """The verdict of a ``via: broker`` queue, which the broker carries out."""
    assert retry.broker is not None
    decision = retry.policy.decide(broker_failures(headers), error)
    if not retry.policy.is_retryable(error):
        reason = f"{decision.reason} (dead-lettered by the broker)"
        return _parked(retry, decision.attempt, reason, requeue=False)
    following = {**(headers or {}), DELIVERY_COUNT_HEADER: decision.attempt}
    if decision.outcome is Outcome.PARK:
        reason = f"{decision.reason} (the broker's delivery limit)"
        return _parked(retry, decision.attempt, reason, following, requeue=True)
    return Verdict(
        Action.RETRY,
        attempt=decision.attempt,
        retry=decision.retry,
        delay_ms=retry.broker.delay_ms(decision.retry),
        routing_key=retry.queue,
        headers=following,
        requeue=True,
    )


def decide(
    retry: QueueRetry | None,
    queue: str,
    headers: Mapping[str, Any] | None,
    error: BaseException | str | None,
    *,
    duplicate: bool = False,
    cancelled: bool = False,
    now_ms: int = 0,
    rng: random.Random | None = None,
) -> Verdict:
    """All of it in one call: skip (cancel/duplicate), ack on success, else retry or park."""
    early = before_handler(headers, duplicate=duplicate, cancelled=cancelled)
    if early is not None:
        return early
    if error is None:
        return ACK
    return after_failure(retry, queue, headers, error, now_ms=now_ms, rng=rng)


RETRY_STATE_HEADERS = (
    ATTEMPT_HEADER,
    FIRST_FAILURE_HEADER,
    LAST_FAILURE_HEADER,
    LAST_ERROR_HEADER,
    PARKED_REASON_HEADER,
    STACK_TRACE_HEADER,
)


def replay_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Headers of a message sent back from a parking lot: a fresh retry ladder, the history
    kept as ``x-rabbitry-replayed`` (count) and the broker's dead-letter headers stripped."""
    from rabbitry.policies.retry import BROKER_HEADERS

    out = {
        k: v
        for k, v in (headers or {}).items()
        if k not in RETRY_STATE_HEADERS and k not in BROKER_HEADERS
    }
    try:
        count = int((headers or {}).get(REPLAYED_HEADER, 0))
    except (TypeError, ValueError):
        count = 0
    out[REPLAYED_HEADER] = count + 1
    return out
