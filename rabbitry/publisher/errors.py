"""Publisher-specific errors; all are ``PublishError`` so one ``except`` catches every failure."""

from __future__ import annotations

from rabbitry.errors import PublishError


class PublisherClosed(PublishError):
    """The publisher was closed before the message was confirmed."""
