"""Errors of the client layer: what the broker sends on a channel, and a connection gone for good.

All but ``ChannelRefused`` and ``FrameError`` are ``PublishError`` so one ``except`` around
publishing catches every failure; ``ConnectionLost`` is a ``BrokerError`` too, which is what a
worker that gives up raises. ``ChannelRefused`` is what ``amqp.channel`` raises for a method the
broker refused; ``FrameError`` is what every client raises for bytes that are no AMQP frame.
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


class FrameError(BrokerError):
    """Bytes from the broker that are no valid AMQP 0-9-1 frame: a broker bug, a man in the
    middle, or another server on the port. The connection cannot continue and is closed; the
    message names the node (host:port) and what was wrong."""

    @classmethod
    def at(cls, node: str, exc: BaseException) -> FrameError:
        """``exc`` (what the frame reader found wrong) said of the node that sent it."""
        return cls(
            f"{node} sent bytes that are no AMQP 0-9-1 frame ({exc}); the connection is closed:"
            f" is {node} a RabbitMQ AMQP port?"
        )


class ChannelRefused(BrokerError):
    """The broker refused a method (a passive declare of something missing: 404) and closed
    the channel; ``reply_code`` and ``reply_text`` are its answer."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        super().__init__(f"{reply_code} {reply_text}")
