"""The source's Arrow record batches built from stream-protocol chunks a column at a time.

Over the stream protocol a task gets whole chunks of stored messages; ``MessageColumns``
(``rabbitry.stream.columns``) reads their fields into lists without an object per message,
and ``record_batch`` turns those lists into the columns of ``rabbitry.spark.reader``'s schema:
the bodies joined once into one buffer with their offsets, a property that every message
shares (the same header and annotations) repeated by Arrow, the creation times converted by
Arrow. The rows are those ``source_rows.stream_row_of`` makes, message by message.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rabbitry.spark.source_rows import PROPERTY_FIELDS, header_text
from rabbitry.stream.columns import PROPERTY_SLOTS, MessageColumns, SectionEffect
from rabbitry.stream.frames import Chunk

__all__ = ["BATCH_BYTES", "chunk_batches", "record_batch"]

BATCH_BYTES = 64 << 20
"""Body bytes per record batch, at most about: Arrow's binary offsets are 32-bit."""

_SLOT = {name: i for i, name in enumerate(PROPERTY_SLOTS) if name is not None}
_STAMP = pa.timestamp("us", tz="UTC")


def chunk_batches(
    chunks: Iterable[Chunk], stream: str, schema: pa.Schema, rows: int
) -> Iterator[pa.RecordBatch]:
    """The records of ``chunks`` (cut to the range read) as record batches of ``schema``, in
    order, each of whole chunks and at least ``rows`` rows (the last one fewer)."""
    columns = MessageColumns()
    offsets: list[int] = []
    size = 0
    for chunk in chunks:
        columns.extend(chunk.records)
        size += sum(map(len, chunk.records))
        offsets.extend(range(chunk.first_offset, chunk.first_offset + len(chunk.records)))
        if columns.count >= rows or size >= BATCH_BYTES:
            yield record_batch(columns, stream, offsets, schema)
            columns, offsets, size = MessageColumns(columns.layout), [], 0
    if columns.count:
        yield record_batch(columns, stream, offsets, schema)


def record_batch(
    columns: MessageColumns, stream: str, offsets: list[int], schema: pa.Schema
) -> pa.RecordBatch:
    """``columns`` (read from ``stream``; ``offsets``: each row's) as one record batch of
    ``schema`` (``rabbitry.spark.reader.arrow_schema``)."""
    n = columns.count
    effects = columns.effects
    shared = effects[0] if n and effects.count(effects[0]) == n else None
    stamps = _timestamps(columns, n)
    children = []
    for (name, _), field in zip(PROPERTY_FIELDS, schema.field("properties").type, strict=True):
        if name == "timestamp":
            children.append(stamps)
        elif name in _SLOT:
            children.append(_sparse(columns.slots[_SLOT[name]], n, field.type))
        else:
            children.append(_from_effects(effects, shared, n, field.type, name))
    properties = pa.StructArray.from_arrays(children, fields=list(schema.field("properties").type))
    if shared is not None:
        routing_keys = _repeated(shared.routing_key, n, pa.string())
    else:
        routing_keys = pa.array([e.routing_key for e in effects], pa.string())
    arrays = [
        _bodies(columns.bodies),
        routing_keys,
        _headers(columns, shared, schema.field("headers").type),
        properties,
        _repeated(stream, n, pa.string()),
        pa.array(offsets, pa.int64()),
        stamps,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _repeated(value: Any, n: int, kind: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, kind)
    return pa.repeat(pa.scalar(value, kind), n)


def _bodies(bodies: list[Any]) -> pa.Array:
    ends = array("i", itertools.accumulate(map(len, bodies), initial=0))
    data = b"".join(bodies)
    return pa.Array.from_buffers(
        pa.binary(), len(bodies), [None, pa.py_buffer(ends), pa.py_buffer(data)]
    )


def _sparse(slot: tuple[list[int], list[Any]], n: int, kind: pa.DataType) -> pa.Array:
    rows, values = slot
    if len(rows) == n:
        return pa.array(values, kind)
    if not rows:
        return pa.nulls(n, kind)
    dense: list[Any] = [None] * n
    for row, value in zip(rows, values, strict=True):
        dense[row] = value
    return pa.array(dense, kind)


def _timestamps(columns: MessageColumns, n: int) -> pa.Array:
    millis = _sparse(columns.slots[_SLOT["timestamp"]], n, pa.int64())
    return pc.multiply(millis, 1000).cast(_STAMP)


def _from_effects(
    effects: list[SectionEffect], shared: SectionEffect | None, n: int, kind: pa.DataType, name: str
) -> pa.Array:
    if shared is not None:
        return _repeated(shared.properties.get(name), n, kind)
    return pa.array([e.properties.get(name) for e in effects], kind)


def _headers(columns: MessageColumns, shared: SectionEffect | None, kind: pa.DataType) -> pa.Array:
    """The headers map: each distinct headers dict made text once."""
    n = columns.count
    later = columns.headers
    if not later and shared is not None and not shared.headers:
        return pa.MapArray.from_arrays(
            pa.array(itertools.repeat(0, n + 1), pa.int32()),
            pa.array([], pa.string()),
            pa.array([], pa.string()),
            type=kind,
        )
    texts: dict[int, list[tuple[str, str | None]]] = {}
    ends = [0]
    keys: list[str] = []
    values: list[str | None] = []
    for row, effect in enumerate(columns.effects):
        given = later.get(row, effect.headers)
        if given:
            pairs = texts.get(id(given))
            if pairs is None:
                pairs = texts[id(given)] = [(str(k), header_text(v)) for k, v in given.items()]
            for k, v in pairs:
                keys.append(k)
                values.append(v)
        ends.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(ends, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=kind,
    )
