"""Request/reply over RabbitMQ's direct reply-to: what both publishers share.

A request is a confirmed, mandatory message whose ``reply_to`` is the pseudo-queue
``amq.rabbitmq.reply-to`` and whose ``correlation_id`` is fresh. The broker rewrites
``reply_to`` into a name bound to the requester's channel, and delivers what a responder
publishes to that name straight to the channel's consumer of ``amq.rabbitmq.reply-to``: no
queue is declared. The broker requires that consumer to be no-ack and to exist on the same
channel before the request is published (``Session.consume_replies`` writes it ahead of the
request's frames, and again on every new channel before anything is republished).

``PendingReplies`` matches replies to the requests still waiting, by correlation id. A reply
whose request is no longer waiting (it timed out, or a duplicate after a responder's crash
between its reply and its ack) is dropped: every request has an id of its own, so a late
reply can never be taken for a later request's.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.errors import PublishError
from rabbitry.errors import ReplyLost as ReplyLost
from rabbitry.errors import RequestTimeout as RequestTimeout

logger = logging.getLogger("rabbitry.publisher")

REPLY_TO = "amq.rabbitmq.reply-to"
"""The pseudo-queue of direct reply-to: requests name it as ``reply_to``."""
DEFAULT_REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Reply:
    """A responder's answer: ``body`` (bytes) and its properties; ``json()`` and ``text``
    decode it."""

    body: bytes
    correlation_id: str
    content_type: str | None = None
    headers: Mapping[str, Any] = field(default_factory=dict)
    message_id: str | None = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


class RequestOptions(TypedDict, total=False):
    """The keywords of ``request`` besides the body, ``routing_key`` and ``timeout``."""

    exchange: str | None
    headers: Mapping[str, Any] | None
    shard_key: str | None
    message_id: str | None
    correlation_id: str | None
    """The request's id, echoed by the reply (default: a fresh random one)."""
    content_type: str | None
    content_encoding: str | None
    expiration: str | int | None
    priority: int | None
    persistent: bool | None
    message_type: str | None


def fresh_correlation_id() -> str:
    return os.urandom(16).hex()


class Waiting:
    """One request waiting for its reply; ``done`` is a future in asyncio code."""

    __slots__ = ("correlation_id", "delivery", "done", "error", "reply")

    def __init__(self, correlation_id: str, done: Any = None) -> None:
        self.correlation_id = correlation_id
        self.reply: Reply | None = None
        self.error: PublishError | None = None
        self.done = done
        self.delivery: Delivery | None = None
        """The request as published (set once it is handed to the connection)."""

    def outcome(self) -> Reply:
        """The reply, or (raised) the error that came instead: once the request is settled."""
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply

    def timed_out(self, routing_key: str, timeout: float) -> RequestTimeout:
        """The error of a request whose reply did not come within ``timeout`` seconds."""
        return RequestTimeout(
            f"request {self.correlation_id} to {routing_key!r}: no reply within {timeout:g} s"
            " (the request was stored; a reply that comes later is dropped)"
        )

    def settle(self, reply: Reply | None, error: PublishError | None) -> None:
        self.reply, self.error = reply, error
        done = self.done
        if done is not None and not done.done():
            done.set_result(None)


class PendingReplies:
    """The requests of one publisher still waiting, by correlation id."""

    def __init__(self) -> None:
        self._waiting: dict[str, Waiting] = {}
        self.late = 0
        """Replies dropped because nobody waited for them any more."""

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self, correlation_id: str, done: Any = None) -> Waiting:
        if correlation_id in self._waiting:
            raise PublishError(
                f"a request with correlation id {correlation_id!r} is already waiting: give each"
                " request an id of its own (or none: the publisher makes one)"
            )
        waiting = self._waiting[correlation_id] = Waiting(correlation_id, done)
        return waiting

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def deliver(self, properties: Mapping[str, Any], body: bytes) -> bool:
        """A reply from the broker; False when no request waits for it (dropped)."""
        correlation_id = properties.get("correlation_id")
        waiting = self._waiting.pop(correlation_id, None) if correlation_id else None
        if waiting is None:
            self.late += 1
            logger.debug("dropped a reply nobody waits for (correlation id %s)", correlation_id)
            return False
        waiting.settle(
            Reply(
                body=body,
                correlation_id=str(correlation_id),
                content_type=properties.get("content_type"),
                headers=properties.get("headers") or {},
                message_id=properties.get("message_id"),
            ),
            None,
        )
        return True

    def channel_lost(self, why: str) -> None:
        """Fail the requests the broker had confirmed: their replies were bound to a channel
        that is gone. One not yet confirmed is published again on the new channel, whose
        own reply-to name it then carries: it goes on waiting."""
        for correlation_id, entry in list(self._waiting.items()):
            delivery = entry.delivery
            if delivery is not None and delivery.status is not Status.PENDING:
                del self._waiting[correlation_id]
                entry.settle(
                    None, ReplyLost(f"request {correlation_id}: {why}; its reply cannot arrive")
                )
