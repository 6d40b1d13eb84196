"""The ``rabbitmq`` source over the stream protocol, on a broker that offers it (a container
broker: ``rabbitmq_stream`` enabled, its port published and advertised; ``stream_broker`` in
conftest.py), and its fallback to AMQP 0-9-1 on one that does not (a container broker without
the plugin)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from rabbitry.spark.source_plan import plan_read
from tests.integration.conftest import StreamBroker
from tests.integration.test_spark_source import (
    declare_stream,
    publish,
    restart_without_the_last_commit_reads_each_message_once,
    run_until_all_read,
    source,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.broker, pytest.mark.xdist_group("spark-source")]


def rows(spark: SparkSession, broker: StreamBroker, protocol: str, **options: str) -> list[Any]:
    frame = source(  # type: ignore[arg-type]
        spark, broker, protocol=protocol, stream_port=str(broker.stream_port), **options
    )
    return [r.asDict(recursive=True) for r in frame.collect()]


def test_both_protocols_read_the_same_rows(
    spark: SparkSession,
    stream_broker: StreamBroker,
) -> None:
    declare_stream(stream_broker, "same-rows")  # type: ignore[arg-type]
    publish(stream_broker, 1200, queue="same-rows", pad=300)  # type: ignore[arg-type]
    over_stream = rows(spark, stream_broker, "stream", stream="same-rows")
    over_amqp = rows(spark, stream_broker, "amqp", stream="same-rows")
    assert [r["offset"] for r in over_stream] == list(range(1200))
    assert over_stream == over_amqp
    middle = rows(
        spark,
        stream_broker,
        "stream",
        stream="same-rows",
        startingOffsets='{"same-rows": 250}',
        endingOffsets='{"same-rows": 700}',
        maxRecordsPerPartition="100",
    )
    assert [r["offset"] for r in middle] == list(range(250, 700))


def test_a_restarted_streaming_query_over_the_stream_protocol_reads_each_message_once(
    spark: SparkSession,
    stream_broker: StreamBroker,
    tmp_path: Path,
) -> None:
    declare_stream(stream_broker, "ticks")  # type: ignore[arg-type]
    publish(stream_broker, 400, queue="ticks")  # type: ignore[arg-type]
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    options = {"protocol": "stream", "stream_port": str(stream_broker.stream_port)}
    run_until_all_read(spark, stream_broker, checkpoint, out, 400, **options)  # type: ignore[arg-type]
    restart_without_the_last_commit_reads_each_message_once(
        spark,
        stream_broker,  # type: ignore[arg-type]
        checkpoint,
        out,
        **options,
    )


def test_a_broker_without_the_stream_plugin_falls_back_with_one_log_line(
    stream_broker: StreamBroker, rabbitmq_broker_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # its stream port is published, but nothing listens behind it
    plain = rabbitmq_broker_factory(env={"RABBITMQ_ENABLED_PLUGINS": "rabbitmq_management"})
    without = StreamBroker(plain.broker.amqp_url("/"), plain.broker.stream_port)
    declare_stream(without, "fallback")  # type: ignore[arg-type]
    publish(without, 10, queue="fallback")  # type: ignore[arg-type]
    port = str(without.stream_port)
    options = {"url": without.vhost_amqp_url, "stream": "fallback", "stream_port": port}
    with caplog.at_level(logging.INFO, logger="rabbitry.spark"):
        plan = plan_read(options, streaming=False)
    assert plan.stream_port is None
    said = [r.getMessage() for r in caplog.records if "rabbitmq source" in r.getMessage()]
    assert len(said) == 1, said
    assert f"no stream protocol at 127.0.0.1:{port}" in said[0]
    assert said[0].endswith("reading over AMQP 0-9-1")

    declare_stream(stream_broker, "fallback")  # type: ignore[arg-type]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rabbitry.spark"):
        plan = plan_read(
            {
                "url": stream_broker.vhost_amqp_url,
                "stream": "fallback",
                "stream_port": str(stream_broker.stream_port),
            },
            streaming=False,
        )

    assert plan.stream_port == stream_broker.stream_port
    said = [r.getMessage() for r in caplog.records if "rabbitmq source" in r.getMessage()]
    assert said == [
        f"rabbitmq source, fallback: reading over the stream protocol at 127.0.0.1:"
        f"{stream_broker.stream_port}"
    ]
