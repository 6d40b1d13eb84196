"""Every client reconnects by one rule (``rabbitry.amqp.connector``), checked on the wire
against the scripted broker: the blocking and asyncio publishers and workers alike.

After a connection that was up goes away, the first try goes out at once (to the next node; with
one node, to that node again); the back-off pauses only once a try has failed. Here the back-off
is a minute long, so a client that paused after the loss would miss the bound."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from rabbitry.amqp.settings import Backoff
from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.publisher import AsyncPublisher, Publisher
from rabbitry.testing import ScriptedBroker
from tests.unit.testing.test_scripted_worker_features import drive, until

A_MINUTE = Backoff(initial=60.0, maximum=60.0, jitter=0.0, give_up_after=None)


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as scripted:
        scripted.declare_queue("work")
        yield scripted


def bodies(broker: ScriptedBroker) -> list[bytes]:
    return [m.body for m in broker.queue("work").messages]


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_worker_consumes_again_at_once_after_the_broker_closed_its_connection(
    broker: ScriptedBroker, kind: type[Worker] | type[AsyncWorker]
) -> None:
    app = App()
    got: list[bytes] = []

    @app.handler("work")
    def handle(message: IncomingMessage) -> None:
        got.append(message.body)

    broker.put("work", b"before")
    worker = kind(app, broker.url, backoff=A_MINUTE)

    def script() -> None:
        until(broker, lambda b: got == [b"before"])
        broker.close_connections()
        until(broker, lambda b: len(b.received("basic.consume")) == 2)
        broker.put("work", b"after")
        until(broker, lambda b: got == [b"before", b"after"])

    drive(worker, script)
    assert broker.connections_opened == 2


def test_the_publisher_publishes_again_at_once_after_the_broker_closed_its_connection(
    broker: ScriptedBroker,
) -> None:
    with Publisher(broker.url, backoff=A_MINUTE) as publisher:
        assert publisher.publish(b"before", routing_key="work").ok
        broker.close_connections()
        # a paused publisher would block the caller for the whole pause: publish beside it
        after = threading.Thread(
            target=publisher.publish, args=(b"after",), kwargs={"routing_key": "work"}, daemon=True
        )
        after.start()
        until(broker, lambda b: bodies(b) == [b"before", b"after"])
        after.join()
        assert publisher.stats.reconnects == 1
    assert broker.connections_opened == 2


def test_the_async_publisher_publishes_again_at_once_after_the_broker_closed_its_connection(
    broker: ScriptedBroker,
) -> None:
    async def main() -> int:
        async with AsyncPublisher(broker.url, backoff=A_MINUTE) as publisher:
            assert (await publisher.publish(b"before", routing_key="work")).ok
            broker.close_connections()
            await asyncio.to_thread(until, broker, lambda b: b.connections_opened == 2)
            assert (await publisher.publish(b"after", routing_key="work")).ok
            return publisher.stats.reconnects

    assert asyncio.run(main()) == 1
    assert bodies(broker) == [b"before", b"after"]
