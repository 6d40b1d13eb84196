"""The source's options and rows: parsed and checked without a broker."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from rabbitry.consumer.message import IncomingMessage
from rabbitry.spark.offsets import OffsetKind
from rabbitry.spark.options import SourceOptionError
from rabbitry.spark.reader import BATCH_ROWS, SOURCE_TYPE, arrow_batches
from rabbitry.spark.source_options import DEFAULT_PARTITION_SIZE, SourceOptions
from rabbitry.spark.source_rows import COLUMNS, PROPERTY_FIELDS, header_text, row_of

URL = "amqp://app:s3cret@rabbit:5672/events"


def parse(streaming: bool | None = False, **options: str) -> SourceOptions:
    return SourceOptions.parse(options, streaming=streaming, environ={})


def test_defaults_depend_on_the_kind_of_read() -> None:
    batch = parse(url=URL, stream="a, b")
    assert batch.streams == ("a", "b")
    assert batch.starting(batch.streams).kind is OffsetKind.EARLIEST
    assert batch.ending(batch.streams).kind is OffsetKind.LATEST
    assert batch.max_records_per_partition == DEFAULT_PARTITION_SIZE
    assert batch.vhost == "events"
    assert "s3cret" not in batch.display_url and "s3cret" not in repr(batch)
    stream = parse(True, url=URL, stream="a", maxRecordsPerTrigger="100", prefetch="50")
    assert stream.starting(stream.streams).kind is OffsetKind.LATEST
    assert (stream.max_records_per_trigger, stream.prefetch) == (100, 50)


def test_a_super_stream_takes_keys_or_a_count_and_checks_offsets_later() -> None:
    keyed = parse(url=URL, super_stream="orders", partitions="eu, us")
    assert (keyed.super_stream, keyed.partitions, keyed.streams) == ("orders", ("eu", "us"), ())
    assert parse(url=URL, super_stream="orders", partitions="4").partition_count == 4
    later = parse(url=URL, super_stream="orders", startingOffsets='{"orders-0": 5}')
    assert dict(later.starting(("orders-0", "orders-1")).offsets) == {"orders-0": 5}
    with pytest.raises(SourceOptionError, match="not among the streams"):
        later.starting(("orders-1",))


@pytest.mark.parametrize(
    ("streaming", "options", "message"),
    [
        (False, {}, "give stream=<stream[,stream...]> or super_stream=<name>"),
        (False, {"stream": "a", "super_stream": "b"}, "(one of them)"),
        (False, {"stream": "a,a"}, "names a stream twice"),
        (False, {"stream": "a", "partitions": "2"}, "partitions belongs to super_stream="),
        (False, {"stream": "a", "prefetc": "1"}, "did you mean 'prefetch'"),
        (False, {"stream": "a", "maxRecordsPerTrigger": "5"}, "is for streaming reads"),
        (True, {"stream": "a", "endingOffsets": "latest"}, "is for batch reads"),
        (False, {"stream": "a", "prefetch": "0"}, "prefetch must be between 1 and 65535"),
        (False, {"stream": "a", "startingOffsets": '{"b": 1}'}, "'b' not among the streams"),
        (False, {"stream": "a", "read_timeout": "-1"}, "read_timeout must be positive"),
        (False, {"stream": "a", "failOnDataLoss": "maybe"}, "must be true or false"),
        (False, {"super_stream": "a", "management_url": "rabbit:15672"}, "http:// or https://"),
    ],
)
def test_bad_options_say_what_to_write(
    streaming: bool, options: dict[str, str], message: str
) -> None:
    with pytest.raises(SourceOptionError, match=re.escape(message)):
        parse(streaming, url=URL, **options)


def test_data_loss_fails_unless_told_and_the_management_api_follows_the_url() -> None:
    default = parse(url=URL, super_stream="orders")
    assert default.fail_on_data_loss is True
    assert default.management_url == "http://app:s3cret@rabbit:15672"
    assert "s3cret" not in repr(default)
    told = parse(url=URL, stream="a", failOnDataLoss="false", management_url="http://m:1")
    assert (told.fail_on_data_loss, told.management_url) == (False, "http://m:1")
    env = {"RABBITRY_MANAGEMENT_URL": "https://mgmt:15671"}
    from_env = SourceOptions.parse({"url": URL, "stream": "a"}, streaming=True, environ=env)
    assert from_env.management_url == "https://mgmt:15671"


def test_without_a_url_the_error_names_the_variable() -> None:
    with pytest.raises(SourceOptionError, match="set the environment variable RABBITRY_URL"):
        SourceOptions.parse({"stream": "a"}, streaming=False, environ={})
    got = SourceOptions.parse({"stream": "a", "url_env": "B"}, streaming=None, environ={"B": URL})
    assert got.url == URL


def test_a_delivery_becomes_a_row_in_schema_order() -> None:
    message = IncomingMessage.build(
        b'{"n": 1}',
        queue="orders-0",
        routing_key="0",
        message_id="m1",
        content_type="application/json",
        timestamp=1_700_000_000,
        delivery_mode=2,
        headers={"x-stream-offset": 7, "kind": b"raw", "n": 3, "ok": True, "t": {"a": [1]}},
    )
    body, key, headers, props, stream, offset, stamp = row_of(message, "orders-0", 7)
    assert (body, key, stream, offset) == (b'{"n": 1}', "0", "orders-0", 7)
    assert headers == {"kind": "raw", "n": "3", "ok": "true", "t": '{"a":[1]}'}
    assert stamp == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    named = dict(zip((name for name, _ in PROPERTY_FIELDS), props, strict=True))
    assert named["message_id"] == "m1" and named["delivery_mode"] == 2
    assert named["timestamp"] == stamp and named["priority"] is None
    assert header_text(None) is None


def test_rows_become_arrow_batches_of_the_schema_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    assert tuple(SOURCE_TYPE.names) == COLUMNS
    message = IncomingMessage.build(b"x", queue="s", message_id="m", headers={"k": "v"})
    rows = [row_of(message, "s", i) for i in range(BATCH_ROWS + 904)]
    batches = list(arrow_batches(rows))
    assert [b.num_rows for b in batches] == [BATCH_ROWS, 904]
    assert all(b.schema.equals(to_arrow_schema(SOURCE_TYPE, timezone="UTC")) for b in batches)
    first = batches[0].slice(0, 1).to_pylist()[0]
    assert (first["offset"], first["headers"], first["properties"]["message_id"]) == (
        0,
        [("k", "v")],
        "m",
    )
