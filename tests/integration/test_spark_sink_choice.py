"""Which path the ``rabbitmq`` sink's driver chooses for an exchange, on a broker that offers
the stream protocol: a super stream goes over the stream protocol; any other exchange (a topic
exchange bound to classic queues) over AMQP 0-9-1, even though the broker's partitions query
answers for it too. No Spark needed: the choice is the driver's plain Python."""

from __future__ import annotations

import logging

import pika
import pytest

from rabbitry.spark.options import SinkOptions
from rabbitry.spark.stream_sink import stream_target
from tests.integration.conftest import StreamBroker

pytestmark = pytest.mark.broker


def options(broker: StreamBroker, **given: str) -> SinkOptions:
    return SinkOptions.parse(
        {"url": broker.vhost_amqp_url, "stream_port": str(broker.stream_port), **given}, {}
    )


def test_a_topic_exchange_bound_to_classic_queues_is_written_over_amqp(
    stream_broker: StreamBroker, caplog: pytest.LogCaptureFixture
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(stream_broker.vhost_amqp_url))
    channel = connection.channel()
    channel.exchange_declare("events", "topic", durable=True)
    for queue in ("p0", "p1"):
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, "events", f"kind.{queue[1]}")
    connection.close()
    chosen = options(stream_broker, exchange="events", routing_key_column="key")
    with caplog.at_level(logging.INFO, logger="rabbitry.spark"):
        target = stream_target(chosen, has_delays=False, port=stream_broker.stream_port)
    assert target is None
    assert "over the stream protocol" not in caplog.text


def test_a_super_stream_is_written_over_the_stream_protocol(stream_broker: StreamBroker) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(stream_broker.vhost_amqp_url))
    channel = connection.channel()
    channel.exchange_declare("orders", "direct", durable=True, arguments={"x-super-stream": True})
    for index in range(2):
        name = f"orders-{index}"
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        channel.queue_bind(
            name, "orders", str(index), arguments={"x-stream-partition-order": index}
        )
    connection.close()
    chosen = options(stream_broker, exchange="orders", routing_key_column="key")
    target = stream_target(chosen, has_delays=False, port=stream_broker.stream_port)
    assert target is not None
    assert target.super_stream == "orders"
