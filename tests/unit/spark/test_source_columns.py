"""Record batches built a column at a time from stream chunks hold exactly the rows the
row-by-row path makes of the same messages (``stream_row_of``, then ``arrow_batches``)."""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.spark.reader import arrow_batches, arrow_schema
from rabbitry.spark.source_columns import chunk_batches
from rabbitry.spark.source_layout import Scratch, layout_batch
from rabbitry.spark.source_rows import stream_row_of
from rabbitry.stream import amqp10
from rabbitry.stream.columns import MessageColumns
from rabbitry.stream.errors import StreamProtocolError
from rabbitry.stream.frames import Chunk, chunk_records
from tests.unit.stream.stored import STORED  # as the broker stores a Publisher's message
from tests.unit.stream.test_frames import chunk, entry

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


def _chunks(
    records: list[bytes], sizes: list[int], first: int = 0, *, frames: bool = False
) -> list[Chunk]:
    """Chunks of ``records``, ``sizes`` records each: made of records, or (``frames``) read
    from Deliver frames as the stream client gets them."""
    out, at = [], 0
    for size in sizes:
        part = records[at : at + size]
        if frames:
            data = chunk(b"".join(entry(r) for r in part), len(part), len(part), first=first + at)
            out.append(chunk_records(1, memoryview(data)))
        else:
            out.append(Chunk(1, first + at, 0, [memoryview(r) for r in part]))
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


