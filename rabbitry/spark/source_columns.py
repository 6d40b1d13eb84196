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

from rabbitry.spark.source_layout import Columns, Scratch, layout_batch
from rabbitry.spark.source_rows import PROPERTY_FIELDS, header_text
from rabbitry.stream.columns import PROPERTY_SLOTS, Layout, MessageColumns, SectionEffect
from rabbitry.stream.frames import Chunk

__all__ = ["BATCH_BYTES", "assemble", "chunk_batches", "record_batch"]

BATCH_BYTES = 64 << 20
"""Body bytes per record batch, at most about: Arrow's binary offsets are 32-bit."""

_SLOT = {name: i for i, name in enumerate(PROPERTY_SLOTS) if name is not None}
_STAMP = pa.timestamp("us", tz="UTC")
_MOST_MISSES = 4
"""After this many batches in a row the layout path could not read, it is tried once every
16 batches."""


def chunk_batches(
    chunks: Iterable[Chunk], stream: str, schema: pa.Schema, rows: int
) -> Iterator[pa.RecordBatch]:
    """The records of ``chunks`` (cut to the range read) as record batches of ``schema``, in
    order, each of whole chunks and at least ``rows`` rows (the last one fewer).

    A batch whose messages are all laid out alike (one publisher's, mostly) is cut out by
    Arrow a column at a time (``source_layout.layout_batch``); any other is read message by
    message into ``MessageColumns``, which also finds the layout the next batch is tried with.
    """
    reader = _Batches(stream, schema)
    held: list[Chunk] = []
    count = size = 0
    for chunk in chunks:
        held.append(chunk)
        count += chunk.count
        size += chunk.size
        if count >= rows or size >= BATCH_BYTES:
            yield reader.batch(held)
            held, count, size = [], 0, 0
    if count:
        yield reader.batch(held)


class _Batches:
    """Batches of one read, in order: the layout found so far, and how many batches to read
    message by message before the layout path is tried again after a batch it could not
    read (messages of several publishers mixed would pay for trying it every time)."""

    def __init__(self, stream: str, schema: pa.Schema) -> None:
        self.stream, self.schema = stream, schema
        self.layout: Layout | None = None
        self.misses = 0
        self.wait = 0
        self.scratch = Scratch()

    def batch(self, held: list[Chunk]) -> pa.RecordBatch:
        if self.layout is None:
            first = next((c for c in held if c.count), None)
            if first is not None:
                self.layout = MessageColumns.layout_of(first.records[0])
        if self.layout is not None and self.wait == 0:
            arrays = layout_batch(held, self.layout, self.scratch)
            if arrays is not None:
                self.misses = 0
                return assemble(self.schema, arrays, self.stream)
            self.misses += 1
            self.wait = 1 << min(self.misses, _MOST_MISSES)
        self.wait = max(self.wait - 1, 0)
        columns = MessageColumns(self.layout)
        offsets: list[int] = []
        for chunk in held:
            columns.extend(chunk.records)
            offsets.extend(range(chunk.first_offset, chunk.first_offset + chunk.count))
        self.layout = columns.layout
        return record_batch(columns, self.stream, offsets, self.schema)


def record_batch(
    columns: MessageColumns, stream: str, offsets: list[int], schema: pa.Schema
) -> pa.RecordBatch:
    """``columns`` (read from ``stream``; ``offsets``: each row's) as one record batch of
    ``schema`` (``rabbitry.spark.reader.arrow_schema``)."""
    n = columns.count
    effects = columns.effects
    shared = effects[0] if n and effects.count(effects[0]) == n else None
    strings = {
        name: _sparse(columns.slots[_SLOT[name]], n, pa.string())
        for name, _ in PROPERTY_FIELDS
        if name in _SLOT and name != "timestamp"
    }
    arrays = Columns(
        count=n,
        bodies=_bodies(columns.bodies),
        strings=strings,
        millis=_sparse(columns.slots[_SLOT["timestamp"]], n, pa.int64()),
        offsets=pa.array(offsets, pa.int64()),
        shared=shared,
        effects=effects,
        later_headers=columns.headers,
    )
    return assemble(schema, arrays, stream)


def assemble(schema: pa.Schema, arrays: Columns, stream: str) -> pa.RecordBatch:
    """The record batch of ``schema`` (``rabbitry.spark.reader.arrow_schema``) that
    ``arrays`` make, read from ``stream``."""
    n, shared, effects = arrays.count, arrays.shared, arrays.effects
    stamps = pc.multiply(arrays.millis, 1000).cast(_STAMP)
    children = []
    for (name, _), field in zip(PROPERTY_FIELDS, schema.field("properties").type, strict=True):
        if name == "timestamp":
            children.append(stamps)
        elif name in arrays.strings:
            children.append(arrays.strings[name].cast(field.type))
        else:
            children.append(_from_effects(effects, shared, n, field.type, name))
    properties = pa.StructArray.from_arrays(children, fields=list(schema.field("properties").type))
    if shared is not None:
        routing_keys = _repeated(shared.routing_key, n, pa.string())
    else:
        routing_keys = pa.array([e.routing_key for e in effects], pa.string())
    columns = [
        arrays.bodies,
        routing_keys,
        _headers(arrays, schema.field("headers").type),
        properties,
        _repeated(stream, n, pa.string()),
        arrays.offsets,
        stamps,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


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


def _from_effects(
    effects: list[SectionEffect], shared: SectionEffect | None, n: int, kind: pa.DataType, name: str
) -> pa.Array:
    if shared is not None:
        return _repeated(shared.properties.get(name), n, kind)
    return pa.array([e.properties.get(name) for e in effects], kind)


def _headers(arrays: Columns, kind: pa.DataType) -> pa.Array:
    """The headers map: each distinct headers dict made text once."""
    n, shared = arrays.count, arrays.shared
    later = arrays.later_headers
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
    effects: Iterable[SectionEffect] = arrays.effects
    if not arrays.effects and shared is not None:
        effects = itertools.repeat(shared, n)
    for row, effect in enumerate(effects):
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
