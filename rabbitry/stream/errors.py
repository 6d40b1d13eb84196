"""The stream protocol's errors, under rabbitry's ``BrokerError``."""

from __future__ import annotations

from rabbitry.errors import BrokerError

__all__ = ["OtherBroker", "StreamProtocolError", "StreamRefused", "StreamUnavailable"]


class StreamProtocolError(BrokerError):
    """Bytes from the broker that are no valid stream-protocol frame or stored message."""


class StreamRefused(BrokerError):
    """The broker answered a stream-protocol request with an error code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class StreamUnavailable(BrokerError):
    """No stream protocol where it was looked for (no plugin, port closed, handshake failed)."""


class OtherBroker(BrokerError):
    """The stream port answers for another cluster than the AMQP URL reaches: another broker
    on that host, where the same credentials would read or write the wrong streams."""

    def __init__(self, message: str, *, amqp_cluster: str, stream_cluster: str) -> None:
        super().__init__(message)
        self.amqp_cluster = amqp_cluster
        self.stream_cluster = stream_cluster
