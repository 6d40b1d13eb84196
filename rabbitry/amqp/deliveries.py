"""Deliveries read straight off the wire: a ``basic.deliver`` method, its content header and
body frames, assembled into one ``RawDelivery``, without a general-purpose decoder.

The deliver fields are read by offset, the properties are kept as their wire bytes (decoded on
demand by ``properties.decode_properties``), a single-frame body is taken as it is. A consuming
session finds the frames (it owns the read loop, heartbeats and confirms) and hands each of a
delivery's three parts to a ``DeliveryAssembler``. Pure: no I/O.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_U64 = struct.Struct(">Q")
_CONTENT = struct.Struct(">HHQH")  # class, weight, body size, property flags
_PROPERTIES_AT = _CONTENT.size


class RawDelivery(NamedTuple):
    """One delivered message as the wire gave it."""

    delivery_tag: int
    consumer_tag: str
    redelivered: bool
    exchange: str
    routing_key: str
    flags: int
    """The content header's property flags (``properties.PROPERTY_BITS``)."""
    properties: bytes
    """The properties' wire bytes, for ``properties.decode_properties``."""
    body: bytes


class DeliveryAssembler:
    """The one delivery in progress on a channel; ``pending`` while its content is due."""

    __slots__ = ("_flags", "_method", "_parts", "_properties", "_size", "pending")

    def __init__(self) -> None:
        self.pending = False
        """A ``basic.deliver`` came and its content header or body frames are due."""
        self._method: tuple[int, str, bool, str, str] | None = None
        self._flags = 0
        self._properties = b""
        self._size = 0
        self._parts: list[bytes] = []

    def deliver(self, payload: bytes | bytearray, offset: int) -> None:
        """A ``basic.deliver`` whose arguments start at ``offset`` (after class and method)."""
        self._method = parse_deliver(payload, offset)
        self.pending = True

    def header(self, payload: bytes | bytearray, start: int, stop: int) -> RawDelivery | None:
        """The content header in ``payload[start:stop]``; the delivery when it has no body."""
        _, _, size, flags = _CONTENT.unpack_from(payload, start)
        self._flags = flags
        self._properties = bytes(payload[start + _PROPERTIES_AT : stop])
        self._size = size
        self._parts = []
        return self._done() if size == 0 else None

    def body(self, piece: bytes) -> RawDelivery | None:
        """One body frame's payload; the delivery when it was the last."""
        self._parts.append(piece)
        self._size -= len(piece)
        return self._done() if self._size <= 0 else None

    def drop(self) -> None:
        """The channel closed: the delivery in progress went back to its queue."""
        self.pending = False
        self._method = None
        self._parts = []

    def _done(self) -> RawDelivery:
        method = self._method
        assert method is not None
        self._method = None
        self.pending = False
        parts = self._parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        tag, consumer_tag, redelivered, exchange, key = method
        return RawDelivery(
            tag, consumer_tag, redelivered, exchange, key, self._flags, self._properties, body
        )


def parse_deliver(payload: bytes | bytearray, p: int) -> tuple[int, str, bool, str, str]:
    """Delivery tag, consumer tag, redelivered, exchange and routing key of a ``basic.deliver``
    whose arguments start at ``p``."""
    n = payload[p]
    consumer_tag = bytes(payload[p + 1 : p + 1 + n]).decode()
    p += 1 + n
    tag = _U64.unpack_from(payload, p)[0]
    redelivered = bool(payload[p + 8] & 1)
    p += 9
    n = payload[p]
    exchange = bytes(payload[p + 1 : p + 1 + n]).decode()
    p += 1 + n
    n = payload[p]
    key = bytes(payload[p + 1 : p + 1 + n]).decode()
    return tag, consumer_tag, redelivered, exchange, key
