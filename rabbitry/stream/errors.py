"""The stream protocol's errors, under rabbitry's ``BrokerError``."""

from __future__ import annotations

from rabbitry.errors import BrokerError

__all__ = ["StreamProtocolError", "StreamRefused", "StreamUnavailable"]


class StreamProtocolError(BrokerError):
    """Bytes from the broker that are no valid stream-protocol frame or stored message."""


class StreamRefused(BrokerError):
    """The broker answered a stream-protocol request with an error code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class StreamUnavailable(BrokerError):
    """No stream protocol where it was looked for (no plugin, port closed, handshake failed)."""
