"""A partition's Arrow batches as the stream protocol's publish entries, column by column.

The sink into a stream stores each row as an AMQP 1.0 message inside a publish entry
(``publishing id:u64, size:u32, message``). Most of a message is the same for every row of a
write: the durable header, the annotations naming a fixed routing key, the properties but for
the message id, the data section's code. What varies (the id, the body, the routing key and
header columns, the sizes) is a column: ``RecordEncoder`` builds each part as an Arrow binary
column and joins them with Arrow's compute functions, with no Python object per row. The bytes
are those ``amqp10.encode`` writes for the row's ``Outgoing`` message (the unit tests compare
them); a JSON body of the whole row and timestamp headers are encoded row by row through
``RowEncoder`` and ``amqp10.encode``, into the same entries. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rabbitry.errors import SparkSinkError
from rabbitry.spark.ids import MessageIdScheme
from rabbitry.spark.rows import ColumnKind, Outgoing, RowEncoder
from rabbitry.stream import amqp10

__all__ = ["BINARY", "RecordEncoder", "arrow_rows", "positions", "spans", "stored"]

BINARY = pa.large_binary()
"""Every part is large binary: a batch of big bodies may pass 2 GiB, binary's limit."""
_EMPTY = pa.scalar(b"", BINARY)
_BYTES = pa.array([bytes((i,)) for i in range(256)], BINARY)
"""Byte ``i`` at index ``i``: a column of numbers below 256 as one byte each, by ``take``."""
_TRUE, _FALSE = pa.scalar(b"\x41", BINARY), pa.scalar(b"\x42", BINARY)

_DURABLE_HEADER = b"\x00\x53\x70\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x41"
_ANNOTATIONS = b"\x00\x53\x72\xd1"  # then size, count (2), the symbol, the routing key
_ROUTING_SYMBOL = b"\xa3\x0dx-routing-key"
_PROPERTIES = b"\x00\x53\x73\xd0"  # then size, count, the message id, the constant rest
_HEADERS = b"\x00\x53\x74\xd1"  # then size, count, key and value of each non-null header
_DATA = b"\x00\x53\x75\xb0"  # then the body's size and the body
_SCALARS = {
    ColumnKind.INTEGRAL: (b"\x81", ">{}q", 0),
    ColumnKind.FRACTIONAL: (b"\x82", ">{}d", 0.0),
}


def _join(*parts: pa.Array | bytes) -> pa.Array:
    """The parts (columns, or constants for every row) joined row by row."""
    args = [pa.scalar(p, BINARY) if isinstance(p, bytes) else p for p in parts]
    return pc.binary_join_element_wise(*args, _EMPTY)


def _packed(values: Sequence[Any], fmt: str, size: int) -> pa.Array:
    """Numbers packed by ``struct`` (``fmt`` has ``{}`` for the count), ``size`` bytes each."""
    data = struct.pack(fmt.format(len(values)), *values)
    cells = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(size), len(values), [None, pa.py_buffer(data)]
    )
    return cells.cast(BINARY)


def _u32(values: pa.Array) -> pa.Array:
    return _packed(values.to_pylist(), ">{}I", 4)


def _sized(values: pa.Array) -> pa.Array:
    """The AMQP 1.0 strings of a binary column without nulls (str8 under 256 bytes, else
    str32)."""
    lengths = pc.binary_length(values)
    short = _join(b"\xa1", pc.take(_BYTES, pc.min_element_wise(lengths, 255)))
    if (pc.max(lengths).as_py() or 0) < 256:
        return _join(short, values)
    long = _join(b"\xb1", _u32(lengths))
    return _join(pc.if_else(pc.less(lengths, 256), short, long), values)


_COUNTING = pa.array(range(10_000), pa.int64())


def positions(start: int, count: int) -> pa.Array:
    """``start`` to ``start + count - 1`` (int64), without a Python int each."""
    global _COUNTING
    if count > len(_COUNTING):
        _COUNTING = pa.array(range(count), pa.int64())
    first = _COUNTING.slice(0, count)
    return pc.add(first, start) if start else first


