"""Errors of the client layer: what the broker sends on a channel, and a connection gone for good.

All but ``ChannelRefused`` are ``PublishError`` so one ``except`` around publishing catches
every failure; ``ConnectionLost`` is a ``BrokerError`` too, which is what a worker that gives
up raises. ``ChannelRefused`` is what ``amqp.channel`` raises for a method the broker refused.
"""

from __future__ import annotations

from typing import Any

from rabbitry.errors import BrokerError, PublishError


class ChannelClosed(PublishError):
    """The broker closed the channel because of this message (``reply_code`` says why)."""

    def __init__(self, message: str, reply_code: int = 0) -> None:
        self.reply_code = reply_code
        super().__init__(message)


class ExchangeNotFound(ChannelClosed):
    """The message was published to an exchange that does not exist (404 NOT_FOUND)."""


class AccessRefused(ChannelClosed):
    """The user may not publish to this exchange (403 ACCESS_REFUSED)."""


class ConnectionLost(PublishError, BrokerError):
    """The connection broke and did not come back within ``give_up_after``; a message in flight
    may or may not be stored."""

    deliveries: list[Any]
    """For ``publish_many``: every message sent so far, each with its outcome."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.deliveries = []


class ChannelRefused(BrokerError):
    """The broker refused a method (a passive declare of something missing: 404) and closed
    the channel; ``reply_code`` and ``reply_text`` are its answer."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        super().__init__(f"{reply_code} {reply_text}")
