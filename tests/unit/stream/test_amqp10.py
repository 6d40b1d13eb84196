"""The AMQP 1.0 message format streams store: what the broker writes for an AMQP 0-9-1
publish reads back as rows need it, and what the sink writes reads back the same."""

from __future__ import annotations

import datetime as dt

import pytest

from rabbitry.stream import amqp10
from rabbitry.stream.errors import StreamProtocolError
from tests.unit.stream.stored import STORED


def test_a_message_published_over_amqp_0_9_1_reads_back_as_its_row_needs() -> None:
    m = amqp10.decode(STORED)
    assert m.body == b"xyz"
    assert m.routing_key == "bench.stream-client"
    assert m.headers == {}
    assert m.properties == {
        "delivery_mode": 2,
        "message_id": "008f174aeb2e7b9ea0ad00216f000001",
        "timestamp": dt.datetime(2026, 11, 27, 6, 19, 48, 0, tzinfo=dt.UTC),
    }


def test_what_the_sink_writes_reads_back() -> None:
    stamp = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    record = amqp10.encode(
        b"b" * 300,
        message_id="id-1",
        correlation_id="c",
        content_type="application/json",
        headers={"tenant": "t1", "n": 3, "flag": True, "long": "x" * 300},
        routing_key="rk",
        timestamp=stamp,
    )
    m = amqp10.decode(record)
    assert m.body == b"b" * 300
    assert m.routing_key == "rk"
    assert m.headers == {"tenant": "t1", "n": 3, "flag": True, "long": "x" * 300}
    assert m.properties == {
        "delivery_mode": 2,
        "message_id": "id-1",
        "correlation_id": "c",
        "content_type": "application/json",
        "timestamp": stamp,
    }


def test_repeated_sections_are_not_shared_between_messages() -> None:
    record = amqp10.encode(b"1", headers={"a": "b"})
    first, second = amqp10.decode(record), amqp10.decode(record)
    first.headers["a"] = "changed"
    assert second.headers == {"a": "b"}


def test_a_record_that_is_no_message_is_a_protocol_error() -> None:
    with pytest.raises(StreamProtocolError, match="no section"):
        amqp10.decode(b"\x01\x02")
    with pytest.raises(StreamProtocolError, match="cut short"):
        amqp10.decode(STORED[:40])
