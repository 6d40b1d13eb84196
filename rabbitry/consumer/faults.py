"""Fault events: another service learns that a message was parked (MassTransit's ``Fault<T>``).

A queue whose ``retry`` names ``faults: {exchange: NAME}`` has the worker publish one event to
that exchange (a topic exchange the provisioner declares), routed by the work queue's name, for
each message it parks. The event goes out only once the parked copy is confirmed (it says what
happened, never what is about to), with a confirm of its own; the original is acked after that,
so a crash in between gives a second parked copy and event, never a park without its event.
An event the broker refuses is logged; the message stays parked.

``fault_event`` is the event (pure): a JSON body and the properties it is published with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rabbitry.consumer.decision import Verdict
from rabbitry.consumer.parked_copy import TRACE_HEADER
from rabbitry.policies.retry import LAST_ERROR_HEADER

__all__ = ["FAULT_TYPE", "FaultEvent", "fault_event"]

FAULT_TYPE = "rabbitry.fault"
"""The ``type`` property of a fault event."""
CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class FaultEvent:
    """One fault event as it is published: ``body`` (its fields) to ``exchange`` with
    ``routing_key`` (the work queue), ``correlation_id`` the parked message's id."""

    exchange: str
    routing_key: str
    body: Mapping[str, Any]
    correlation_id: str | None

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def fault_event(
    exchange: str,
    queue: str,
    message_id: str | None,
    verdict: Verdict,
    now_ms: int,
) -> FaultEvent:
    """The event of a message of ``queue`` parked by ``verdict`` (its headers are the parked
    copy's: the error, the trace)."""
    headers = verdict.headers or {}
    body = {
        "message_id": message_id,
        "queue": queue,
        "parking_queue": verdict.routing_key,
        "attempts": verdict.attempt,
        "reason": verdict.reason,
        "error": _text(headers.get(LAST_ERROR_HEADER)),
        "trace": _text(headers.get(TRACE_HEADER)),
        "parked_at_ms": now_ms,
    }
    return FaultEvent(exchange, queue, body, message_id)


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
