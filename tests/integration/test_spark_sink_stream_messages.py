"""The sink's messages into a stream, as a consumer over AMQP 0-9-1 reads them: the same body,
message id, content type, routing key and headers whether the rows went over the stream
protocol (encoded column by column from Arrow batches) or over AMQP 0-9-1."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rabbitry.consumer.streams import StreamReader
from tests.integration.conftest import StreamBroker
from tests.integration.test_spark_source import declare_stream

pytestmark = [pytest.mark.timeout(600), pytest.mark.broker, pytest.mark.xdist_group("spark-sink")]

ROWS = 3_000


def messages(broker: StreamBroker, stream: str) -> dict[str, tuple[Any, ...]]:
    """Each message of ``stream`` by its id: body, content type, routing key, headers (but the
    offset the broker adds)."""
    with StreamReader(broker.vhost_amqp_url, prefetch=2000) as reader:
        found = list(reader.read(stream, 0, ROWS))
    return {
        m.message_id or "": (
            m.body,
            m.properties.get("content_type"),
            m.routing_key,
            {k: v for k, v in m.headers.items() if k != "x-stream-offset"},
        )
        for m in found
    }


def test_a_consumer_reads_the_same_messages_over_either_path(
    spark: SparkSession,
    stream_broker: StreamBroker,
) -> None:
    df = spark.range(0, ROWS, numPartitions=3).select(
        F.concat(F.lit("é✓ row "), F.col("id").cast("string")).alias("body"),
        F.when(F.col("id") % 3 == 0, None).otherwise(F.col("id") * 7).alias("n"),
        F.when(F.col("id") % 5 == 0, None).otherwise(F.lit("日本")).alias("kind"),
        (F.col("id") / 4).alias("ratio"),
        (F.col("id") % 2 == 0).alias("even"),
    )
    found = {}
    for protocol in ("stream", "amqp"):
        declare_stream(stream_broker, f"over-{protocol}")  # type: ignore[arg-type]
        df.write.format("rabbitmq").mode("append").option(
            "url", stream_broker.vhost_amqp_url
        ).option("stream_port", str(stream_broker.stream_port)).options(
            routing_key=f"over-{protocol}",
            body_column="body",
            header_columns="n,kind,ratio,even",
            id_prefix="same-rows",
            protocol=protocol,
        ).save()
        found[protocol] = messages(stream_broker, f"over-{protocol}")
    assert len(found["stream"]) == ROWS
    over_stream = {k: (*v[:2], v[3]) for k, v in found["stream"].items()}
    over_amqp = {k: (*v[:2], v[3]) for k, v in found["amqp"].items()}
    assert over_stream == over_amqp
    body, content_type, routing_key, headers = found["stream"]["same-rows:0:0:4"]
    assert (body.decode(), content_type, routing_key) == (
        "é✓ row 4",
        "text/plain; charset=utf-8",
        "over-stream",
    )
    assert headers == {"n": 28, "kind": "日本", "ratio": 1.0, "even": True}
    *_, headers = found["stream"]["same-rows:0:0:15"]  # null headers are left out
    assert headers == {"ratio": 3.75, "even": False}
