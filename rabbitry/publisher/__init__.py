"""Confirmed publishing: ``Publisher`` (blocking) and ``AsyncPublisher`` (asyncio) over one core.

A message counts as sent only when the broker confirmed it. Both publishers keep a window of
unconfirmed messages in flight, report each message's outcome, republish what was unconfirmed
when a connection is lost, and resolve exchanges, shard keys and delays from the spec; their
``request`` publishes a request and waits for its ``Reply`` over direct reply-to.

The names are loaded on first use: a program that publishes from one of the two does not
load the other (a worker's handler module importing ``Publisher`` among them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rabbitry import lazy

if TYPE_CHECKING:
    from rabbitry.amqp.codecs import JSON, Codec, JsonCodec
    from rabbitry.amqp.confirms import ConfirmTracker, Delivery, Status
    from rabbitry.amqp.message import Message, MessageBuilder
    from rabbitry.amqp.settings import Backoff, ConnectionSettings
    from rabbitry.errors import (
        AccessRefused,
        ChannelClosed,
        ConfirmTimeout,
        ConnectionLost,
        DelayLayoutMismatch,
        ExchangeNotFound,
        Nacked,
        NoRoute,
        PublisherClosed,
        PublishError,
        ReplyLost,
        RequestTimeout,
        TLSHandshakeError,
        UnknownExchange,
        Unroutable,
    )
    from rabbitry.publisher.aio import AsyncPublisher
    from rabbitry.publisher.base import PublisherStats
    from rabbitry.publisher.layout import check_delay_layouts
    from rabbitry.publisher.requests import Reply
    from rabbitry.publisher.routing import Router
    from rabbitry.publisher.sync import Publisher

__all__ = [
    "JSON",
    "AccessRefused",
    "AsyncPublisher",
    "Backoff",
    "ChannelClosed",
    "Codec",
    "ConfirmTimeout",
    "ConfirmTracker",
    "ConnectionLost",
    "ConnectionSettings",
    "DelayLayoutMismatch",
    "Delivery",
    "ExchangeNotFound",
    "JsonCodec",
    "Message",
    "MessageBuilder",
    "Nacked",
    "NoRoute",
    "PublishError",
    "Publisher",
    "PublisherClosed",
    "PublisherStats",
    "Reply",
    "ReplyLost",
    "RequestTimeout",
    "Router",
    "Status",
    "TLSHandshakeError",
    "UnknownExchange",
    "Unroutable",
    "check_delay_layouts",
]

_LAZY = {
    "JSON": "rabbitry.amqp.codecs",
    "Codec": "rabbitry.amqp.codecs",
    "JsonCodec": "rabbitry.amqp.codecs",
    "ConfirmTracker": "rabbitry.amqp.confirms",
    "Delivery": "rabbitry.amqp.confirms",
    "Status": "rabbitry.amqp.confirms",
    "AccessRefused": "rabbitry.errors",
    "ChannelClosed": "rabbitry.errors",
    "ConnectionLost": "rabbitry.errors",
    "ExchangeNotFound": "rabbitry.errors",
    "Message": "rabbitry.amqp.message",
    "MessageBuilder": "rabbitry.amqp.message",
    "Backoff": "rabbitry.amqp.settings",
    "ConnectionSettings": "rabbitry.amqp.settings",
    "ConfirmTimeout": "rabbitry.errors",
    "Nacked": "rabbitry.errors",
    "PublishError": "rabbitry.errors",
    "TLSHandshakeError": "rabbitry.errors",
    "Unroutable": "rabbitry.errors",
    "AsyncPublisher": "rabbitry.publisher.aio",
    "PublisherStats": "rabbitry.publisher.base",
    "PublisherClosed": "rabbitry.errors",
    "DelayLayoutMismatch": "rabbitry.errors",
    "check_delay_layouts": "rabbitry.publisher.layout",
    "Reply": "rabbitry.publisher.requests",
    "ReplyLost": "rabbitry.errors",
    "RequestTimeout": "rabbitry.errors",
    "NoRoute": "rabbitry.errors",
    "Router": "rabbitry.publisher.routing",
    "UnknownExchange": "rabbitry.errors",
    "Publisher": "rabbitry.publisher.sync",
}


__getattr__, __dir__ = lazy.names(__name__, _LAZY, __all__)
