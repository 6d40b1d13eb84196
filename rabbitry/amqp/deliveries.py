"""Deliveries read straight off the wire: a ``basic.deliver`` method, its content header and
body frames, without a general-purpose decoder.

The deliver fields are read by offset (``parse_deliver``), the properties are kept as their wire
bytes (decoded on demand by ``properties.decode_properties``), a single-frame body is taken as
it is. ``consuming.ConsumingSession`` finds the frames and keeps the delivery in progress
itself: a method call per frame, or an object per delivery, would cost a sixth of the parse.
Pure: no I/O.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

_U64 = struct.Struct(">Q")

CONTENT_HEADER = struct.Struct(">HHQH")
"""The head of a content header's payload: class, weight, body size, property flags; the
properties' bytes follow it."""

DeliverFields: TypeAlias = tuple[int, str, bool, str, str]
"""Delivery tag, consumer tag, redelivered, exchange and routing key of a ``basic.deliver``."""


def parse_deliver(payload: bytes | bytearray, p: int) -> DeliverFields:
    """The fields of a ``basic.deliver`` whose arguments start at ``p`` (after class and
    method)."""
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
