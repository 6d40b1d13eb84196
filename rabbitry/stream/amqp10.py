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
import uuid
from collections.abc import Mapping
from typing import Any

from rabbitry.stream.errors import StreamProtocolError

__all__ = ["Decoded", "decode", "encode"]

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
PROPERTIES, APPLICATION_PROPERTIES, DATA = 0x73, 0x74, 0x75
AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x76, 0x77, 0x78

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_U8U8 = struct.Struct(">BB")
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


def _value(buf: memoryview, pos: int) -> tuple[Any, int]:
    """The value whose constructor is at ``pos``, and the position after it."""
    return _typed(buf, buf[pos], pos + 1)


def _typed(buf: memoryview, code: int, pos: int) -> tuple[Any, int]:
    """The value of type ``code`` whose encoding starts at ``pos``, and the position after it."""
    read = _READERS[code]
    if read is None:
        raise StreamProtocolError(f"AMQP 1.0 message: unknown type code 0x{code:02x} at {pos - 1}")
    value, after = read(buf, pos)
    return value, int(after)


Read = Any  # Callable[[memoryview, int], tuple[Any, int]]
_READERS: list[Read | None] = [None] * 256


def _const(value: Any) -> Read:
    return lambda buf, pos: (value, pos)


def _fixed(st: struct.Struct) -> Read:
    unpack, size = st.unpack_from, st.size
    return lambda buf, pos: (unpack(buf, pos)[0], pos + size)


def _described(buf: memoryview, pos: int) -> tuple[Any, int]:
    _, pos = _value(buf, pos)  # the descriptor is dropped
    return _value(buf, pos)


def _byte(buf: memoryview, pos: int) -> tuple[Any, int]:
    return buf[pos], pos + 1


def _signed_byte(buf: memoryview, pos: int) -> tuple[Any, int]:
    b = buf[pos]
    return (b - 256 if b > 127 else b), pos + 1


