"""AMQP 1.0 messages as stream entries: the few sections RabbitMQ stores, to bytes and back.

A stream keeps each message in the AMQP 1.0 format, whichever protocol published it: a message
published over AMQP 0-9-1 is stored with its routing key and exchange in the message
annotations (``x-routing-key``, ``x-exchange``), its basic properties in the header and
properties sections (``type`` and ``app_id`` as ``x-basic-type``/``x-basic-app-id``
annotations), its headers as application properties and its body as data sections.
``decode`` reads that back into a ``Decoded`` (the fields rabbitry's rows need); ``encode``
writes a message the same way, so an AMQP 0-9-1 consumer of the stream sees what the sink
wrote. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Mapping
from typing import Any

from rabbitry.errors import StreamProtocolError
from rabbitry.stream.amqp10_types import EPOCH, typed, value_at

__all__ = ["Decoded", "decode", "encode", "encode_string"]

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
PROPERTIES, APPLICATION_PROPERTIES, DATA = 0x73, 0x74, 0x75
AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x76, 0x77, 0x78

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_U32U32 = struct.Struct(">II")


class Decoded:
    """One stored message, as the source's rows see it (a plain class with slots: one is made
    per message read)."""

    __slots__ = ("body", "headers", "properties", "routing_key")

    def __init__(self) -> None:
        self.body: bytes = b""
        self.routing_key: str | None = None
        self.headers: dict[str, Any] = _NO_HEADERS
        self.properties: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (
            f"Decoded(body={len(self.body)} bytes, routing_key={self.routing_key!r},"
            f" headers={self.headers!r}, properties={self.properties!r})"
        )


_NO_HEADERS: dict[str, Any] = {}
"""Shared by every message without headers: read it, never change it."""


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


Effect = tuple[tuple[tuple[str, Any], ...], str | None, dict[Any, Any] | None]
"""What a section gives a message: properties, a routing key, headers (None: not given)."""

_EFFECTS: dict[bytes, Effect] = {}
_EFFECTS_SIZE = 4096


def _effect(section: int, value: Any) -> Effect:
    props: list[tuple[str, Any]] = []
    routing_key: str | None = None
    headers: dict[Any, Any] | None = None
    if section == HEADER and isinstance(value, list):
        fields = value + [None] * (3 - len(value))
        if fields[0] is not None:
            props.append(("delivery_mode", 2 if fields[0] else 1))
        if fields[1] is not None:
            props.append(("priority", fields[1]))
        if fields[2] is not None:
            props.append(("expiration", str(fields[2])))
    elif section == MESSAGE_ANNOTATIONS and isinstance(value, dict):
        routing_key = _text(value.get("x-routing-key"))
        for key, name in (
            ("x-basic-type", "type"),
            ("x-basic-app-id", "app_id"),
            ("x-basic-expiration", "expiration"),
        ):
            if key in value:
                props.append((name, _text(value[key])))
    elif section == APPLICATION_PROPERTIES and isinstance(value, dict):
        headers = value
    return tuple(props), routing_key, headers


def section_effect(buf: memoryview, section: int, pos: int) -> tuple[Effect, int]:
    """A section's effect, worked out once per distinct encoding: the messages of one
    publisher mostly repeat their header, annotations and application properties byte for
    byte, and decoding them is most of the cost of reading a stream in Python."""
    code = buf[pos]
    if code in (0xC0, 0xC1):
        end = pos + 2 + buf[pos + 1]
    elif code in (0xD0, 0xD1):
        end = pos + 5 + _U32.unpack_from(buf, pos + 1)[0]
    else:
        value, after = value_at(buf, pos)
        return _effect(section, value), after
    key = bytes((section,)) + bytes(buf[pos:end])
    found = _EFFECTS.get(key)
    if found is None:
        value, after = value_at(buf, pos)
        if after != end:
            raise StreamProtocolError(f"AMQP 1.0 section 0x{section:02x}: its size is wrong")
        if len(_EFFECTS) >= _EFFECTS_SIZE:
            _EFFECTS.clear()
        found = _EFFECTS[key] = _effect(section, value)
    return found, end


# The properties section's fields, by position: the row's name for those it keeps.
PROPERTY_SLOTS = (
    "message_id",
    "user_id",
    None,  # to
    None,  # subject
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    None,  # absolute-expiry-time
    "timestamp",  # creation-time
    None,  # group-id
    None,  # group-sequence
    None,  # reply-to-group-id
)


def properties_list(buf: memoryview, pos: int) -> tuple[int, int]:
    """The properties section's list at ``pos``: how many fields, where the first starts."""
    code = buf[pos]
    if code == 0x45:
        return 0, pos + 1
    if code == 0xC0:
        return buf[pos + 2], pos + 3
    if code == 0xD0:
        return int(_U32.unpack_from(buf, pos + 5)[0]), pos + 9
    raise StreamProtocolError(f"AMQP 1.0 properties: a list was expected, not 0x{code:02x}")


def _properties(buf: memoryview, pos: int, props: dict[str, Any]) -> int:
    """Read the properties section (decoded each time: message ids and creation times make
    each one differ), the usual types inline."""
    count, pos = properties_list(buf, pos)
    slots = PROPERTY_SLOTS
    for i in range(count):
        c = buf[pos]
        if c == 0x40:
            pos += 1
            continue
        if c == 0xA1 or c == 0xA3:
            size = buf[pos + 1]
            value: Any = str(buf[pos + 2 : pos + 2 + size], "utf-8", "replace")
            pos += 2 + size
        elif c == 0x83:
            ms = _I64.unpack_from(buf, pos + 1)[0]
            value = EPOCH + dt.timedelta(milliseconds=ms)
            pos += 9
        else:
            value, pos = typed(buf, c, pos + 1)
        name = slots[i] if i < len(slots) else None
        if name is not None:
            props[name] = value if name == "timestamp" else _text(value)
    return int(pos)


