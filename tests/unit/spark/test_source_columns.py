"""Record batches built a column at a time from stream chunks hold exactly the rows the
row-by-row path makes of the same messages (``stream_row_of``, then ``arrow_batches``)."""

from __future__ import annotations

import datetime as dt
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.spark.reader import arrow_batches, arrow_schema
from rabbitry.spark.source_columns import chunk_batches
from rabbitry.spark.source_rows import stream_row_of
from rabbitry.stream import amqp10
from rabbitry.stream.columns import MessageColumns
from rabbitry.stream.errors import StreamProtocolError
from rabbitry.stream.frames import Chunk
from tests.unit.stream.stored import STORED  # as the broker stores a Publisher's message

STAMP = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
# a message id given as a ulong (0x80), a section descriptor given as a ulong (0x80 ... 0x75)
ULONG_ID = (
    b"\x00Ss\xc0\x0a\x01\x80"
    + struct.pack(">Q", 42)
    + b"\x00\x80"
    + struct.pack(">Q", 0x75)
    + b"\xa0\x02hi"
)
TWO_PARTS = b"\x00Su\xa0\x02ab\x00Su\xb0\x00\x00\x00\x02cd"
AMQP_VALUE = b"\x00Sw\xa1\x05value"
NO_SECTIONS = b""

SAMPLES = [
    STORED,
    amqp10.encode(b"plain"),
    amqp10.encode(b"b" * 300, message_id="m1", routing_key="rk", timestamp=STAMP),
    amqp10.encode(
        b"{}",
        message_id="m2",
        correlation_id="c",
        content_type="application/json",
        headers={"tenant": "t1", "n": 3, "flag": True, "at": STAMP, "long": "x" * 300},
        routing_key="other",
    ),
    amqp10.encode(b"", headers={"tenant": "t2"}),
    ULONG_ID,
    TWO_PARTS,
    AMQP_VALUE,
    NO_SECTIONS,
]


def _row_path(chunks: list[Chunk], stream: str) -> pa.Table:
    rows = (
        stream_row_of(record, stream, offset)
        for chunk in chunks
        for offset, record in enumerate(chunk.records, chunk.first_offset)
    )
    return pa.Table.from_batches(list(arrow_batches(rows)), schema=arrow_schema())


def _column_path(chunks: list[Chunk], stream: str, rows: int = 4096) -> pa.Table:
    batches = list(chunk_batches(chunks, stream, arrow_schema(), rows))
    assert all(b.schema.equals(arrow_schema()) for b in batches)
    return pa.Table.from_batches(batches, schema=arrow_schema())


def _chunks(records: list[bytes], sizes: list[int], first: int = 0) -> list[Chunk]:
    out, at = [], 0
    for size in sizes:
        out.append(Chunk(1, first + at, 0, [memoryview(r) for r in records[at : at + size]]))
        at += size
    assert at == len(records)
    return out


def test_a_publishers_messages_make_the_rows_the_row_path_makes() -> None:
    records = [STORED] * 10
    chunks = _chunks(records, [4, 6], first=100)
    table = _column_path(chunks, "s")
    assert table.equals(_row_path(chunks, "s"))
    first = table.slice(0, 1).to_pylist()[0]
    assert first["offset"] == 100 and first["routing_key"] == "bench.stream-client"
    assert first["properties"]["delivery_mode"] == 2
    assert first["timestamp"] == dt.datetime(2026, 11, 27, 6, 19, 48, tzinfo=dt.UTC)


def test_messages_of_every_kind_make_the_rows_the_row_path_makes() -> None:
    chunks = _chunks(SAMPLES, [3, 1, len(SAMPLES) - 4], first=7)
    table = _column_path(chunks, "orders-0")
    assert table.equals(_row_path(chunks, "orders-0"))
    rows = table.to_pylist()
    assert rows[3]["headers"] == [
        ("tenant", "t1"),
        ("n", "3"),
        ("flag", "true"),
        ("at", STAMP.isoformat()),
        ("long", "x" * 300),
    ]
    assert rows[5]["properties"]["message_id"] == "42" and rows[5]["body"] == b"hi"
    assert [r["body"] for r in rows[6:]] == [b"abcd", b"value", b""]


def test_batches_hold_whole_chunks_and_at_least_the_rows_asked() -> None:
    chunks = _chunks([STORED] * 10, [3, 3, 3, 1])
    batches = list(chunk_batches(chunks, "s", arrow_schema(), 4))
    assert [b.num_rows for b in batches] == [6, 4]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(SAMPLES) - 1), min_size=1, max_size=30),
    cut=st.integers(1, 8),
)
def test_any_mix_of_messages_and_chunks_makes_the_rows_the_row_path_makes(
    picks: list[int], cut: int
) -> None:
    records = [SAMPLES[i] for i in picks]
    sizes = [cut] * (len(records) // cut) + ([len(records) % cut] if len(records) % cut else [])
    chunks = _chunks(records, sizes)
    assert _column_path(chunks, "s", rows=5).equals(_row_path(chunks, "s"))


def test_a_record_that_is_no_message_is_a_protocol_error() -> None:
    columns = MessageColumns()
    with pytest.raises(StreamProtocolError):
        columns.add(memoryview(b"\x01\x02"))
    with pytest.raises(StreamProtocolError, match="cut short"):
        columns.add(memoryview(STORED[:-2]))


def test_messages_laid_out_like_the_one_before_are_read_by_its_layout() -> None:
    # ids of one length then another, bodies of every length: each change of layout is read
    # the long way once, the rest by the layout, and every row is the row path's
    records = [
        amqp10.encode(b"b" * (i * 37 % 500), message_id=f"id-{i}", routing_key="k", timestamp=STAMP)
        for i in range(30)
    ]
    columns = MessageColumns()
    columns.extend([memoryview(r) for r in records])
    assert columns.layout is not None and columns.count == 30
    chunks = _chunks(records, [7, 23])
    assert _column_path(chunks, "s").equals(_row_path(chunks, "s"))
    other = amqp10.encode(b"x", message_id="id-1", routing_key="other", timestamp=STAMP)
    assert columns.layout.add(columns, [memoryview(other)], 0) == 0, "another routing key fits"
