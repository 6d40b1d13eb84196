"""Publisher and AsyncPublisher against the scripted broker: their real code, handshake to close,
with the broker's answers scripted (confirms, nacks, returns, a connection dropped mid-window).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from rabbitry.amqp import inprocess
from rabbitry.amqp.errors import ExchangeNotFound
from rabbitry.errors import Nacked, Unroutable
from rabbitry.publisher import AsyncPublisher, Publisher
from rabbitry.testing import NotModelled, PublishAnswer, ScriptedBroker


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as scripted:
        scripted.declare_queue("orders")
        yield scripted


def bodies(broker: ScriptedBroker, queue: str) -> list[bytes]:
    return [m.body for m in broker.queue(queue).messages]


def test_a_confirmed_publish_is_stored_once_and_the_confirm_follows_it(
    broker: ScriptedBroker,
) -> None:
    with Publisher(broker.url) as publisher:
        delivery = publisher.publish(b"hello", routing_key="orders", message_id="m-1")
    assert delivery.ok
    assert bodies(broker, "orders") == [b"hello"]
    assert broker.queue("orders").messages[0].message_id == "m-1"
    names = [f.name for f in broker.frames if f.channel == 1]
    assert names == [
        "channel.open",
        "channel.open-ok",
        "confirm.select",
        "confirm.select-ok",
        "basic.publish",
        "basic.ack",
    ]


def test_a_nacked_publish_raises_nacked_and_is_not_stored(broker: ScriptedBroker) -> None:
    broker.answer_publishes(PublishAnswer.NACK)
    with Publisher(broker.url) as publisher:
        with pytest.raises(Nacked):
            publisher.publish(b"lost", routing_key="orders")
        assert publisher.publish(b"kept", routing_key="orders").ok
        assert publisher.stats.nacked == 1
    assert bodies(broker, "orders") == [b"kept"]


def test_a_mandatory_message_no_queue_takes_raises_unroutable(broker: ScriptedBroker) -> None:
    with Publisher(broker.url) as publisher, pytest.raises(Unroutable):
        publisher.publish(b"x", routing_key="nowhere", mandatory=True)
    returned = broker.sent("basic.return")
    assert len(returned) == 1 and returned[0].method.reply_code == 312
    # the return comes before the confirm of the same message, as RabbitMQ sends them
    order = [f.name for f in broker.frames if f.sent and f.channel == 1][-2:]
    assert order == ["basic.return", "basic.ack"]


def test_a_missing_exchange_fails_that_message_and_the_channel_reopens(
    broker: ScriptedBroker,
) -> None:
    with Publisher(broker.url) as publisher:
        with pytest.raises(ExchangeNotFound):
            publisher.publish(b"x", exchange="gone", routing_key="orders")
        assert publisher.publish(b"after", routing_key="orders").ok
    assert [f.method.reply_code for f in broker.sent("channel.close")] == [404]
    assert bodies(broker, "orders") == [b"after"]


def test_a_connection_dropped_mid_window_republishes_the_unconfirmed_after_reconnecting(
    broker: ScriptedBroker,
) -> None:
    broker.answer_publishes(*["ack"] * 3, PublishAnswer.DROP)
    with Publisher(broker.url) as publisher:
        done = publisher.publish_many(
            [f"m{i}".encode() for i in range(10)], routing_key="orders", window=10
        )
        stats = publisher.stats
    assert all(d.ok for d in done)
    assert stats.reconnects == 1 and stats.republished == 7
    assert broker.connections_opened == 2
    # the first three were confirmed before the drop; the fourth was lost with the connection
    assert bodies(broker, "orders") == [f"m{i}".encode() for i in range(10)]


def test_nothing_is_published_between_connection_blocked_and_unblocked(
    broker: ScriptedBroker,
) -> None:
    broker.block("low on memory")  # sent as soon as the connection opens
    with Publisher(broker.url) as publisher:
        calling = threading.Event()
        done: list[bool] = []

        def publish() -> None:
            calling.set()
            done.append(publisher.publish(b"x", routing_key="orders").ok)

        thread = threading.Thread(target=publish)
        thread.start()
        assert calling.wait(10)
        broker.unblock()
        thread.join(10)
    assert done == [True]
    names = [f.name for f in broker.frames if f.name.startswith(("connection.", "basic."))]
    blocked, unblocked = names.index("connection.blocked"), names.index("connection.unblocked")
    assert "basic.publish" not in names[blocked:unblocked]
    assert names.index("basic.publish") > unblocked


def test_the_async_publisher_confirms_nacks_and_returns_the_same_way(
    broker: ScriptedBroker,
) -> None:
    async def main() -> None:
        broker.answer_publishes(PublishAnswer.NACK)
        async with AsyncPublisher(broker.url) as publisher:
            with pytest.raises(Nacked):
                await publisher.publish(b"lost", routing_key="orders")
            assert (await publisher.publish(b"kept", routing_key="orders")).ok
            with pytest.raises(Unroutable):
                await publisher.publish(b"x", routing_key="nowhere", mandatory=True)

    asyncio.run(main())
    assert bodies(broker, "orders") == [b"kept"]


def test_the_async_publisher_republishes_after_a_drop_mid_window(broker: ScriptedBroker) -> None:
    broker.answer_publishes(*["ack"] * 2, PublishAnswer.DROP)

    async def main() -> tuple[bool, int]:
        async with AsyncPublisher(broker.url) as publisher:
            done = await publisher.publish_many(
                [f"m{i}".encode() for i in range(6)], routing_key="orders", window=6
            )
            return all(d.ok for d in done), publisher.stats.reconnects

    ok, reconnects = asyncio.run(main())
    assert ok and reconnects == 1
    assert bodies(broker, "orders") == [f"m{i}".encode() for i in range(6)]


def test_what_the_broker_does_not_model_closes_the_connection_and_says_so() -> None:
    with ScriptedBroker() as broker:
        with pytest.raises(NotModelled, match="x-consistent-hash"):
            broker.declare_exchange("shards", "x-consistent-hash")
        with pytest.raises(NotModelled, match="declare it first"):
            broker.put("nowhere", b"x")


def test_only_an_attached_broker_answers_its_host_and_that_host_resolves_nowhere() -> None:
    broker = ScriptedBroker()
    assert broker.host.endswith(".invalid")  # RFC 6761: never a real host
    assert inprocess.peer_for(broker.host) is None
    with broker:
        assert inprocess.peer_for(broker.host.upper()) is broker
    assert inprocess.peer_for(broker.host) is None
