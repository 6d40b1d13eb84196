"""What the ``rabbitmq`` source asks of the broker, on every RabbitMQ release (marked
``versions``), without a JVM.

The source's driver side (``RabbitMQDataSource.schema``/``reader``/``streamReader``: streams,
bounds, offsets, super stream partitions, data loss) and its tasks' ``read`` are plain Python
that Spark calls; they are where the release shows: where a consumer at an offset starts and
what the stream's bounds are, how a stored message maps back to the columns, which offsets
retention keeps, how a super stream's partitions are bound. This module calls them as Spark
does and reads the Arrow record batches a task hands to Spark, over AMQP 0-9-1 and, where the
broker offers it (container brokers), over the stream protocol. The Spark modules read the same
through a Spark session on the current release: Spark's part does not depend on the broker's.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.streams import StreamReader
from rabbitry.spark.reader import SOURCE_TYPE, arrow_schema
from rabbitry.spark.source import RabbitMQDataSource
from rabbitry.spark.source_protocol import STREAM_URL_ENV, stream_port_from
from rabbitry.stream.blocking import StreamClient
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_spark_source import (
    REGIONS,
    SALES,
    declare_stream,
    lose_to_retention,
    named_super_streams,
    publish,
    retention_stream,
)

pytestmark = [pytest.mark.versions, pytest.mark.timeout(300)]


@pytest.fixture(params=["amqp", "stream"])
def protocol(request: pytest.FixtureRequest, rabbitmq_broker: Any) -> dict[str, str]:
    """The options that choose how the tasks read: AMQP 0-9-1, or the stream protocol on the
    broker's stream port (known for container brokers, as in every run of the version
    matrix; for a broker given by URL, the port of ``RABBITRY_STREAM_URL`` when it names that
    host, as ``rabbitry dev-broker env`` prints it; without one it is read over AMQP only)."""
    if request.param == "amqp":
        return {"protocol": "amqp"}
    port = _stream_port(rabbitmq_broker)
    if port is None:
        return {"protocol": "amqp"}
    return {"protocol": "stream", "stream_port": str(port)}


def _stream_port(rabbitmq_broker: Any) -> int | None:
    port: int | None = rabbitmq_broker.stream_port
    if port is None and os.environ.get(STREAM_URL_ENV):
        port = stream_port_from(rabbitmq_broker.amqp_url(), None, os.environ)
    return port


def data_source(broker: Broker, **options: str) -> RabbitMQDataSource:
    """The data source as Spark makes it on the driver (options in a case-insensitive dict)."""
    return RabbitMQDataSource(CaseInsensitiveDict({"url": broker.vhost_amqp_url, **options}))


def read(broker: Broker, **options: str) -> list[dict[str, Any]]:
    """A batch read as Spark runs it: the schema (which checks the options), the reader, and
    every partition's ``read``; the rows of the record batches, in partition order."""
    source = data_source(broker, **options)
    source.schema()
    reader = source.reader(SOURCE_TYPE)
    rows: list[dict[str, Any]] = []
    for partition in reader.partitions():
        batches = list(reader.read(partition))
        rows += pa.Table.from_batches(batches, schema=arrow_schema()).to_pylist()
    return rows


def streams_of(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["stream"] for r in rows)


def test_a_batch_read_honours_its_offsets(broker: Broker, protocol: dict[str, str]) -> None:
    declare_stream(broker, "events")
    publish(broker, 1000, queue="events")

    source = data_source(broker, stream="events", maxRecordsPerPartition="300", **protocol)
    assert len(source.reader(SOURCE_TYPE).partitions()) == 4  # in pieces of 300
    rows = read(broker, stream="events", maxRecordsPerPartition="300", **protocol)
    assert [r["offset"] for r in rows] == list(range(1000))
    assert [r["properties"]["message_id"] for r in rows] == [f"m{i}" for i in range(1000)]
    first = rows[0]
    assert (first["stream"], first["routing_key"], first["properties"]["content_type"]) == (
        "events",
        "events",
        "application/json",
    )
    assert dict(first["headers"]) == {"kind": "test", "n": "0"}
    assert first["timestamp"].timestamp() == 1_700_000_000
    assert sum(json.loads(r["body"])["n"] for r in rows) == sum(range(1000))

    part = read(
        broker,
        stream="events",
        startingOffsets='{"events": 100}',
        endingOffsets='{"events": 250}',
        **protocol,
    )
    assert [r["offset"] for r in part] == list(range(100, 250))
    assert read(broker, stream="events", startingOffsets="latest", **protocol) == []
    publish(broker, 5, queue="events", first=1000)
    tail = read(broker, stream="events", startingOffsets='{"events": 990}', **protocol)
    assert [r["offset"] for r in tail] == list(range(990, 1005))


def test_a_super_stream_reads_every_partition(broker: Broker, protocol: dict[str, str]) -> None:
    broker.apply(
        one_vhost_spec("""
        super_streams:
          - {name: orders, partitions: 3}
""")
    )
    publish(broker, 300, exchange="orders", keys=3)
    management = broker.management_url
    rows = read(broker, super_stream="orders", management_url=management, **protocol)
    assert streams_of(rows) == {"orders-0": 100, "orders-1": 100, "orders-2": 100}
    ids = [int(r["properties"]["message_id"][1:]) for r in rows]
    assert sorted(ids) == list(range(300))
    assert all(i % 3 == int(r["stream"][-1]) for i, r in zip(ids, rows, strict=True))
    keyed = read(
        broker, super_stream="orders", partitions="0,2", management_url=management, **protocol
    )
    assert set(streams_of(keyed)) == {"orders-0", "orders-2"}


