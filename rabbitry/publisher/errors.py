"""Publisher-specific errors; all are ``PublishError`` so one ``except`` catches every failure."""

from __future__ import annotations

from typing import Any

from rabbitry.errors import PublishError


class ConnectionLost(PublishError):
    """The connection broke and did not come back in time; the message may or may not be stored."""

    deliveries: list[Any]
    """For ``publish_many``: every message sent so far, each with its outcome."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.deliveries = []


class PublisherClosed(PublishError):
    """The publisher was closed before the message was confirmed."""
