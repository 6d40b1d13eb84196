"""Rows to messages: columns checked once, bodies, keys, headers, ids and delays per row."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest

from rabbitry.spark.ids import MessageIdScheme, parse_message_id
from rabbitry.spark.options import SinkOptionError, SinkOptions, SparkSinkError
from rabbitry.spark.rows import Column, ColumnKind, RowEncoder

URL = "amqp://guest:guest@localhost/%2F"
COLUMNS = (
    Column("id", ColumnKind.INTEGRAL, "bigint"),
    Column("kind", ColumnKind.STRING, "string"),
    Column("payload", ColumnKind.BINARY, "binary"),
    Column("at", ColumnKind.TIMESTAMP, "timestamp"),
    Column("price", ColumnKind.DECIMAL, "decimal(10,2)"),
    Column("wait", ColumnKind.FRACTIONAL, "double"),
)
ROW = (
    7,
    "order.created",
    b"\x00\x01",
    dt.datetime(2024, 5, 1, 12, 0),
    decimal.Decimal("9.90"),
    1.5,
)
IDS = MessageIdScheme("job1", 0, 3)


def encoder(**options: str) -> RowEncoder:
    return RowEncoder(SinkOptions.parse({"url": URL, **options}, {}), COLUMNS)


def test_the_row_as_json_by_default() -> None:
    enc = encoder(exchange="events", routing_key="k")
    (m,) = enc.messages([ROW], IDS)
    assert json.loads(m.body) == {
        "id": 7,
        "kind": "order.created",
        "payload": "AAE=",
        "at": "2024-05-01T12:00:00",
        "price": "9.90",
        "wait": 1.5,
    }
    assert (enc.exchange, m.routing_key, enc.content_type) == ("events", "k", "application/json")
    assert m.message_id == "job1:0:3:0"


def test_body_key_headers_and_properties_from_columns() -> None:
    enc = encoder(
        body_column="payload",
        routing_key_column="kind",
        header_columns="id,at",
        priority="3",
        expiration="1000",
    )
    row2 = (8, "order.paid", b"x", None, None, None)
    m1, m2 = enc.messages([ROW, row2], IDS)
    assert (m1.body, m1.routing_key, enc.content_type) == (b"\x00\x01", "order.created", None)
    assert m1.headers == {"id": 7, "at": dt.datetime(2024, 5, 1, 12, 0)}
    assert m2.headers == {"id": 8}  # null headers are left out
    assert (enc.options.priority, enc.options.expiration) == (3, 1000)
    assert [m1.message_id, m2.message_id] == ["job1:0:3:0", "job1:0:3:1"]


def test_string_body_is_utf8_text() -> None:
    enc = encoder(body_column="kind")
    (m,) = enc.messages([ROW], IDS)
    assert (m.body, enc.content_type) == (b"order.created", "text/plain; charset=utf-8")
    assert encoder(body_column="kind", content_type="x/kind").content_type == "x/kind"


def test_message_id_column_and_delay_column() -> None:
    enc = encoder(message_id_column="id", delay_column="wait", spec="s.yaml", routing_key="q")
    m1, m2 = enc.messages([ROW, (*ROW[:5], None)], IDS)
    assert (m1.message_id, m1.delay, enc.exchange) == ("7", 1.5, "")
    assert m2.delay == 0.0  # null: no delay, straight to the delivery exchange


def test_missing_columns_and_wrong_types_are_reported_together() -> None:
    with pytest.raises(SinkOptionError) as err:
        encoder(body_column="at", routing_key_column="nope", header_columns="payload")
    text = str(err.value)
    assert "routing_key_column: column 'nope' is not in the DataFrame (columns: id, kind," in text
    assert "body_column: column 'at' is timestamp; it must be binary or string" in text
    assert "header_columns: column 'payload' is binary" in text


def test_null_body_or_key_names_the_row() -> None:
    rows = [ROW, (None, None, None, None, None, None)]
    with pytest.raises(SparkSinkError, match="partition 3, row 1: body column 'payload' is null"):
        list(encoder(body_column="payload").messages(rows, IDS))
    with pytest.raises(SparkSinkError, match="row 1: routing key column 'kind' is null"):
        list(encoder(routing_key_column="kind").messages(rows, IDS))


def test_ids_are_deterministic_and_parse_back() -> None:
    ids = MessageIdScheme("9d5948f8-4b76", 12, 1)
    assert ids.message_id(40) == "9d5948f8-4b76:12:1:40"
    assert parse_message_id(ids.message_id(40)) == ("9d5948f8-4b76", 12, 1, 40)
    assert ids.where(40) == "batch 12, partition 1, row 40"
    with pytest.raises(ValueError, match="longer than 200 bytes"):
        MessageIdScheme("x" * 201, 0, 0)
