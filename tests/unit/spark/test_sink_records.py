"""Arrow batches encoded column by column: the same publish entries, byte for byte, as the
rows encoded one by one (``RowEncoder.messages`` then ``amqp10.encode``)."""

from __future__ import annotations

import datetime as dt
import itertools
import struct
from typing import Any

import pyarrow as pa
import pytest

from rabbitry.spark.ids import MessageIdScheme
from rabbitry.spark.options import SinkOptions, SparkSinkError
from rabbitry.spark.rows import Column, ColumnKind, RowEncoder
from rabbitry.spark.sink_records import RecordEncoder, arrow_rows, spans
from rabbitry.stream import amqp10, frames

URL = "amqp://guest:guest@localhost/%2F"
LONG = "ü" * 200  # 400 bytes: a str32, not a str8
SCHEMA = pa.schema(
    [
        ("payload", pa.binary()),
        ("text", pa.string()),
        ("kind", pa.string()),
        ("n", pa.int64()),
        ("small", pa.int32()),
        ("ratio", pa.float64()),
        ("flag", pa.bool_()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)
COLUMNS = (
    Column("payload", ColumnKind.BINARY),
    Column("text", ColumnKind.STRING),
    Column("kind", ColumnKind.STRING),
    Column("n", ColumnKind.INTEGRAL),
    Column("small", ColumnKind.INTEGRAL),
    Column("ratio", ColumnKind.FRACTIONAL),
    Column("flag", ColumnKind.BOOLEAN),
    Column("at", ColumnKind.TIMESTAMP),
)
AT = dt.datetime(2026, 11, 27, 12, 30, 1, 250_000, tzinfo=dt.UTC)
ROWS: dict[str, list[Any]] = {
    "payload": [b"", b"\x00\xff" * 200, b"x", b"{}", bytes(range(256))],
    "text": ["", "héllo wörld ✓", LONG, "plain", "日本語"],
    "kind": ["order.created", "é", LONG, "k", "order.created"],
    "n": [0, None, -(2**63), 2**63 - 1, 42],
    "small": [1, 2, 300, -3, 7],
    "ratio": [1.5, None, -0.0, float("inf"), 3.25],
    "flag": [True, False, None, True, None],
    "at": [AT, None, AT, AT, None],
}
BATCH = pa.RecordBatch.from_pydict(ROWS, schema=SCHEMA)
IDS = MessageIdScheme("job-7", 3, 1)


def encoder(**options: Any) -> RowEncoder:
    return RowEncoder(SinkOptions.parse({"url": URL, **options}, {}), COLUMNS)


def row_by_row(enc: RowEncoder, batch: pa.RecordBatch, start: int, rows: list[int]) -> list[bytes]:
    """Today's per-row encoding of the batch's ``rows``, as publish entries."""
    picked = batch.take(pa.array(rows, pa.int64()))
    indices = [start + i for i in rows]
    out = []
    for index, m in zip(
        indices, enc.messages(arrow_rows([picked]), IDS, indices=indices), strict=True
    ):
        message = amqp10.encode(
            m.body,
            message_id=m.message_id,
            content_type=enc.content_type,
            headers=m.headers,
            routing_key=m.routing_key,
        )
        out.append(struct.pack(">QI", index + 1, len(message)) + message)
    return out


def by_columns(enc: RowEncoder, batch: pa.RecordBatch, start: int, rows: list[int]) -> list[bytes]:
    entries, _ = RecordEncoder(enc).entries(batch, IDS, start, pa.array(rows, pa.int64()))
    return [bytes(e) for e in entries.to_pylist()]


ALL = list(range(BATCH.num_rows))


WRITES: dict[str, dict[str, str]] = {
    "binary body": {"routing_key": "events", "body_column": "payload"},
    "text body, long key": {"routing_key": LONG, "body_column": "text"},
    "routing key column": {"exchange": "o", "routing_key_column": "kind", "body_column": "payload"},
    "headers of each kind, nulls left out": {
        "routing_key": "events",
        "body_column": "text",
        "header_columns": "kind,n,small,ratio,flag",
    },
    "rows whose only header is null have no headers": {
        "routing_key": "e",
        "body_column": "payload",
        "header_columns": "flag",
    },
    "integer message ids, a content type": {
        "routing_key": "e",
        "body_column": "payload",
        "message_id_column": "small",
        "content_type": "application/x-thing",
    },
    "text message ids, long and empty": {
        "routing_key": "e",
        "body_column": "payload",
        "message_id_column": "text",
    },
    "JSON body of the row, row by row": {"routing_key": "e"},
    "timestamp headers, row by row": {
        "routing_key": "e",
        "body_column": "payload",
        "header_columns": "at,kind",
    },
}


@pytest.mark.parametrize("options", list(WRITES.values()), ids=list(WRITES))
def test_entries_are_the_bytes_of_the_rows_encoded_one_by_one(options: dict[str, str]) -> None:
    enc = encoder(**options)
    for start, rows in ((0, ALL), (10_000, ALL), (500, [1, 3, 4]), (7, [2, 3])):
        assert by_columns(enc, BATCH, start, rows) == row_by_row(enc, BATCH, start, rows)


def test_only_rows_the_columns_cannot_carry_are_encoded_row_by_row() -> None:
    assert RecordEncoder(encoder(routing_key="e", body_column="payload")).by_columns
    assert not RecordEncoder(encoder(routing_key="e")).by_columns
    timestamps = encoder(routing_key="e", body_column="payload", header_columns="at")
    assert not RecordEncoder(timestamps).by_columns


def test_the_body_bytes_of_the_rows_encoded_are_counted() -> None:
    for options in ({"routing_key": "e", "body_column": "text"}, {"routing_key": "e"}):
        enc = encoder(**options)
        picked = [0, 2]
        _, size = RecordEncoder(enc).entries(BATCH, IDS, 0, pa.array(picked, pa.int64()))
        rows = arrow_rows([BATCH.take(pa.array(picked))])
        assert size == sum(len(m.body) for m in enc.messages(rows, IDS, indices=picked))


@pytest.mark.parametrize(
    ("options", "column", "what"),
    [
        ({"routing_key": "e", "body_column": "payload"}, "payload", "body column"),
        (
            {"exchange": "x", "routing_key_column": "kind", "body_column": "text"},
            "kind",
            "routing key column",
        ),
        (
            {"routing_key": "e", "body_column": "text", "message_id_column": "small"},
            "small",
            "message id column",
        ),
    ],
)
def test_a_null_where_a_value_is_needed_names_the_row_as_the_row_path_does(
    options: dict[str, str], column: str, what: str
) -> None:
    values = BATCH.column(column).to_pylist()
    values[3] = None
    batch = BATCH.set_column(
        SCHEMA.get_field_index(column),
        SCHEMA.field(column),
        pa.array(values, SCHEMA.field(column).type),
    )
    enc = encoder(**options)
    with pytest.raises(SparkSinkError) as by_column:
        by_columns(enc, batch, 100, ALL)
    with pytest.raises(SparkSinkError) as by_row:
        row_by_row(enc, batch, 100, ALL)
    assert str(by_column.value) == str(by_row.value)
    assert f"batch 3, partition 1, row 103: {what} {column!r} is null" in str(by_column.value)


def test_spans_give_the_entries_back_to_back_and_where_each_ends() -> None:
    enc = encoder(routing_key="e", body_column="payload")
    entries, _ = RecordEncoder(enc).entries(BATCH, IDS, 0, pa.array(ALL, pa.int64()))
    for part in (entries, entries.slice(2, 2)):
        offsets, data = spans(part)
        expected = [bytes(e) for e in part.to_pylist()]
        assert bytes(data) == b"".join(expected)
        base = offsets[0]
        found = [bytes(data[a - base : b - base]) for a, b in itertools.pairwise(offsets)]
        assert found == expected


def test_a_frame_of_entries_is_the_frame_of_its_messages() -> None:
    messages = [(1, b"a"), (2, b""), (3, b"x" * 300)]
    entries = b"".join(struct.pack(">QI", i, len(m)) + m for i, m in messages)
    assert frames.publish_head(4, 3, len(entries)) + entries == frames.publish(4, messages)
    size, key, version = struct.unpack_from(">IHH", frames.publish(4, messages))
    assert (size, key, version) == (len(entries) + 9, frames.Key.PUBLISH, 1)
