"""Two brokers on one host with the same user and password, each with a stream ``orders`` in
a vhost of the same name, holding different messages: the stream port the Spark source and
sink find by default (``RABBITRY_STREAM_URL``, as another broker's ``dev-broker env`` left it)
is the other broker's. The source must read, and the sink write, the AMQP URL's broker: over
AMQP 0-9-1 with one log line naming both clusters (``protocol=auto``), or refuse
(``protocol=stream``). Counted by reading each broker's stream."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pika
import pytest
from pyspark.sql import SparkSession

from rabbitry.amqp.channel import Channel
from rabbitry.consumer.streams import StreamReader
from rabbitry.spark.checks import plan_write
from rabbitry.spark.options import SparkSinkError, SparkSourceError
from rabbitry.spark.rows import Column, ColumnKind
from rabbitry.spark.source_plan import plan_read
from rabbitry.spark.source_protocol import STREAM_URL_ENV
from rabbitry.testing import Broker, create_test_vhost, delete_vhost

pytestmark = [pytest.mark.timeout(600), pytest.mark.broker]

STREAM = "orders"
OURS = [f"ours-{i}" for i in range(3)]
"""What the AMQP URL's broker holds."""
THEIRS = [f"theirs-{i}" for i in range(5)]
"""What the other broker, whose stream port is found by default, holds."""


@dataclass(frozen=True)
class TwoBrokers:
    ours_url: str
    """The vhost's AMQP URL on the broker the source and sink are given."""
    theirs_url: str
    """The same vhost on the other broker, whose stream port is the default one."""
    theirs_stream_port: int

    @property
    def environ(self) -> dict[str, str]:
        """``RABBITRY_STREAM_URL`` naming the other broker's stream port on the same host."""
        host = urlsplit(self.ours_url).hostname
        return {STREAM_URL_ENV: f"rabbitmq-stream://{host}:{self.theirs_stream_port}/"}


def stream_port_of(broker: Broker) -> int | None:
    """The broker's published stream port, or ``RABBITRY_STREAM_URL``'s for the shared
    broker (``rabbitry dev-broker env`` sets it beside ``RABBITMQ_URL``)."""
    if broker.stream_port is not None:
        return broker.stream_port
    given = urlsplit(os.environ.get(STREAM_URL_ENV, ""))
    return given.port if given.hostname == broker.host else None


def fill(url: str, bodies: list[str]) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    for body in bodies:
        channel.basic_publish("", STREAM, body.encode())
    connection.close()


def stored(url: str) -> Counter[str]:
    """Each body in the stream, with how often it is there: read over AMQP 0-9-1."""
    with StreamReader(url) as reader:
        first, end = reader.bounds(STREAM)
        return Counter(m.body.decode() for m in reader.read(STREAM, first, end))


def cluster_name(url: str) -> str:
    with Channel(url) as channel:
        return str(channel.server_properties["cluster_name"])


@pytest.fixture
def two_brokers(
    request: pytest.FixtureRequest, rabbitmq_broker: Broker, rabbitmq_broker_factory: Any
) -> Iterator[TwoBrokers]:
    theirs: Broker = rabbitmq_broker
    if stream_port_of(theirs) is None:
        theirs = request.getfixturevalue("stream_capable_broker")
    theirs_port = stream_port_of(theirs)
    assert theirs_port is not None
    ours: Broker = rabbitmq_broker_factory(
        username=theirs.username, password=theirs.password
    ).broker
    assert ours.stream_port is not None and ours.stream_port != theirs_port
    assert ours.host == theirs.host
    vhost = create_test_vhost(theirs)
    create_test_vhost(ours, vhost.name)
    try:
        pair = TwoBrokers(
            ours.amqp_url(vhost.name),
            theirs.amqp_url(vhost.name),
            theirs_port,
        )
        assert cluster_name(pair.ours_url) != cluster_name(pair.theirs_url)
        fill(pair.ours_url, OURS)
        fill(pair.theirs_url, THEIRS)
        yield pair
    finally:
        delete_vhost(theirs, vhost.name)