def _bool(buf: memoryview, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _timestamp(buf: memoryview, pos: int) -> tuple[Any, int]:
    ms = _I64.unpack_from(buf, pos)[0]  # milliseconds since the epoch
    return _EPOCH + dt.timedelta(milliseconds=ms), pos + 8


def _uuid(buf: memoryview, pos: int) -> tuple[Any, int]:
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _char(buf: memoryview, pos: int) -> tuple[Any, int]:
    return chr(_U32.unpack_from(buf, pos)[0]), pos + 4


def _bin8(buf: memoryview, pos: int) -> tuple[Any, int]:
    end = pos + 1 + buf[pos]
    return bytes(buf[pos + 1 : end]), end


def _str8(buf: memoryview, pos: int) -> tuple[Any, int]:
    end = pos + 1 + buf[pos]
    return str(buf[pos + 1 : end], "utf-8", "replace"), end


def _bin32(buf: memoryview, pos: int) -> tuple[Any, int]:
    end = pos + 4 + _U32.unpack_from(buf, pos)[0]
    return bytes(buf[pos + 4 : end]), end


def _str32(buf: memoryview, pos: int) -> tuple[Any, int]:
    end = pos + 4 + _U32.unpack_from(buf, pos)[0]
    return str(buf[pos + 4 : end], "utf-8", "replace"), end


def _items(buf: memoryview, pos: int, count: int) -> tuple[list[Any], int]:
    readers = _READERS
    items = []
    for _ in range(count):
        read = readers[buf[pos]]
        if read is None:
            raise StreamProtocolError(f"AMQP 1.0 message: unknown type code 0x{buf[pos]:02x}")
        item, pos = read(buf, pos + 1)
        items.append(item)
    return items, pos


def _list8(buf: memoryview, pos: int) -> tuple[Any, int]:
    return _items(buf, pos + 2, buf[pos + 1])


def _list32(buf: memoryview, pos: int) -> tuple[Any, int]:
    return _items(buf, pos + 8, _U32.unpack_from(buf, pos + 4)[0])


def _pairs(items: list[Any]) -> dict[Any, Any]:
    return {_key(k): v for k, v in zip(items[::2], items[1::2], strict=True)}


def _map8(buf: memoryview, pos: int) -> tuple[Any, int]:
    items, pos = _list8(buf, pos)
    return _pairs(items), pos


def _map32(buf: memoryview, pos: int) -> tuple[Any, int]:
    items, pos = _list32(buf, pos)
    return _pairs(items), pos


def _array(head: struct.Struct) -> Read:
    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        _, count = head.unpack_from(buf, pos)
        pos += head.size
        element = buf[pos]  # one constructor for every element
        pos += 1
        out = []
        for _ in range(count):
            item, pos = _typed(buf, element, pos)
            out.append(item)
        return out, pos

    return read


def _opaque(size: int) -> Read:
    return lambda buf, pos: (bytes(buf[pos : pos + size]), pos + size)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
for _code, _reader in {
    0x00: _described,
    0x40: _const(None),
    0x41: _const(True),
    0x42: _const(False),
    0x43: _const(0),
    0x44: _const(0),
    0x45: _const([]),
    0x56: _bool,
    0x50: _byte,
    0x52: _byte,
    0x53: _byte,
    0x51: _signed_byte,
    0x54: _signed_byte,
    0x55: _signed_byte,
    0x60: _fixed(_U16),
    0x61: _fixed(struct.Struct(">h")),
    0x70: _fixed(_U32),
    0x71: _fixed(_I32),
    0x80: _fixed(_U64),
    0x81: _fixed(_I64),
    0x72: _fixed(_F32),
    0x82: _fixed(_F64),
    0x83: _timestamp,
    0x98: _uuid,
    0x73: _char,
    0xA0: _bin8,
    0xA1: _str8,
    0xA3: _str8,
    0xB0: _bin32,
    0xB1: _str32,
    0xB3: _str32,
    0xC0: _list8,
    0xD0: _list32,
    0xC1: _map8,
    0xD1: _map32,
    0xE0: _array(_U8U8),
    0xF0: _array(_U32U32),
    0x74: _opaque(4),
    0x84: _opaque(8),
    0x94: _opaque(16),
}.items():
    _READERS[_code] = _reader


def _key(value: Any) -> Any:
    return value if isinstance(value, str | int) else str(value)


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
        value, after = _value(buf, pos)
        return _effect(section, value), after
    key = bytes((section,)) + bytes(buf[pos:end])
    found = _EFFECTS.get(key)
    if found is None:
        value, after = _value(buf, pos)
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


def _properties(buf: memoryview, pos: int, props: dict[str, Any]) -> int:
    """Read the properties section (decoded each time: message ids and creation times make
    each one differ), the usual types inline."""
    code = buf[pos]
    if code == 0x45:
        return pos + 1
    if code == 0xC0:
        count, pos = buf[pos + 2], pos + 3
    elif code == 0xD0:
        count, pos = _U32.unpack_from(buf, pos + 5)[0], pos + 9
    else:
        raise StreamProtocolError(f"AMQP 1.0 properties: a list was expected, not 0x{code:02x}")
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
            value = _EPOCH + dt.timedelta(milliseconds=ms)
            pos += 9
        else:
            value, pos = _typed(buf, c, pos + 1)
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
                descriptor, pos = _value(buf, pos + 1)
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
                value, pos = _value(buf, pos)
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


def _str(value: str, small: int = 0xA1, large: int = 0xB1) -> bytes:
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
        return _str(value)
    if isinstance(value, bytes | bytearray):
        return _binary(bytes(value))
    if isinstance(value, dt.datetime):
        return b"\x83" + _I64.pack(int(value.timestamp() * 1000))
    return _str(str(value))


def _list(items: list[bytes]) -> bytes:
    payload = b"".join(items)
    return b"\xd0" + _U32U32.pack(len(payload) + 4, len(items)) + payload


def _map(pairs: Mapping[str, Any], key: Any = None) -> bytes:
    items = []
    for k, v in pairs.items():
        items.append(_str(k, 0xA3, 0xB3) if key == "symbol" else _str(k))
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
        _str(message_id) if message_id is not None else _NULL,
        _NULL,
        _NULL,
        _NULL,
        _NULL,
        _str(correlation_id) if correlation_id is not None else _NULL,
        _str(content_type, 0xA3, 0xB3) if content_type is not None else _NULL,
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
