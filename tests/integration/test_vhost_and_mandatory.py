"""Nothing published where nobody meant it: a URL naming another vhost than the one asked for
is refused, and a message no queue receives is an ``Unroutable`` error unless the publisher
says it may be dropped (``mandatory=False``). Counts are exact (passive declares)."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from rabbitry.errors import BrokerError, Unroutable
from rabbitry.publisher import AsyncPublisher, Message, Publisher, Status
from rabbitry.testing import TestVhost
from rabbitry.testing.vhosts import create_test_vhost, delete_vhost

pytestmark = pytest.mark.broker


def count(url: str, queue: str) -> int:
    """Exact message count of ``queue`` in the vhost of ``url`` (a passive declare)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


def declare(url: str, *queues: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        for queue in queues:
            channel.queue_declare(queue, durable=True)
    finally:
        connection.close()


@pytest.fixture
def other_vhost(rabbitmq_vhost: TestVhost) -> Iterator[TestVhost]:
    """A second vhost on the same broker: where a wrong URL would have published."""
    vhost = create_test_vhost(rabbitmq_vhost.broker)
    try:
        yield vhost
    finally:
        delete_vhost(vhost.broker, vhost.name)


def test_from_spec_with_a_url_naming_another_vhost_is_refused_and_publishes_nothing(
    rabbitmq_vhost: TestVhost, other_vhost: TestVhost, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            version: 1
            vhosts:
              - name: {rabbitmq_vhost.name}
                queues:
                  - name: orders
            """
        )
    )
    declare(rabbitmq_vhost.amqp_url, "orders")
    declare(other_vhost.amqp_url, "orders")  # same name: a misrouted publish would land here
    wrong = other_vhost.amqp_url

    with (
        pytest.raises(BrokerError) as caught,
        Publisher.from_spec(spec, vhost=rabbitmq_vhost.name, url=wrong) as pub,
    ):
        pub.publish(b"lost?", routing_key="orders")
    message = str(caught.value)
    assert repr(other_vhost.name) in message and repr(rabbitmq_vhost.name) in message
    assert f":{other_vhost.password}@" not in message and ":***@" in message  # masked

    async def refused() -> None:
        async with AsyncPublisher.from_spec(spec, vhost=rabbitmq_vhost.name, url=wrong) as pub:
            await pub.publish(b"lost?", routing_key="orders")

    with pytest.raises(BrokerError, match="names vhost"):
        asyncio.run(refused())
    assert count(other_vhost.amqp_url, "orders") == 0
    assert count(rabbitmq_vhost.amqp_url, "orders") == 0

    # the same broker named without a vhost: the spec's vhost is the one used
    bare = rabbitmq_vhost.broker.amqp_url("/").rsplit("/", 1)[0]
    with Publisher.from_spec(spec, vhost=rabbitmq_vhost.name, url=bare) as pub:
        assert all(d.ok for d in pub.publish_many([b"m"] * 5, routing_key="orders"))
    assert count(rabbitmq_vhost.amqp_url, "orders") == 5
    assert count(other_vhost.amqp_url, "orders") == 0


@pytest.fixture
def events(rabbitmq_vhost: TestVhost) -> str:
    """A topic exchange whose only binding takes ``order.#`` into the queue ``orders``."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_vhost.amqp_url))
    try:
        channel = connection.channel()
        channel.exchange_declare("events", "topic", durable=True)
        channel.queue_declare("orders", durable=True)
        channel.queue_bind("orders", "events", "order.#")
    finally:
        connection.close()
    return "events"


def test_an_unroutable_publish_is_unroutable_by_default(
    rabbitmq_vhost: TestVhost, events: str
) -> None:
    url = rabbitmq_vhost.amqp_url
    with Publisher(url, exchange=events) as pub:
        with pytest.raises(Unroutable, match=r"user\.created.*312 NO_ROUTE"):
            pub.publish(b"x", routing_key="user.created")
        assert pub.publish(b"x", routing_key="order.created").ok
        assert all(d.ok for d in pub.publish_many([b"o"] * 4, routing_key="order.1"))
        keys = ["order.1", "user.1", "order.2", "user.2"]
        settled = pub.publish_many([Message(b"y", routing_key=k) for k in keys])
    assert [d.status for d in settled] == [
        Status.CONFIRMED,
        Status.RETURNED,
        Status.CONFIRMED,
        Status.RETURNED,
    ]
    assert all(isinstance(d.error, Unroutable) for d in settled if not d.ok)

    async def main() -> list[Any]:
        async with AsyncPublisher(url, exchange=events) as pub:
            with pytest.raises(Unroutable):
                await pub.publish(b"x", routing_key="user.created")
            return await pub.publish_many([b"z"] * 3, routing_key="user.created")

    returned = asyncio.run(main())
    assert [d.status for d in returned] == [Status.RETURNED] * 3
    assert count(url, "orders") == 1 + 4 + 2  # exactly the routed ones


def test_mandatory_off_lets_the_broker_drop_what_no_queue_takes(
    rabbitmq_vhost: TestVhost, events: str
) -> None:
    url = rabbitmq_vhost.amqp_url
    with Publisher(url, exchange=events, mandatory=False) as pub:
        assert pub.publish(b"x", routing_key="user.created").ok  # confirmed, and dropped
        assert pub.publish(b"x", routing_key="order.created").ok
        with pytest.raises(Unroutable):  # one message may still ask
            pub.publish(b"x", routing_key="user.created", mandatory=True)
    with Publisher(url, exchange=events) as pub:  # or one message may say so
        assert pub.publish(b"x", routing_key="user.created", mandatory=False).ok

    async def main() -> bool:
        async with AsyncPublisher(url, exchange=events, mandatory=False) as pub:
            return (await pub.publish(b"x", routing_key="user.created")).ok

    assert asyncio.run(main())
    assert count(url, "orders") == 1
