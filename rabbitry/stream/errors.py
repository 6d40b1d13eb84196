"""The stream protocol's errors under their old home: they are defined in ``rabbitry.errors``,
under its ``BrokerError``."""

from __future__ import annotations

from rabbitry.errors import OtherBroker, StreamProtocolError, StreamRefused, StreamUnavailable

__all__ = ["OtherBroker", "StreamProtocolError", "StreamRefused", "StreamUnavailable"]