def test_a_super_stream_with_named_keys_reads_every_partition_in_binding_order(
    broker: Broker, protocol: dict[str, str]
) -> None:
    """One declared by the spec, one as the stream protocol's create makes it (partitions not
    named ``<name>-<key>``)."""
    named_super_streams(broker)
    sales = SALES
    management = broker.management_url

    regions = read(broker, super_stream="regions", management_url=management, **protocol)
    assert streams_of(regions) == {f"regions-{k}": 30 for k in REGIONS}
    assert all(r["stream"] == f"regions-{r['routing_key']}" for r in regions)
    rows = read(broker, super_stream="sales", management_url=management, **protocol)
    assert streams_of(rows) == {stream: 20 for stream in sales.values()}
    assert all(r["stream"] == sales[r["routing_key"]] for r in rows)
    first_two = read(
        broker, super_stream="sales", partitions="2", management_url=management, **protocol
    )
    assert set(streams_of(first_two)) == {"sales-west", "sales-europe"}
    by_key = read(
        broker, super_stream="sales", partitions="apac", management_url=management, **protocol
    )
    assert set(streams_of(by_key)) == {"sales-east"}


def test_offsets_retention_removed_fail_the_read_unless_failondataloss_is_false(
    broker: Broker, protocol: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A streaming query's first micro-batch reads ``kept`` to offset 40; then retention
    removes offset 40 and more. The restarted query's micro-batch from 40 fails, or with
    ``failOnDataLoss=false`` says what it skipped and reads from the first offset held; a batch
    read from an offset removed does the same."""
    retention_stream(broker)
    query = data_source(broker, stream="kept", startingOffsets="earliest", **protocol)
    first_run = query.streamReader(SOURCE_TYPE)
    try:
        start = first_run.initialOffset()
        committed = first_run.latestOffset(start, first_run.getDefaultReadLimit())
    finally:
        first_run.stop()
    assert (start, committed) == ({"kept": 0}, {"kept": 40})

    first = lose_to_retention(broker)

    def restarted(**options: str) -> tuple[Any, dict[str, int]]:
        """The query restarted from its checkpoint: the next micro-batch's reader and end."""
        stream = data_source(broker, stream="kept", **protocol, **options).streamReader(SOURCE_TYPE)
        return stream, stream.latestOffset(committed, stream.getDefaultReadLimit())

    failing, end = restarted()
    try:
        with pytest.raises(Exception) as failed:
            failing.partitions(committed, end)
    finally:
        failing.stop()
    message = str(failed.value)
    assert f"stream 'kept' no longer holds offset 40: the first offset it holds is {first}" in (
        message
    )
    assert "set failOnDataLoss=false" in message

    skipping, end = restarted(failOnDataLoss="false")
    try:
        with caplog.at_level(logging.WARNING, logger="rabbitry.spark"):
            partitions = skipping.partitions(committed, end)
        held = [
            row
            for partition in partitions
            for batch in skipping.read(partition)
            for row in batch.to_pylist()
        ]
    finally:
        skipping.stop()
    assert f"failOnDataLoss is false: skipped {first - 40} offsets" in caplog.text
    assert held[0]["offset"] == first  # offsets skip one where a segment begins: ids are counted
    since = int(held[0]["properties"]["message_id"][1:])
    assert [r["properties"]["message_id"] for r in held] == [f"m{i}" for i in range(since, 1040)]

    with pytest.raises(Exception, match=f"no longer holds offset 10: .* holds is {first}"):
        read(broker, stream="kept", startingOffsets='{"kept": 10}', **protocol)
    rest = read(
        broker, stream="kept", startingOffsets='{"kept": 10}', failOnDataLoss="false", **protocol
    )
    assert [r["offset"] for r in rest][:1] == [first]
    assert [r["properties"]["message_id"] for r in rest] == [f"m{i}" for i in range(since, 1040)]


def test_stream_bounds_from_edge_chunks_are_the_bounds_read_message_by_message(
    broker: Broker, rabbitmq_broker: Any
) -> None:
    """Over the stream protocol a stream's first and last chunk say where it begins and ends;
    over AMQP 0-9-1 the messages are read until they pause. Both answer alike: for a stream
    never written, one written in many chunks, and one whose first offsets retention removed."""
    port = _stream_port(rabbitmq_broker)
    if port is None:
        pytest.fail(
            f"no stream port for this broker: set {STREAM_URL_ENV} (dev-broker env prints it)"
        )
    declare_stream(broker, "never")
    declare_stream(broker, "many")
    for first in range(0, 900, 300):  # three runs of a publisher: chunks of several sizes
        publish(broker, 300, queue="many", first=first, pad=first // 3)
    retention_stream(broker)
    lose_to_retention(broker)
    settings = ConnectionSettings.from_url(broker.vhost_amqp_url)
    with StreamClient(settings, port=port) as client:
        edges = {s: client.bounds(s, patience=1.0) for s in ("never", "many", "kept")}
    with StreamReader(broker.vhost_amqp_url) as reader:
        read = reader.bounds_of(["never", "many", "kept"])
    assert edges == read
    assert edges["never"] == (0, 0) and edges["many"] == (0, 900)
    assert edges["kept"] is not None and edges["kept"][0] > 40
