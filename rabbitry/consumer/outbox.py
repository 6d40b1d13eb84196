"""What a worker publishes for a delivery its handler ended: the retry or parked copy of a
failed message, the fault event of a parked one, the reply to a request. Each publish holds its
delivery's ack until the broker confirms it, so a crash in between gives a duplicate, never a
loss; a copy the broker refuses parks the message instead, or returns it to its queue, or stops
the worker when what it was published into is gone (``preflight.lost_need``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.consumer.app import Route
from rabbitry.consumer.decision import Action, Verdict
from rabbitry.consumer.failure_log import log_failure, log_fields
from rabbitry.consumer.faults import FAULT_TYPE, FaultEvent, fault_event
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.parked_copy import with_extras
from rabbitry.consumer.preflight import lost_need

if TYPE_CHECKING:
    from rabbitry.consumer.engine import WorkerCore

logger = logging.getLogger("rabbitry.worker")


_KEPT_PROPERTIES = (
    "content_type",
    "content_encoding",
    "correlation_id",
    "reply_to",
    "priority",
)


def header_frame_size(frames: bytes) -> int:
    """Bytes of the content header frame in a publish's ``frames`` (method frame first): what
    must fit the negotiated ``frame_max``."""
    method_size = int.from_bytes(frames[3:7], "big")
    start = 7 + method_size + 1
    return 7 + int.from_bytes(frames[start + 3 : start + 7], "big") + 1


class _Pending:
    """A worker publish (retry or park) waiting for its confirm before the ack and the log
    line that says it happened."""

    __slots__ = ("failure", "message", "verdict")

    def __init__(self, message: IncomingMessage, verdict: Verdict, failure: str) -> None:
        self.message = message
        self.verdict = verdict
        self.failure = failure
        """How the handler failed, as the log line gives it."""


class Replying:
    """A reply waiting for its confirm before its request's ack."""

    __slots__ = ("body", "content_type", "delivery", "message")

    def __init__(
        self, message: IncomingMessage, delivery: Delivery, body: bytes, content_type: str | None
    ) -> None:
        self.message = message
        self.delivery = delivery
        self.body = body
        self.content_type = content_type


