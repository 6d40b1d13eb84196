"""The AMQP 1.0 type system, read: a value from its constructor byte, for every type a stored
message's sections may hold (``amqp10.decode``'s slow path and the sections' effects). Pure:
no I/O.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from typing import Any

from rabbitry.errors import StreamProtocolError

__all__ = ["EPOCH", "typed", "value_at"]

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def value_at(buf: memoryview, pos: int) -> tuple[Any, int]:
    """The value whose constructor is at ``pos``, and the position after it."""
    return typed(buf, buf[pos], pos + 1)


def typed(buf: memoryview, code: int, pos: int) -> tuple[Any, int]:
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


def _fixed(layout: str) -> Read:
    st = struct.Struct(layout)
    unpack, size = st.unpack_from, st.size
    return lambda buf, pos: (unpack(buf, pos)[0], pos + size)


def _described(buf: memoryview, pos: int) -> tuple[Any, int]:
    _, pos = value_at(buf, pos)  # the descriptor is dropped
    return value_at(buf, pos)


def _byte(buf: memoryview, pos: int) -> tuple[Any, int]:
    return buf[pos], pos + 1


def _signed_byte(buf: memoryview, pos: int) -> tuple[Any, int]:
    b = buf[pos]
    return (b - 256 if b > 127 else b), pos + 1


def _bool(buf: memoryview, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _timestamp(buf: memoryview, pos: int) -> tuple[Any, int]:
    ms = _I64.unpack_from(buf, pos)[0]  # milliseconds since the epoch
    return EPOCH + dt.timedelta(milliseconds=ms), pos + 8


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


def _array(layout: str) -> Read:
    head = struct.Struct(layout)  # the array's size and count

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        _, count = head.unpack_from(buf, pos)
        pos += head.size
        element = buf[pos]  # one constructor for every element
        pos += 1
        out = []
        for _ in range(count):
            item, pos = typed(buf, element, pos)
            out.append(item)
        return out, pos

    return read


def _opaque(size: int) -> Read:
    return lambda buf, pos: (bytes(buf[pos : pos + size]), pos + size)


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
    0x60: _fixed(">H"),
    0x61: _fixed(">h"),
    0x70: _fixed(">I"),
    0x71: _fixed(">i"),
    0x80: _fixed(">Q"),
    0x81: _fixed(">q"),
    0x72: _fixed(">f"),
    0x82: _fixed(">d"),
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
    0xE0: _array(">BB"),
    0xF0: _array(">II"),
    0x74: _opaque(4),
    0x84: _opaque(8),
    0x94: _opaque(16),
}.items():
    _READERS[_code] = _reader


def _key(value: Any) -> Any:
    return value if isinstance(value, str | int) else str(value)
