"""The log lines of a worker's deliveries: how a handler failed and what became of the message,
each with the structured fields (queue, message id, attempt, action, trace id) a log pipeline
reads. A line is written once its outcome happened (a retry or parked copy confirmed, a reject
sent), never before."""

from __future__ import annotations

import logging
from typing import Any

from rabbitry.amqp import tracing
from rabbitry.consumer.app import Route
from rabbitry.consumer.decision import Action, Verdict
from rabbitry.consumer.message import IncomingMessage
from rabbitry.uri import mask_text

logger = logging.getLogger("rabbitry.worker")


def failure_text(error: BaseException) -> str:
    """How a handler failed, as log lines give it (secrets in URLs masked)."""
    return f"{type(error).__name__}: {mask_text(str(error))}"


def log_fields(message: IncomingMessage, queue: str) -> dict[str, Any]:
    """The structured fields of a line about ``message`` (``extra=`` of the log call)."""
    fields: dict[str, Any] = {
        "queue": queue,
        "message_id": message.message_id,
        "attempt": message.attempt,
    }
    trace = tracing.trace_id(message.span)
    if trace is not None:
        fields["trace_id"] = trace
    return fields


def log_failure(message: IncomingMessage, route: Route, verdict: Verdict, what: str) -> None:
    """The line of a failure, once its outcome happened (a retry or parked copy is
    confirmed; a reject or a via-broker return is sent)."""
    if verdict.requeue is not None:
        log_returned(message, route, verdict, what)
        return
    if verdict.action is Action.RETRY:
        logger.warning(
            "handler of %s failed on message %s (attempt %d): %s; retry in %d ms",
            route.queue,
            message.message_id,
            verdict.attempt,
            what,
            verdict.delay_ms,
            extra={
                **log_fields(message, route.queue),
                "attempt": verdict.attempt,
                "action": "retry",
                "delay_ms": verdict.delay_ms,
            },
        )
    else:
        logger.error(
            "handler of %s failed on message %s (attempt %d): %s; %s (%s)",
            route.queue,
            message.message_id,
            verdict.attempt,
            what,
            {Action.PARK: "parked", Action.SKIPPED: "skipped"}.get(verdict.action, "rejected"),
            verdict.reason,
            extra={
                **log_fields(message, route.queue),
                "attempt": verdict.attempt,
                "action": verdict.action.value,
            },
        )


def log_returned(message: IncomingMessage, route: Route, verdict: Verdict, what: str) -> None:
    """A ``via: broker`` failure: the worker only hands the message back (reject, with or
    without requeue); the delay and the dead-lettering are the broker's to do, so the
    line says what the worker did, not what the broker is expected to do next."""
    if verdict.requeue and verdict.action is Action.RETRY:
        done = "returned to the broker for retry (reject with requeue)"
    elif verdict.requeue:
        done = (
            "returned to the broker (reject with requeue) at its last attempt, for the"
            " broker to dead-letter past the queue's delivery limit"
        )
    else:
        done = f"rejected without requeue, for the broker to dead-letter ({verdict.reason})"
    log = logger.warning if verdict.action is Action.RETRY else logger.error
    log(
        "handler of %s failed on message %s (attempt %d): %s; %s",
        route.queue,
        message.message_id,
        verdict.attempt,
        what,
        done,
        extra={
            **log_fields(message, route.queue),
            "attempt": verdict.attempt,
            "action": "requeue" if verdict.requeue else "reject",
        },
    )
