"""``minPartitions``: one stream's range read by several Spark tasks, over both protocols, every
message once and in the same rows as one task per stream reads; a read of fewer messages than
the pieces asked still gets that many tasks (one message each at worst)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.integration.conftest import StreamBroker
from tests.integration.test_spark_source import declare_stream, publish, source

pytestmark = [pytest.mark.timeout(900), pytest.mark.broker, pytest.mark.xdist_group("spark-source")]


@pytest.mark.parametrize("protocol", ["stream", "amqp"])
def test_min_partitions_above_the_streams_reads_every_message_once(
    spark: SparkSession, stream_broker: StreamBroker, protocol: str
) -> None:
    declare_stream(stream_broker, "left")  # type: ignore[arg-type]
    declare_stream(stream_broker, "right")  # type: ignore[arg-type]
    publish(stream_broker, 700, queue="left")  # type: ignore[arg-type]
    publish(stream_broker, 300, queue="right", first=700)  # type: ignore[arg-type]
    options = {"protocol": protocol, "stream_port": str(stream_broker.stream_port)}

    def read(**more: str) -> tuple[int, list[dict[str, Any]]]:
        frame = source(spark, stream_broker, stream="left,right", **options, **more)  # type: ignore[arg-type]
        rows = [r.asDict(recursive=True) for r in frame.collect()]
        return frame.rdd.getNumPartitions(), rows

    tasks, rows = read(minPartitions="5")
    assert tasks >= 5  # two streams, each cut by its share: 700 -> 4 pieces, 300 -> 2
    by_stream = {s: [r["offset"] for r in rows if r["stream"] == s] for s in ("left", "right")}
    assert by_stream == {"left": list(range(700)), "right": list(range(300))}
    ids = sorted(int(r["properties"]["message_id"][1:]) for r in rows)
    assert ids == list(range(1000))

    one_each, whole = read()
    assert one_each == 2
    assert rows == whole

    # few messages for the pieces asked: still at least that many, one message each at worst
    tasks, rows = read(
        minPartitions="4",
        startingOffsets='{"left": 0, "right": 0}',
        endingOffsets='{"left": 3, "right": 2}',
    )
    assert tasks >= 4
    assert [(r["stream"], r["offset"]) for r in rows] == [
        ("left", 0),
        ("left", 1),
        ("left", 2),
        ("right", 0),
        ("right", 1),
    ]