@pytest.mark.parametrize("frames", [True, False], ids=["chunks of frames", "chunks of records"])
def test_a_batch_is_also_cut_at_its_bytes(monkeypatch: pytest.MonkeyPatch, frames: bool) -> None:
    """Arrow's binary offsets are 32-bit: a batch ends once its chunks hold ``BATCH_BYTES``
    (whole chunks, whatever the rows asked)."""
    import rabbitry.spark.source_columns as source_columns

    chunks = _chunks([STORED] * 10, [3, 3, 3, 1], frames=frames)
    entry_bytes = (4 if frames else 0) + len(STORED)  # a frame's entry holds the size too
    assert [c.size for c in chunks] == [3 * entry_bytes] * 3 + [entry_bytes]
    monkeypatch.setattr(source_columns, "BATCH_BYTES", 5 * entry_bytes)
    batches = list(chunk_batches(chunks, "s", arrow_schema(), 1000))
    assert [b.num_rows for b in batches] == [6, 4]
    assert pa.Table.from_batches(batches).equals(_row_path(chunks, "s"))


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(SAMPLES) - 1), min_size=1, max_size=30),
    cut=st.integers(1, 8),
    frames=st.booleans(),
)
def test_any_mix_of_messages_and_chunks_makes_the_rows_the_row_path_makes(
    picks: list[int], cut: int, frames: bool
) -> None:
    records = [SAMPLES[i] for i in picks]
    sizes = [cut] * (len(records) // cut) + ([len(records) % cut] if len(records) % cut else [])
    chunks = _chunks(records, sizes, frames=frames)
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


def _publishers(n: int, *, length: int = 8) -> list[bytes]:
    """One publisher's messages: ids of one length, bodies of many sizes, one routing key."""
    return [
        amqp10.encode(
            b"b" * (i * 37 % 500),
            message_id=f"id-{i:0{length}d}",
            routing_key="k",
            timestamp=STAMP + dt.timedelta(milliseconds=i),
        )
        for i in range(n)
    ]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    cut=st.integers(1, 9),
    start=st.integers(0, 10),
    stop=st.integers(0, 10),
    records=st.sampled_from(["stored", "encoded"]),
)
def test_a_batch_laid_out_alike_is_cut_by_arrow_into_the_rows_the_row_path_makes(
    n: int, cut: int, start: int, stop: int, records: str
) -> None:
    messages = [STORED] * n if records == "stored" else _publishers(n)
    sizes = [cut] * (n // cut) + ([n % cut] if n % cut else [])
    frames = _chunks(messages, sizes, first=50, frames=True)
    # the range read starts and ends inside chunks, as a task's range does
    lo, hi = 50 + min(start, n - 1), max(50 + n - stop, 50 + min(start, n - 1) + 1)
    kept = [c.cut(lo, hi) for c in frames if c.cut(lo, hi).count]
    layout = MessageColumns.layout_of(memoryview(messages[0]))
    assert layout is not None
    assert layout_batch(kept, layout) is not None, "the layout path read the batch"
    assert _column_path(kept, "s").equals(_row_path(kept, "s"))
    offsets = _column_path(kept, "s").column("offset").to_pylist()
    assert offsets == list(range(lo, hi))


@pytest.mark.parametrize(
    "odd",
    [
        amqp10.encode(b"x", message_id="id-00000001", routing_key="other", timestamp=STAMP),
        amqp10.encode(b"x", message_id="id-000000001", routing_key="k", timestamp=STAMP),
        amqp10.encode(b"x", message_id="id-0000000Z", routing_key="k", timestamp=STAMP).replace(
            b"id-0000000Z", b"id-0000000\xff"
        ),
        # the body, then a footer: the data section is not the record's last bytes
        amqp10.encode(b"xy", message_id="id-00000001", routing_key="k", timestamp=STAMP)
        + b"\x00Sx\xc1\x01\x00",
    ],
    ids=["another routing key", "a longer id", "an id not UTF-8", "a footer"],
)
def test_a_batch_with_one_message_laid_out_otherwise_is_read_message_by_message(odd: bytes) -> None:
    messages = _publishers(12)
    messages[7] = odd
    frames = _chunks(messages, [5, 7], frames=True)
    layout = MessageColumns.layout_of(memoryview(messages[0]))
    assert layout is not None
    assert layout_batch(frames, layout) is None
    assert _column_path(frames, "s").equals(_row_path(frames, "s"))


def test_sub_entry_batches_and_chunks_made_of_records_are_read_message_by_message() -> None:
    messages = _publishers(3)
    inner = b"".join(entry(m) for m in messages[:2])
    batch = bytes((0x80,)) + struct.pack(">HII", 2, len(inner), len(inner)) + inner
    data = chunk(batch + entry(messages[2]), 2, 3)
    with_batch = [chunk_records(1, memoryview(data))]
    layout = MessageColumns.layout_of(memoryview(messages[0]))
    assert layout is not None
    assert layout_batch(with_batch, layout) is None
    assert _column_path(with_batch, "s").equals(_row_path(with_batch, "s"))
    assert layout_batch(_chunks(messages, [3]), layout) is None


def test_after_a_batch_the_layout_path_cannot_read_it_is_tried_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rabbitry.spark.source_columns as source_columns

    answers: list[bool] = []

    def counted(chunks: list[Chunk], layout: Any, scratch: Any) -> Any:
        found = layout_batch(chunks, layout, scratch)
        answers.append(found is not None)
        return found

    monkeypatch.setattr(source_columns, "layout_batch", counted)
    messages = _publishers(84)
    messages[1] = amqp10.encode(b"x", message_id="other", routing_key="k", timestamp=STAMP)
    chunks = _chunks(messages, [4] * 21, frames=True)
    assert _column_path(chunks, "s", rows=4).equals(_row_path(chunks, "s"))
    # the first batch is read message by message, the next too (waiting), then by layout
    assert answers == [False] + [True] * 19


def test_a_batch_keeps_nothing_of_the_buffer_the_next_batch_is_joined_in() -> None:
    """The records of each batch are joined in one buffer the next batch writes over: a batch
    already handed on must hold its own copies (a column sharing that buffer would change)."""
    first = _publishers(40)
    second = [amqp10.encode(b"y" * (i * 53 % 700), message_id=f"ix-{i:08d}", routing_key="k",
              timestamp=STAMP) for i in range(40)]  # fmt: skip
    chunks = _chunks(first, [8] * 5, frames=True) + _chunks(second, [8] * 5, 40, frames=True)
    expected = [_row_path(chunks[:5], "s"), _row_path(chunks[5:], "s")]
    batches = list(chunk_batches(chunks, "s", arrow_schema(), 40))
    assert len(batches) == 2
    for batch, rows in zip(batches, expected, strict=True):
        assert pa.Table.from_batches([batch]).equals(rows)
    scratch = Scratch()
    layout = MessageColumns.layout_of(memoryview(first[0]))
    assert layout is not None
    kept = layout_batch(chunks[:5], layout, scratch)
    assert kept is not None
    bodies, ids = kept.bodies.to_pylist(), kept.strings["message_id"].to_pylist()
    assert layout_batch(chunks[5:], layout, scratch) is not None  # the same buffer, written over
    assert kept.bodies.to_pylist() == bodies
    assert kept.strings["message_id"].to_pylist() == ids == [f"id-{i:08d}" for i in range(40)]
    assert bodies[1] == b"b" * 37