def _sizes(values: pa.Array, plus: int = 0) -> pa.Array:
    """Each cell's size (plus ``plus``) as a u32."""
    return _u32(pc.add(pc.binary_length(values), plus))


class RecordEncoder:
    """A checked ``RowEncoder``'s rows, from Arrow batches, as publish entries."""

    def __init__(self, encoder: RowEncoder) -> None:
        self.encoder = encoder
        opts = encoder.options
        self._kinds = {c.name: c.kind for c in encoder.columns}
        self.by_columns = opts.body_column is not None and all(
            self._kinds[h] is not ColumnKind.TIMESTAMP for h in opts.header_columns
        )
        """False: the rows are encoded one by one (a JSON body, a timestamp header)."""
        content_type = encoder.content_type
        # after the message id: user id, to, subject, reply to, correlation id (null) and the
        # content type; nothing when there is no content type (trailing nulls are left out)
        self._after_id = b""
        if content_type:
            self._after_id = b"\x40" * 5 + amqp10.encode_string(content_type, 0xA3, 0xB3)
        self._fields = struct.pack(">I", 7 if content_type else 1)
        if opts.routing_key_column is None:
            key = _ROUTING_SYMBOL + amqp10.encode_string(opts.routing_key)
            self._annotations = _ANNOTATIONS + struct.pack(">II", len(key) + 4, 2) + key

    def entries(
        self, batch: pa.RecordBatch, ids: MessageIdScheme, start: int, rows: pa.Array
    ) -> tuple[pa.Array, int]:
        """The entries (large binary) of the batch's rows ``rows`` (indices, rising), and their
        body bytes. Row ``i`` of the batch is row ``start + i`` of the partition: publishing
        id ``start + i + 1``, its message id from ``ids``."""
        first = rows[0].as_py() if len(rows) else 0
        index = pc.add(rows, start)
        if len(rows) and rows[-1].as_py() - first + 1 == len(rows):
            batch = batch.slice(first, len(rows))  # no copy
            numbers: Sequence[int] = range(start + first + 1, start + first + 1 + len(rows))
        else:
            batch = batch.take(rows)
            numbers = pc.add(index, 1).to_pylist()
        publishing = _packed(numbers, ">{}Q", 8)
        if not self.by_columns:
            messages, size = self._row_by_row(batch, ids, index)
            return _join(publishing, _sizes(messages), messages), size
        # the bodies are copied once, into the entries: the rest of each message comes first
        head, body = self._head(batch, ids, index)
        lengths = pc.binary_length(body)
        size = _u32(pc.add(pc.binary_length(head), lengths))
        return _join(publishing, size, head, body), pc.sum(lengths).as_py() or 0

    def routing_keys(self, batch: pa.RecordBatch, ids: MessageIdScheme, start: int) -> pa.Array:
        """The routing key of each row (the column's, else the options')."""
        name = self.encoder.options.routing_key_column
        if name is None:
            return pa.array([self.encoder.options.routing_key] * batch.num_rows, pa.string())
        return self._required(
            batch, name, "routing key column", ids, positions(start, batch.num_rows)
        )

    def _required(
        self, batch: pa.RecordBatch, name: str, what: str, ids: MessageIdScheme, index: pa.Array
    ) -> pa.Array:
        values = batch.column(name)
        if values.null_count:
            first = pc.index(pc.is_null(values), True).as_py()
            raise SparkSinkError(f"{ids.where(index[first].as_py())}: {what} {name!r} is null")
        return values

    def _head(
        self, batch: pa.RecordBatch, ids: MessageIdScheme, index: pa.Array
    ) -> tuple[pa.Array, pa.Array]:
        """Each message up to its body, and the body."""
        opts = self.encoder.options
        body = self._required(batch, opts.body_column or "", "body column", ids, index)
        parts: list[pa.Array | bytes] = [_DURABLE_HEADER]
        if opts.routing_key_column is None:
            parts.append(self._annotations)
        else:
            key = self._required(batch, opts.routing_key_column, "routing key column", ids, index)
            key = key.cast(BINARY)
            symbol_and_key = _join(_ROUTING_SYMBOL, _sized(key))
            parts += [_ANNOTATIONS, _sizes(symbol_and_key, 4), b"\x00\x00\x00\x02", symbol_and_key]
        if opts.message_id_column is None:
            prefix = ids.message_id(0)[:-1].encode()  # the id without the row's index
            message_ids = _join(prefix, index.cast(pa.string()).cast(BINARY))
        else:
            given = self._required(batch, opts.message_id_column, "message id column", ids, index)
            message_ids = given.cast(pa.string()).cast(BINARY)
        fields = _join(_sized(message_ids), self._after_id)
        parts += [_PROPERTIES, _sizes(fields, 4), self._fields, fields]
        if opts.header_columns:
            parts.append(self._headers(batch))
        body = body.cast(BINARY)
        parts += [_DATA, _sizes(body)]
        return _join(*parts), body

    def _headers(self, batch: pa.RecordBatch) -> pa.Array:
        """Each row's application properties section: its non-null header columns (none when
        all are null)."""
        pairs: list[pa.Array | bytes] = []
        count = pa.array([0] * batch.num_rows, pa.int64())
        for name in self.encoder.options.header_columns:
            values = batch.column(name)
            given = pc.is_valid(values)
            pair = _join(amqp10.encode_string(name), _header_values(values, self._kinds[name]))
            pairs.append(pc.if_else(given, pair, _EMPTY))
            count = pc.add(count, pc.cast(given, pa.int64()))
        payload = _join(*pairs)
        section = _join(_HEADERS, _sizes(payload, 4), _u32(pc.multiply(count, 2)), payload)
        return pc.if_else(pc.greater(count, 0), section, _EMPTY)

    def _row_by_row(
        self, batch: pa.RecordBatch, ids: MessageIdScheme, index: pa.Array
    ) -> tuple[pa.Array, int]:
        """The messages of rows the columns cannot carry (a JSON body, timestamp headers), and
        their body bytes."""
        content_type = self.encoder.content_type
        out: list[bytes] = []
        size = 0
        rows = arrow_rows([batch])
        for message in self.encoder.messages(rows, ids, indices=index.to_pylist()):
            size += len(message.body)
            out.append(stored(message, content_type))
        return pa.array(out, BINARY), size


