"""The stream protocol's frames (RabbitMQ's ``rabbitmq_stream`` plugin, PROTOCOL.adoc), to
bytes and back: only the commands rabbitry speaks. Pure: no I/O.

A frame is ``size:uint32`` then ``key:uint16 version:uint16`` and the command's fields; a
response has the request's key with the high bit set, its correlation id and a response code.
Strings are ``int16`` length + UTF-8, bytes ``int32`` length + data, arrays ``int32`` count.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Iterable, Sequence

from rabbitry.errors import StreamProtocolError

__all__ = ["Chunk", "Key", "OffsetSpec", "ResponseCode", "chunk_records", "frame"]


class Key(enum.IntEnum):
    DECLARE_PUBLISHER = 0x0001
    PUBLISH = 0x0002
    PUBLISH_CONFIRM = 0x0003
    PUBLISH_ERROR = 0x0004
    QUERY_PUBLISHER_SEQUENCE = 0x0005
    DELETE_PUBLISHER = 0x0006
    SUBSCRIBE = 0x0007
    DELIVER = 0x0008
    CREDIT = 0x0009
    STORE_OFFSET = 0x000A
    QUERY_OFFSET = 0x000B
    UNSUBSCRIBE = 0x000C
    METADATA = 0x000F
    METADATA_UPDATE = 0x0010
    PEER_PROPERTIES = 0x0011
    SASL_HANDSHAKE = 0x0012
    SASL_AUTHENTICATE = 0x0013
    TUNE = 0x0014
    OPEN = 0x0015
    CLOSE = 0x0016
    HEARTBEAT = 0x0017
    ROUTE = 0x0018
    PARTITIONS = 0x0019


RESPONSE = 0x8000


class ResponseCode(enum.IntEnum):
    OK = 1
    STREAM_DOES_NOT_EXIST = 2
    SUBSCRIPTION_ID_ALREADY_EXISTS = 3
    SUBSCRIPTION_ID_DOES_NOT_EXIST = 4
    STREAM_ALREADY_EXISTS = 5
    STREAM_NOT_AVAILABLE = 6
    SASL_MECHANISM_NOT_SUPPORTED = 7
    AUTHENTICATION_FAILURE = 8
    SASL_ERROR = 9
    SASL_CHALLENGE = 10
    SASL_AUTHENTICATION_FAILURE_LOOPBACK = 11
    VIRTUAL_HOST_ACCESS_FAILURE = 12
    UNKNOWN_FRAME = 13
    FRAME_TOO_LARGE = 14
    INTERNAL_ERROR = 15
    ACCESS_REFUSED = 16
    PRECONDITION_FAILED = 17
    PUBLISHER_DOES_NOT_EXIST = 18
    NO_OFFSET = 19


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name.lower().replace("_", " ")
    except ValueError:
        return f"code {code}"


class OffsetSpec(enum.IntEnum):
    FIRST = 1
    LAST = 2
    NEXT = 3
    OFFSET = 4
    TIMESTAMP = 5


_HEAD = struct.Struct(">IHH")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_PUBLISHED = struct.Struct(">QI")
_CHUNK = struct.Struct(">bbHIqQQiIII")
CHUNK_HEADER = _CHUNK.size


def string(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 32767:
        raise ValueError(f"{value[:40]!r}...: longer than the stream protocol's strings")
    return _U16.pack(len(raw)) + raw


def string_map(pairs: dict[str, str]) -> bytes:
    return _U32.pack(len(pairs)) + b"".join(string(k) + string(v) for k, v in pairs.items())


def frame(key: int, body: bytes, version: int = 1) -> bytes:
    return _HEAD.pack(len(body) + 4, key, version) + body


def publish(publisher_id: int, messages: Sequence[tuple[int, bytes]]) -> bytes:
    """One publish frame of ``(publishing id, message)`` pairs."""
    pack = _PUBLISHED.pack
    entries = b"".join(pack(i, len(message)) + message for i, message in messages)
    return publish_head(publisher_id, len(messages), len(entries)) + entries


def publish_head(publisher_id: int, count: int, size: int) -> bytes:
    """What comes before ``count`` publish entries of ``size`` bytes in all (``publishing
    id:u64, size:u32, message`` each, back to back) to make a publish frame of them."""
    return _HEAD.pack(size + 9, Key.PUBLISH, 1) + bytes((publisher_id,)) + _U32.pack(count)


class Reader:
    """Fields of a frame's body, read in order."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def u8(self) -> int:
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def _unsigned(self, field: struct.Struct) -> int:
        value: int = field.unpack_from(self.buf, self.pos)[0]
        self.pos += field.size
        return value

    def u16(self) -> int:
        return self._unsigned(_U16)

    def u32(self) -> int:
        return self._unsigned(_U32)

    def u64(self) -> int:
        return self._unsigned(_U64)

    def string(self) -> str:
        size = self.u16()
        if size == 0xFFFF:
            return ""
        raw = bytes(self.buf[self.pos : self.pos + size])
        self.pos += size
        return raw.decode("utf-8", "replace")

    def string_map(self) -> dict[str, str]:
        return {self.string(): self.string() for _ in range(self.u32())}

    def strings(self) -> list[str]:
        return [self.string() for _ in range(self.u32())]

    def rest(self) -> memoryview:
        return self.buf[self.pos :]


