"""The ``rabbitmq`` sink into streams over the stream protocol: each row stored exactly once,
when the same write runs twice and when a task is killed mid-partition and retried (counted
by reading the stream back)."""

from __future__ import annotations

from collections import Counter

import pika
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rabbitry.consumer.streams import StreamReader
from tests.integration.test_spark import rows_failing_once
from tests.integration.test_spark_source import declare_stream
from tests.integration.test_spark_source_streams import (  # noqa: F401 - fixtures
    StreamBroker,
    spark,
    stream_broker,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.broker]


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
    spark: SparkSession,  # noqa: F811
    stream_broker: StreamBroker,  # noqa: F811
) -> None:
    declare_stream(stream_broker, "twice")  # type: ignore[arg-type]
    df = spark.range(0, 20_000, numPartitions=4).select(F.col("id").cast("string").alias("body"))
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
    assert set(counts) == {str(i) for i in range(20_000)}
    assert set(counts.values()) == {1}


def test_a_task_killed_mid_partition_leaves_each_row_once(
    spark: SparkSession,  # noqa: F811
    stream_broker: StreamBroker,  # noqa: F811
) -> None:
    declare_stream(stream_broker, "killed")  # type: ignore[arg-type]
    # late in partition 1: its earlier rows are stored by the failing attempt
    df = rows_failing_once(spark, fail_at=39_000)
    write(df, stream_broker, routing_key="killed", body_column="body")  # protocol=auto
    counts = stored(stream_broker, "killed")
    assert set(counts) == {str(i) for i in range(60_000)}
    assert set(counts.values()) == {1}


def test_a_super_stream_gets_each_row_once_in_the_partition_its_key_picks(
    spark: SparkSession,  # noqa: F811
    stream_broker: StreamBroker,  # noqa: F811
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
    df = spark.range(0, 10_000, numPartitions=2).select(
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
    assert set(eu) == {str(i) for i in range(0, 10_000, 2)}
    assert set(us) == {str(i) for i in range(1, 10_000, 2)}
    assert set(eu.values()) == set(us.values()) == {1}