def _header_values(values: pa.Array, kind: ColumnKind) -> pa.Array:
    """The AMQP 1.0 value of each cell (of a null: any; the caller leaves its pair out)."""
    if kind is ColumnKind.BOOLEAN:
        return pc.if_else(pc.fill_null(values, False), _TRUE, _FALSE)
    if kind in _SCALARS:
        code, fmt, zero = _SCALARS[kind]
        return _join(code, _packed(pc.fill_null(values, zero).to_pylist(), fmt, 8))
    return _sized(pc.fill_null(values.cast(pa.string()), "").cast(BINARY))


def stored(message: Outgoing, content_type: str | None) -> bytes:
    """One row's message as the stream stores it."""
    return amqp10.encode(
        message.body,
        message_id=message.message_id,
        content_type=content_type,
        headers=message.headers,
        routing_key=message.routing_key,
    )


def arrow_rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """The row tuples of Arrow record batches, in order."""
    for batch in batches:
        if batch.num_columns:
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)
        else:
            yield from (() for _ in range(batch.num_rows))


def spans(entries: pa.Array) -> tuple[memoryview, memoryview]:
    """Where each entry of a large binary column starts and ends (``offsets[i]`` to
    ``offsets[i + 1]``, ``offsets[0]`` where ``data`` starts), and the entries back to back."""
    _, offsets, data = entries.buffers()
    where = memoryview(offsets).cast("q")[entries.offset : entries.offset + len(entries) + 1]
    first, last = where[0], where[-1]
    return where, memoryview(data)[first:last] if data is not None else memoryview(b"")
