"""A batch of stream chunks whose messages are all laid out alike, cut into columns by Arrow.

One publisher's messages mostly differ only in their message id and such strings (of one
length), their creation time and their body (``rabbitry.stream.columns.Layout``). For those
the only work per message in Python is finding where each record ends; the chunks' entries are
then copied into one buffer (``Scratch``: the same buffer batch after batch) and read as one
Arrow binary array, an item per record (its 4-byte size, then the record), and every column is
a slice of all the items at once: the constant bytes compared, the body size checked against
the record's, the strings and the creation time cut out, the bodies copied in one pass. A batch
any message of which is laid out otherwise is not made here (``None``): the caller reads it
message by message.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rabbitry.stream.amqp10 import PROPERTY_SLOTS
from rabbitry.stream.columns import Layout, SectionEffect
from rabbitry.stream.frames import Chunk

__all__ = ["Columns", "Scratch", "layout_batch"]

_U32 = struct.Struct(">I")
_TO_END = (1 << 31) - 1
_SWAP = sys.byteorder == "little"


@dataclass(eq=False)
class Columns:
    """One batch's columns before they become a record batch (``source_columns.assemble``)."""

    count: int
    bodies: pa.Array
    strings: dict[str, pa.Array]
    """The string properties read from each message, by name (the others come from effects)."""
    millis: pa.Array
    """Each message's creation time in milliseconds (int64, null: none)."""
    offsets: pa.Array
    shared: SectionEffect | None
    """The leading sections' effect when every message has the same; else see ``effects``."""
    effects: list[SectionEffect] = field(default_factory=list)
    """Each message's effect, row by row; may be left empty when ``shared`` is given (the
    layout path leaves it so: every row has ``shared``)."""
    later_headers: dict[int, dict[Any, Any]] = field(default_factory=dict)
    """Application properties after the properties section, by row."""


class Scratch:
    """The buffer a batch's records are joined in, written over by the next batch of the same
    read: a fresh buffer of a batch's size (up to 64 MiB) cost more in page faults than the
    copy into it (0.65 s against 0.1 s of CPU for 500,000 1 KB messages). Nothing a batch's
    columns hold shares it: every column is cut out of it into buffers of its own."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def joined(self, pieces: list[memoryview], size: int) -> pa.Buffer:
        if len(self._buffer) < size:
            self._buffer = bytearray(size)
        buffer, at = self._buffer, 0
        for piece in pieces:
            buffer[at : at + len(piece)] = piece
            at += len(piece)
        return pa.py_buffer(memoryview(buffer)[:size])


def layout_batch(
    chunks: list[Chunk], layout: Layout, scratch: Scratch | None = None
) -> Columns | None:
    """The columns of the records ``chunks`` keep when every one has ``layout``; None when
    any has not, or a chunk holds a sub-entry batch or was read record by record. The records
    are joined in ``scratch`` (a fresh one by default), which the columns do not keep."""
    items = _items(chunks, scratch or Scratch())
    if items is None:
        return None
    records, offsets = items
    n = len(records)
    body = layout.body + 4  # each item starts with the record's size
    lengths = pc.binary_length(records)
    if pc.min(lengths).as_py() < body:
        return None
    for start, end, same in layout.constants:
        cut = pc.binary_slice(records, start + 4, end + 4)
        if not pc.all(pc.equal(cut, pa.scalar(same, pa.binary()))).as_py():
            return None
    # the body is the last section: its size is what the record holds after its start
    declared = _numbers(pc.binary_slice(records, body - 4, body), "I", n)
    if declared != _numbers_of(pc.subtract(lengths, body).cast(pa.uint32()), "I", n):
        return None
    strings: dict[str, pa.Array] = {}
    for slot, start, end in layout.strings:
        name = PROPERTY_SLOTS[slot]
        if name is None:
            continue
        try:
            strings[name] = pc.binary_slice(records, start + 4, end + 4).cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: read the long way, which replaces what is not
            return None
    if layout.stamp >= 0:
        stamps = _numbers(pc.binary_slice(records, layout.stamp + 4, layout.stamp + 12), "q", n)
        millis = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(stamps)])
    else:
        millis = pa.nulls(n, pa.int64())
    return Columns(
        count=n,
        bodies=pc.binary_slice(records, body, _TO_END),
        strings=strings,
        millis=millis,
        offsets=offsets,
        shared=layout.effect,
    )


def _items(chunks: list[Chunk], scratch: Scratch) -> tuple[pa.Array, pa.Array] | None:
    """The records kept by ``chunks`` as one binary array (each item a record's 4-byte size,
    then the record) and their offsets; None when a chunk's entries are not plain records."""
    pieces: list[memoryview] = []
    ends = [0]
    mark = ends.append
    offsets: list[int] = []
    base = 0
    unpack = _U32.unpack_from
    for chunk in chunks:
        plain = chunk.plain_entries()
        if plain is None:
            return None
        data, entries, skip, count = plain
        if not count:
            continue
        if skip + count > entries:
            return None  # fewer entries than records: a sub-entry batch among them
        pos = 0
        try:
            for _ in range(skip):  # the records before the range read
                pos += 4 + unpack(data, pos)[0]
            begin, shift = pos, base - pos  # where each record ends in the joined buffer
            for _ in range(count):
                pos += 4 + unpack(data, pos)[0]
                mark(pos + shift)
        except struct.error:  # a sub-entry batch (its size has the top bit set), or cut short
            return None
        if pos > len(data):
            return None
        pieces.append(data[begin:pos])
        base += pos - begin
        offsets.extend(range(chunk.first_offset, chunk.first_offset + count))
    n = len(offsets)
    if not n:
        return None
    joined = scratch.joined(pieces, base)
    records = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(array("i", ends)), joined])
    return records, pa.array(offsets, pa.int64())


def _numbers(cut: pa.Array, code: str, n: int) -> array[Any]:
    """Big-endian numbers of one size, one per item of ``cut``, as an array of ``code``."""
    fixed = cut.cast(pa.binary(array(code).itemsize))
    out = _numbers_of(fixed, code, n)
    if _SWAP:
        out.byteswap()
    return out


def _numbers_of(values: pa.Array, code: str, n: int) -> array[Any]:
    """The data of a fixed-width array without nulls as an array of ``code`` (native order)."""
    out = array(code)
    width = out.itemsize
    buf = memoryview(values.buffers()[1])
    start = values.offset * width
    out.frombytes(buf[start : start + n * width])
    return out
