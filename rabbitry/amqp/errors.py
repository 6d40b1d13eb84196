"""The client layer's errors under their old home: they are defined in ``rabbitry.errors``.

All but ``ChannelRefused`` and ``FrameError`` are ``PublishError`` so one ``except`` around
publishing catches every failure; ``ConnectionLost`` is a ``BrokerError`` too, which is what a
worker that gives up raises. ``ChannelRefused`` is what ``amqp.channel`` raises for a method the
broker refused; ``FrameError`` is what every client raises for bytes that are no AMQP frame.
"""

from __future__ import annotations

from rabbitry.errors import (
    AccessRefused,
    ChannelClosed,
    ChannelRefused,
    ConnectionLost,
    ExchangeNotFound,
    FrameError,
)

__all__ = [
    "AccessRefused",
    "ChannelClosed",
    "ChannelRefused",
    "ConnectionLost",
    "ExchangeNotFound",
    "FrameError",
]
