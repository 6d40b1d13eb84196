"""The ``rabbitmq`` sink into streams over the stream protocol: each row stored exactly once,
when the same write runs twice and when a task is killed mid-partition and retried (counted
by reading the stream back)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pika
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rabbitry.consumer.streams import StreamReader
from tests.integration.conftest import StreamBroker
from tests.integration.spark_sessions import ROWS_PER_CHUNK
from tests.integration.test_spark_source import declare_stream

pytestmark = [pytest.mark.timeout(900), pytest.mark.broker, pytest.mark.xdist_group("spark-sink")]


def write(df: DataFrame, broker: StreamBroker, **options: str) -> None:
    df.write.format("rabbitmq").mode("append").option("url", broker.vhost_amqp_url).option(
        "stream_port", str(broker.stream_port)
    ).options(**options).save()


def stored(broker: StreamBroker, stream: str) -> Counter[str]:
    """How often each body is in ``stream``: everything from its first offset to its end."""
    with StreamReader(broker.vhost_amqp_url, prefetch=2000) as reader:
        first, end = reader.bounds(stream)
        return Counter(m.body.decode() for m in reader.read(stream, first, end))


def test_the_same_write_run_twice_stores_each_row_once(
    spark: SparkSession,
    stream_broker: StreamBroker,
) -> None:
    declare_stream(stream_broker, "twice")  # type: ignore[arg-type]
    df = spark.range(0, 8_000, numPartitions=4).select(F.col("id").cast("string").alias("body"))
    for _ in range(2):
        write(
            df,
            stream_broker,
            routing_key="twice",
            body_column="body",
            id_prefix="load-2026-11-27",
            protocol="stream",
        )
    counts = stored(stream_broker, "twice")
    assert set(counts) == {str(i) for i in range(8_000)}
    assert set(counts.values()) == {1}


def test_a_task_killed_mid_partition_leaves_each_row_once(
    spark: SparkSession,
    stream_broker: StreamBroker,
    tmp_path: Path,
) -> None:
    declare_stream(stream_broker, "killed")  # type: ignore[arg-type]
    # Late in partition 1 (ids 20,000-39,999): its earlier rows are stored by the failing
    # attempt. (Rows reach the sink's Python process through a buffer of 64 KB: thousands of
    # small rows must come before the failure for some of them to be handed over first.)
    fail_at = 39_000
    assert fail_at - 20_000 > 5 * ROWS_PER_CHUNK  # chunks of the partition come before it
    url = stream_broker.vhost_amqp_url
    stored_first = tmp_path / "stored-before-failing"

    @F.udf("string", useArrow=False)
    def body(value: int) -> str:
        from pyspark import TaskContext

        from rabbitry.consumer.streams import StreamReader as Reader

        context = TaskContext.get()
        if value == fail_at and context is not None and context.attemptNumber() == 0:
            # Until a row of this attempt is in the stream, bounded: the test fails below
            # (nothing was stored twice to be kept once) if none arrived.
            deadline = time.monotonic() + 60
            with Reader(url, prefetch=2000) as reader:
                while time.monotonic() < deadline:
                    first, end = reader.bounds("killed")
                    bodies = (m.body for m in reader.read("killed", first, end))
                    if any(20_000 <= int(b) < fail_at for b in bodies):
                        stored_first.write_text(f"offsets {first}-{end}")
                        break
                    time.sleep(0.05)
            raise RuntimeError("injected failure of the first attempt")
        return str(value)

    df = spark.range(0, 60_000, numPartitions=3).select(body("id").alias("body"))
    write(df, stream_broker, routing_key="killed", body_column="body")  # protocol=auto
    counts = stored(stream_broker, "killed")
    assert stored_first.exists(), "the failing attempt stored nothing: no retry was seen"
    assert set(counts) == {str(i) for i in range(60_000)}
    assert set(counts.values()) == {1}


def test_a_super_stream_gets_each_row_once_in_the_partition_its_key_picks(
    spark: SparkSession,
    stream_broker: StreamBroker,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(stream_broker.vhost_amqp_url))
    channel = connection.channel()
    channel.exchange_declare("orders", "direct", durable=True, arguments={"x-super-stream": True})
    for i, key in enumerate(("eu", "us")):
        channel.queue_declare(f"orders-{key}", durable=True, arguments={"x-queue-type": "stream"})
        channel.queue_bind(
            f"orders-{key}", "orders", key, arguments={"x-stream-partition-order": i}
        )
    connection.close()
    df = spark.range(0, 4_000, numPartitions=2).select(
        F.col("id").cast("string").alias("body"),
        F.when(F.col("id") % 2 == 0, "eu").otherwise("us").alias("region"),
    )
    for _ in range(2):
        write(
            df,
            stream_broker,
            exchange="orders",
            routing_key_column="region",
            body_column="body",
            id_prefix="orders-load",
            protocol="stream",
        )
    eu, us = stored(stream_broker, "orders-eu"), stored(stream_broker, "orders-us")
    assert set(eu) == {str(i) for i in range(0, 4_000, 2)}
    assert set(us) == {str(i) for i in range(1, 4_000, 2)}
    assert set(eu.values()) == set(us.values()) == {1}