def decode(record: bytes | memoryview) -> Decoded:
    """The message stored as ``record`` (its AMQP 1.0 sections, in order)."""
    buf = memoryview(record)
    out = Decoded()
    body: list[bytes] = []
    pos, end = 0, len(buf)
    props = out.properties
    try:
        while pos < end:
            if buf[pos] != 0x00:
                raise StreamProtocolError(f"AMQP 1.0 message: no section at byte {pos}")
            if buf[pos + 1] == 0x53:
                section = buf[pos + 2]
                pos += 3
            else:
                descriptor, pos = value_at(buf, pos + 1)
                section = descriptor if isinstance(descriptor, int) else -1
            if section == DATA:
                code = buf[pos]
                if code == 0xA0:
                    size = buf[pos + 1]
                    body.append(bytes(buf[pos + 2 : pos + 2 + size]))
                    pos += 2 + size
                else:
                    size = _U32.unpack_from(buf, pos + 1)[0]
                    body.append(bytes(buf[pos + 5 : pos + 5 + size]))
                    pos += 5 + size
            elif section == PROPERTIES:
                pos = _properties(buf, pos, props)
            elif section == AMQP_VALUE:
                value, pos = value_at(buf, pos)
                body.append(value if isinstance(value, bytes) else str(value).encode())
            else:
                (given, routing_key, headers), pos = section_effect(buf, section, pos)
                if given:
                    props.update(given)
                if routing_key is not None:
                    out.routing_key = routing_key
                if headers is not None:
                    out.headers = dict(headers)  # the cached one is shared
    except (IndexError, struct.error) as exc:
        raise StreamProtocolError(f"AMQP 1.0 message cut short ({exc})") from None
    out.body = body[0] if len(body) == 1 else b"".join(body)
    return out


# --- encoding -----------------------------------------------------------------------------------


def encode_string(value: str, small: int = 0xA1, large: int = 0xB1) -> bytes:
    """One AMQP 1.0 string: str8 under 256 bytes, else str32 (sym8/sym32 with ``small`` 0xA3
    and ``large`` 0xB3)."""
    raw = value.encode()
    if len(raw) < 256:
        return bytes((small, len(raw))) + raw
    return bytes((large,)) + _U32.pack(len(raw)) + raw


def _binary(raw: bytes) -> bytes:
    if len(raw) < 256:
        return bytes((0xA0, len(raw))) + raw
    return b"\xb0" + _U32.pack(len(raw)) + raw


def _encode_value(value: Any) -> bytes:
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, int):
        return b"\x81" + _I64.pack(value)
    if isinstance(value, float):
        return b"\x82" + _F64.pack(value)
    if isinstance(value, str):
        return encode_string(value)
    if isinstance(value, bytes | bytearray):
        return _binary(bytes(value))
    if isinstance(value, dt.datetime):
        return b"\x83" + _I64.pack(int(value.timestamp() * 1000))
    return encode_string(str(value))


def _list(items: list[bytes]) -> bytes:
    payload = b"".join(items)
    return b"\xd0" + _U32U32.pack(len(payload) + 4, len(items)) + payload


def _map(pairs: Mapping[str, Any], key: Any = None) -> bytes:
    items = []
    for k, v in pairs.items():
        items.append(encode_string(k, 0xA3, 0xB3) if key == "symbol" else encode_string(k))
        items.append(_encode_value(v))
    payload = b"".join(items)
    return b"\xd1" + _U32U32.pack(len(payload) + 4, len(items)) + payload


_DURABLE_HEADER = b"\x00\x53\x70" + _list([b"\x41"])
_ANNOTATIONS: dict[str, bytes] = {}
_NULL = b"\x40"


def _annotations(routing_key: str) -> bytes:
    """The message annotations naming ``routing_key``: the same for most rows of a write."""
    found = _ANNOTATIONS.get(routing_key)
    if found is None:
        if len(_ANNOTATIONS) >= 1024:
            _ANNOTATIONS.clear()
        found = _ANNOTATIONS[routing_key] = b"\x00\x53\x72" + _map(
            {"x-routing-key": routing_key}, key="symbol"
        )
    return found


def encode(
    body: bytes,
    *,
    message_id: str | None = None,
    correlation_id: str | None = None,
    content_type: str | None = None,
    headers: Mapping[str, Any] | None = None,
    routing_key: str | None = None,
    timestamp: dt.datetime | None = None,
) -> bytes:
    """A durable message as a stream stores it (read back by ``decode``, and by AMQP 0-9-1
    consumers as basic properties, headers and body)."""
    parts = [_DURABLE_HEADER]
    if routing_key is not None:
        parts.append(_annotations(routing_key))
    fields: list[bytes] = [
        encode_string(message_id) if message_id is not None else _NULL,
        _NULL,
        _NULL,
        _NULL,
        _NULL,
        encode_string(correlation_id) if correlation_id is not None else _NULL,
        encode_string(content_type, 0xA3, 0xB3) if content_type is not None else _NULL,
    ]
    if timestamp is not None:
        fields += [_NULL, _NULL, _encode_value(timestamp)]
    while fields and fields[-1] == _NULL:
        fields.pop()
    if fields:
        parts.append(b"\x00\x53\x73")
        parts.append(_list(fields))
    if headers:
        parts.append(b"\x00\x53\x74")
        parts.append(_map(headers))
    parts.append(b"\x00\x53\x75\xb0")
    parts.append(_U32.pack(len(body)))
    parts.append(body)
    return b"".join(parts)