class Outbox:
    """The publishes of one worker (``core``) that hold a delivery's ack until confirmed."""

    def __init__(self, core: WorkerCore) -> None:
        self.core = core
        self.pending: dict[Delivery, _Pending] = {}
        """Retry and parked copies, each holding its message's ack."""
        self.faults: dict[Delivery, tuple[IncomingMessage, FaultEvent]] = {}
        """Fault events sent for parked messages, each holding its message's ack."""
        self.replies: dict[Delivery, Replying] = {}
        """Replies to requests, each holding its request's ack until it is confirmed."""

    def __len__(self) -> int:
        return len(self.pending) + len(self.faults) + len(self.replies)

    def settled(self, delivery: Delivery) -> bool:
        """A publish settled: act on it; False when it is none of the outbox's."""
        pending = self.pending.pop(delivery, None)
        if pending is not None:
            self.copied(delivery, pending)
            return True
        if self.replies:
            reply = self.replies.pop(delivery, None)
            if reply is not None:
                self.replied(delivery, reply)
                return True
        if self.faults:
            parked = self.faults.pop(delivery, None)
            if parked is not None:
                self.announced(delivery, parked[0])
                return True
        return False

    def reply(self, reply: Replying) -> None:
        """Send a handler's reply; its confirm acks the request."""
        self.replies[reply.delivery] = reply
        self.core._send(reply.delivery)

    def copied(self, delivery: Delivery, pending: _Pending) -> None:
        """A retry or parked copy settled: ack its message, or park or return it."""
        message, verdict = pending.message, pending.verdict
        counters = self.core.metrics.queues[message.queue]
        if delivery.status is Status.CONFIRMED:
            if verdict.action is Action.PARK:
                counters.parked += 1
            else:
                counters.retried[verdict.tier_label] += 1
            route = self.core.routes[message.consumer]
            log_failure(message, route, verdict, pending.failure)
            faults = route.retry.fault_exchange if route.retry is not None else None
            if faults is not None and verdict.action is Action.PARK:
                self.announce(message, verdict, faults)
            else:
                self.core._ack(message)
            return
        route = self.core.routes[message.consumer]
        if self.gone(message, route, verdict, delivery, pending.failure):
            return
        parks = verdict.action is Action.RETRY and route.retry is not None
        logger.error(
            "handler of %s failed on message %s (attempt %d): %s; could not store its %s copy"
            " (%s): %s",
            message.queue,
            message.message_id,
            verdict.attempt,
            pending.failure,
            verdict.action.value,
            delivery.error,
            "parking it instead" if parks else "returned to its queue",
            extra={
                **log_fields(message, message.queue),
                "attempt": verdict.attempt,
                "action": "park" if parks else "requeue",
            },
        )
        if parks:
            assert route.retry is not None
            park = Verdict(
                Action.PARK,
                attempt=verdict.attempt,
                routing_key=route.retry.parking_queue,
                headers={**(verdict.headers or {}), "x-rabbitry-parked-reason": "retry failed"},
                reason=f"the retry could not be published: {delivery.error}",
            )
            self.republish(message, park, pending.failure)
        else:
            self.core.requeue(message)

    def parked_copy(
        self, message: IncomingMessage, route: Route, verdict: Verdict, error: BaseException
    ) -> Verdict:
        """The parked copy with the stack trace and the handler's own headers, within the
        negotiated frame size (``parked_copy``)."""

        def room(headers: Mapping[str, Any]) -> int:
            copy = self.copy(message, replace(verdict, headers=headers))
            return self.core.builder.frame_max - header_frame_size(copy.frames)

        headers = with_extras(verdict.headers or {}, message, error, route.parked_headers, room)
        return replace(verdict, headers=headers)

    def announce(self, message: IncomingMessage, verdict: Verdict, exchange: str) -> None:
        """Publish the fault event of a parked message (``faults``); its confirm acks it."""
        event = fault_event(
            exchange, message.queue, message.message_id, verdict, int(time.time() * 1000)
        )
        delivery = self.core.builder.build(
            event.encoded(),
            exchange=event.exchange,
            routing_key=event.routing_key,
            content_type="application/json",
            correlation_id=event.correlation_id,
            message_type=FAULT_TYPE,
        )
        self.faults[delivery] = (message, event)
        self.core._send(delivery)

    def announced(self, delivery: Delivery, message: IncomingMessage) -> None:
        if delivery.status is not Status.CONFIRMED:
            logger.error(
                "message %s of %s is parked, but its fault event to %r could not be stored: %s",
                message.message_id,
                message.queue,
                delivery.exchange,
                delivery.error,
                extra=log_fields(message, message.queue),
            )
        self.core._ack(message)

    def republish(self, message: IncomingMessage, verdict: Verdict, failure: str) -> None:
        delivery = self.copy(message, verdict)
        self.pending[delivery] = _Pending(message, verdict, failure)
        self.core._send(delivery)

    def copy(self, message: IncomingMessage, verdict: Verdict) -> Delivery:
        """The retry or parked copy of ``message`` as ``verdict`` says, built to send."""
        props: dict[str, Any] = {}
        if message._flags:
            all_props = message.properties
            for name in _KEPT_PROPERTIES:
                value = all_props.get(name)
                if value is not None:
                    props[name] = value
            if "type" in all_props:
                props["message_type"] = all_props["type"]
            if "timestamp" in all_props:
                props["timestamp"] = all_props["timestamp"]
        return self.core.builder.build(
            message.body,
            exchange=verdict.exchange,
            routing_key=verdict.routing_key,
            mandatory=True,
            headers=verdict.headers,
            message_id=message.message_id,
            **props,
        )

    def gone(
        self,
        message: IncomingMessage,
        route: Route,
        verdict: Verdict,
        delivery: Delivery,
        failure: str,
    ) -> bool:
        """A retry or parked copy that found its queue or exchange gone (unroutable, 404):
        the message goes back to its queue and the worker stops (``lost``), the way it
        refuses to start without that object. Redelivered at once, the message would only
        fail the same way again and again. False for any other failure."""
        if verdict.action is Action.PARK:
            why = f"parking lot of {route.queue!r}"
        elif route.retry is not None and route.retry.delay is not None:
            why = f"delay levels carrying retries of {route.queue!r}"
        else:
            why = f"retry tier of {route.queue!r}, {verdict.delay_ms} ms"
        need = lost_need(delivery.error, verdict.exchange, verdict.routing_key, why)
        if need is None:
            return False
        lost = self.core._stop_for(need, route.queue, "the failed message")
        logger.error(
            "handler of %s failed on message %s (attempt %d): %s; its %s copy came back (%s): %s",
            route.queue,
            message.message_id,
            verdict.attempt,
            failure,
            verdict.action.value,
            delivery.error,
            lost,
            extra={
                **log_fields(message, route.queue),
                "attempt": verdict.attempt,
                "action": "requeue",
            },
        )
        self.core.requeue(message)
        return True

    def replied(self, delivery: Delivery, reply: Replying) -> None:
        """A reply settled: the request is done either way (its handler succeeded)."""
        message = reply.message
        if delivery.status is not Status.CONFIRMED:
            logger.warning(
                "the reply to message %s from %s was not delivered (%s); a returned reply means"
                " the requester is gone or stopped waiting",
                message.message_id,
                message.queue,
                delivery.error,
                extra=log_fields(message, message.queue),
            )
        self.core._ack(message)
