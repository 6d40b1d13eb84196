"""The 14 basic properties of a content header, in one table both directions read.

The publisher's frames (``frames.PROPERTY_FLAGS``) take each property's flag bit from here, and
``decode_properties`` reads a delivery's property bytes with the same slots and types, so the
two can never disagree on where a property sits or how it is encoded.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import decode

SHORTSTR = "s"
OCTET = "o"
TIMESTAMP = "q"
TABLE = "t"

BASIC_PROPERTIES: tuple[tuple[str, str, str], ...] = (
    ("content_type", "content type", SHORTSTR),
    ("content_encoding", "content encoding", SHORTSTR),
    ("headers", "headers", TABLE),
    ("delivery_mode", "delivery mode", OCTET),
    ("priority", "priority", OCTET),
    ("correlation_id", "correlation id", SHORTSTR),
    ("reply_to", "reply-to", SHORTSTR),
    ("expiration", "expiration", SHORTSTR),
    ("message_id", "message id", SHORTSTR),
    ("timestamp", "timestamp", TIMESTAMP),
    ("type", "message type", SHORTSTR),
    ("user_id", "user id", SHORTSTR),
    ("app_id", "app id", SHORTSTR),
    ("cluster_id", "cluster id", SHORTSTR),
)
"""Each property in wire order (the first in the highest flag bit): its name in a decoded
delivery, its name in errors, and its type (short string, octet, 64-bit timestamp, field
table)."""

PROPERTY_BITS = {name: 1 << (15 - slot) for slot, (name, _, _) in enumerate(BASIC_PROPERTIES)}
"""The flag bit of each property by its decoded name."""

PROPERTY_FLAGS = {label: 1 << (15 - slot) for slot, (_, label, _) in enumerate(BASIC_PROPERTIES)}
"""The flag bit of each property by the name errors give it."""

_DECODED = tuple((PROPERTY_BITS[name], name, kind) for name, _, kind in BASIC_PROPERTIES)
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


def decode_properties(flags: int, raw: bytes) -> dict[str, Any]:
    """The basic properties present in ``flags``, from their wire bytes."""
    out: dict[str, Any] = {}
    offset = 0
    for bit, name, kind in _DECODED:
        if not flags & bit:
            continue
        if kind == SHORTSTR:
            size = raw[offset]
            out[name] = raw[offset + 1 : offset + 1 + size].decode("utf-8", "replace")
            offset += 1 + size
        elif kind == OCTET:
            out[name] = raw[offset]
            offset += 1
        elif kind == TIMESTAMP:
            out[name] = _U64.unpack_from(raw, offset)[0]
            offset += 8
        else:
            size = _U32.unpack_from(raw, offset)[0]
            _, table = decode.field_table(raw[offset : offset + 4 + size])
            out[name] = table
            offset += 4 + size
    return out
