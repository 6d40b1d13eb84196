"""Errors the broker sends on a channel: all are ``PublishError`` so one ``except`` catches them."""

from __future__ import annotations

from rabbitry.errors import PublishError


class ChannelClosed(PublishError):
    """The broker closed the channel because of this message (``reply_code`` says why)."""

    def __init__(self, message: str, reply_code: int = 0) -> None:
        self.reply_code = reply_code
        super().__init__(message)


class ExchangeNotFound(ChannelClosed):
    """The message was published to an exchange that does not exist (404 NOT_FOUND)."""


class AccessRefused(ChannelClosed):
    """The user may not publish to this exchange (403 ACCESS_REFUSED)."""
