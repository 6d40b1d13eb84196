"""Confirmed publishing: ``Publisher`` (blocking) and ``AsyncPublisher`` (asyncio) over one core.

A message counts as sent only when the broker confirmed it. Both publishers keep a window of
unconfirmed messages in flight, report each message's outcome, republish what was unconfirmed
when a connection is lost, and resolve exchanges, shard keys and delays from the spec.
"""

from __future__ import annotations

from rabbitry.amqp.codecs import JSON, Codec, JsonCodec
from rabbitry.amqp.confirms import ConfirmTracker, Delivery, Status
from rabbitry.amqp.errors import AccessRefused, ChannelClosed, ConnectionLost, ExchangeNotFound
from rabbitry.amqp.message import Message, MessageBuilder
from rabbitry.amqp.settings import Backoff, ConnectionSettings
from rabbitry.errors import ConfirmTimeout, Nacked, PublishError, TLSHandshakeError, Unroutable
from rabbitry.publisher.aio import AsyncPublisher
from rabbitry.publisher.base import PublisherStats
from rabbitry.publisher.errors import PublisherClosed
from rabbitry.publisher.routing import NoRoute, Router, UnknownExchange
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
    "Router",
    "Status",
    "TLSHandshakeError",
    "UnknownExchange",
    "Unroutable",
]