class Chunk:
    """One delivered chunk: its first offset, its timestamp (ms) and its records in order.

    Made from a Deliver frame (``chunk_records``), a chunk keeps the frame's entries and
    cuts them into records only when ``records`` is first read: a reader that takes the
    entries whole (``plain_entries``) pays nothing per record here. ``cut`` keeps a range of
    offsets without reading the entries either.
    """

    __slots__ = ("_entries", "_records", "_skip", "count", "first_offset", "size",
                 "subscription_id", "timestamp_ms")  # fmt: skip

    def __init__(
        self,
        subscription_id: int,
        first_offset: int,
        timestamp_ms: int,
        records: list[memoryview] | None = None,
        *,
        entries: tuple[memoryview, int] | None = None,
        skip: int = 0,
        count: int | None = None,
    ) -> None:
        self.subscription_id = subscription_id
        self.first_offset = first_offset
        """The offset of the first record kept."""
        self.timestamp_ms = timestamp_ms
        self._records = records
        self._entries = entries
        """(entries as sent, how many) when made from a frame; the records kept are the
        ``count`` from record ``_skip`` on."""
        self._skip = skip
        if count is None:
            count = len(records) if records is not None else 0
        self.count = count
        """How many records this chunk holds (after a ``cut``)."""
        self.size = len(entries[0]) if entries is not None else sum(map(len, records or ()))
        """The bytes of its entries (all of them, also after a ``cut``), or of its records."""

    @property
    def records(self) -> list[memoryview]:
        """The records kept, in order (cut from the entries on first reading)."""
        if self._records is None:
            data, entries = self._entries or (memoryview(b""), 0)
            every = _records_of(data, entries)
            if len(every) < self._skip + self.count:
                raise StreamProtocolError(
                    f"chunk at offset {self.first_offset - self._skip}: its entries hold"
                    f" {len(every)} records, its header says {self._skip + self.count}"
                )
            self._records = every[self._skip : self._skip + self.count]
        return self._records

    def plain_entries(self) -> tuple[memoryview, int, int, int] | None:
        """(entries as sent, how many, records to pass over, records kept) of a chunk made
        from a frame; None for one made of records. Each entry is one record unless a
        sub-entry batch is among them: the reader of these must check."""
        if self._entries is None:
            return None
        data, entries = self._entries
        return data, entries, self._skip, self.count

    def cut(self, start: int, end: int) -> Chunk:
        """The records of offsets ``start`` to ``end - 1`` that this chunk holds."""
        first = max(self.first_offset, start)
        stop = min(self.first_offset + self.count, end)
        count = max(stop - first, 0)
        at = first - self.first_offset
        if self._records is not None:
            return Chunk(self.subscription_id, first, self.timestamp_ms,
                         self._records[at : at + count])  # fmt: skip
        return Chunk(self.subscription_id, first, self.timestamp_ms, entries=self._entries,
                     skip=self._skip + at, count=count)  # fmt: skip

    def __repr__(self) -> str:
        return f"Chunk(first_offset={self.first_offset}, count={self.count})"


def chunk_records(subscription_id: int, body: memoryview, *, check_crc: bool = False) -> Chunk:
    """A Deliver frame's body (after key and version) as a ``Chunk``.

    Each entry is a record (``size:uint32`` with the top bit clear, then the data), or a
    sub-entry batch (top bit set: compression, record count, sizes, then records).
    """
    try:
        (_, chunk_type, entries, records, timestamp, _epoch, first, crc, size, _trailer, _) = (
            _CHUNK.unpack_from(body, 0)
        )
    except struct.error as exc:
        raise StreamProtocolError(f"deliver frame cut short: {exc}") from None
    data = body[CHUNK_HEADER : CHUNK_HEADER + size]
    if len(data) != size:
        raise StreamProtocolError(f"deliver frame: chunk of {size} bytes has {len(data)}")
    if check_crc and zlib.crc32(data) & 0xFFFFFFFF != crc & 0xFFFFFFFF:
        raise StreamProtocolError(f"chunk at offset {first}: CRC mismatch")
    if chunk_type != 0:  # tracking or other internal chunks carry no user records
        return Chunk(subscription_id, first, timestamp, [])
    return Chunk(subscription_id, first, timestamp, entries=(data, entries), count=records)


def _records_of(data: memoryview, entries: int) -> list[memoryview]:
    """The records of a chunk's ``entries`` entries in ``data``."""
    records: list[memoryview] = []
    pos = 0
    unpack = _U32.unpack_from
    append = records.append
    try:
        for _ in range(entries):
            head = data[pos]
            if head & 0x80 == 0:
                length = unpack(data, pos)[0]
                pos += 4
                append(data[pos : pos + length])
                pos += length
            else:
                pos = _sub_batch(data, pos, head, records)
    except (IndexError, struct.error) as exc:
        raise StreamProtocolError(f"a chunk's entries are cut short ({exc})") from None
    if pos > len(data):
        raise StreamProtocolError(f"a chunk's entries run {pos - len(data)} bytes past its end")
    return records


def _sub_batch(data: memoryview, pos: int, head: int, records: list[memoryview]) -> int:
    compression = (head >> 4) & 0x07
    count = _U16.unpack_from(data, pos + 1)[0]
    _uncompressed, length = struct.unpack_from(">II", data, pos + 3)
    pos += 11
    raw = data[pos : pos + length]
    if compression == 1:
        raw = memoryview(zlib.decompress(bytes(raw), 16 + zlib.MAX_WBITS))
    elif compression != 0:
        raise StreamProtocolError(
            f"a sub-entry batch compressed with codec {compression}: only none and gzip are read"
        )
    at = 0
    for _ in range(count):
        size = _U32.unpack_from(raw, at)[0]
        at += 4
        records.append(raw[at : at + size])
        at += size
    return int(pos + length)


def u64_array(values: Iterable[int]) -> bytes:
    items = list(values)
    return _U32.pack(len(items)) + b"".join(_U64.pack(v) for v in items)