def test_the_source_reads_the_amqp_urls_broker_and_says_why_not_the_stream_port(
    two_brokers: TwoBrokers, caplog: pytest.LogCaptureFixture
) -> None:
    options = {"url": two_brokers.ours_url, "stream": STREAM}
    with caplog.at_level(logging.INFO, logger="rabbitry.spark"):
        plan = plan_read(options, streaming=False, environ=two_brokers.environ)
    assert plan.options.stream_port == two_brokers.theirs_stream_port  # the default found
    assert plan.stream_port is None  # over AMQP 0-9-1, from the AMQP URL's broker
    said = [r.getMessage() for r in caplog.records if "rabbitmq source" in r.getMessage()]
    assert len(said) == 1, said
    ours, theirs = cluster_name(two_brokers.ours_url), cluster_name(two_brokers.theirs_url)
    assert f"answers for cluster {theirs!r}, not for {ours!r}" in said[0]
    assert "reading over AMQP 0-9-1 from the AMQP URL's broker: give stream_port=" in said[0]


def test_protocol_stream_refuses_another_brokers_stream_port(two_brokers: TwoBrokers) -> None:
    options = {"url": two_brokers.ours_url, "stream": STREAM, "protocol": "stream"}
    with pytest.raises(SparkSourceError) as failed:
        plan_read(options, streaming=False, environ=two_brokers.environ)
    said = str(failed.value)
    ours = cluster_name(two_brokers.ours_url)
    host = urlsplit(two_brokers.ours_url).hostname
    assert (
        f"protocol=stream, but the stream port at {host}:{two_brokers.theirs_stream_port}" in said
    )
    assert "it is another broker's" in said
    assert (
        f"give stream_port= the port where cluster {ours!r} takes stream-protocol connections"
        in said
    )
    assert "read with protocol=amqp" in said


def test_the_sink_writes_to_the_amqp_urls_broker_or_refuses_with_protocol_stream(
    two_brokers: TwoBrokers, caplog: pytest.LogCaptureFixture
) -> None:
    columns = [Column("body", ColumnKind.STRING)]
    options = {"url": two_brokers.ours_url, "routing_key": STREAM, "body_column": "body"}
    with caplog.at_level(logging.INFO, logger="rabbitry.spark"):
        plan = plan_write(options, columns, streaming=False, environ=two_brokers.environ)
    assert plan.stream is None  # the confirmed AMQP path, to the AMQP URL's broker
    said = [r.getMessage() for r in caplog.records if "rabbitmq sink" in r.getMessage()]
    assert len(said) == 1, said
    ours, theirs = cluster_name(two_brokers.ours_url), cluster_name(two_brokers.theirs_url)
    assert f"answers for cluster {theirs!r}, not for {ours!r}" in said[0]
    assert "it is another broker's; writing 'orders' over AMQP 0-9-1" in said[0]

    with pytest.raises(SparkSinkError, match=r"protocol=stream, but the stream port at .* another"):
        plan_write(
            {**options, "protocol": "stream"}, columns, streaming=False, environ=two_brokers.environ
        )


@pytest.mark.xdist_group("spark-source")  # the worker that holds the Spark session already
def test_spark_reads_and_writes_the_amqp_urls_broker_given_another_brokers_stream_port(
    spark: SparkSession, two_brokers: TwoBrokers
) -> None:
    other_port = str(two_brokers.theirs_stream_port)
    frame = (
        spark.read.format("rabbitmq")
        .option("url", two_brokers.ours_url)
        .option("stream", STREAM)
        .option("stream_port", other_port)
        .load()
    )
    assert sorted(bytes(r.body).decode() for r in frame.collect()) == OURS

    written = [f"written-{i}" for i in range(40)]
    spark.createDataFrame([(b,) for b in written], "body string").repartition(2).write.format(
        "rabbitmq"
    ).mode("append").option("url", two_brokers.ours_url).option("routing_key", STREAM).option(
        "body_column", "body"
    ).option("stream_port", other_port).save()
    assert stored(two_brokers.ours_url) == Counter(OURS + written)
    assert stored(two_brokers.theirs_url) == Counter(THEIRS)
