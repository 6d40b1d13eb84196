"""Names outside ASCII: RabbitMQ takes any UTF-8 name of up to 255 bytes, and so does the spec,
so a queue named ``café`` behind an exchange named ``commandes-été`` is applied, published to,
checked before consuming and consumed by both workers, retries included. (The AMQP 0-9-1
grammar pamqp checks names against is ASCII: a worker once retried its connection for ever on
such a queue.)"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.publisher import Publisher
from rabbitry.topology import load_spec
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_worker import depth
from tests.waiting import wait_for

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        exchanges:
          - {name: commandes-été, type: direct}
        queues:
          - name: café
            retry: {attempts: 3, backoff: [100ms]}
        bindings:
          - {source: commandes-été, destination: café, routing_key: crème}
""")


@pytest.mark.parametrize("shell", ["blocking", "asyncio"])
def test_a_queue_and_exchange_named_outside_ascii_are_consumed_with_their_retries(
    broker: Broker, shell: str
) -> None:
    path = broker.spec(SPEC)
    broker.apply(SPEC)
    app = App(load_spec(path, {"vhost": broker.vhost, "stack": broker.stack}))
    calls: list[tuple[str, int]] = []

    @app.handler("café")
    def handle(message: IncomingMessage) -> None:
        calls.append((message.body.decode(), message.attempt))
        if message.attempt == 1:
            raise RuntimeError("fails once")

    with Publisher(broker.vhost_amqp_url) as publisher:
        for i in range(3):
            publisher.publish(f"tarte-{i}".encode(), exchange="commandes-été", routing_key="crème")

    expected = sorted((f"tarte-{i}", attempt) for i in range(3) for attempt in (1, 2))

    def done() -> bool:
        return sorted(calls) == expected

    if shell == "blocking":
        worker = Worker(app, broker.vhost_amqp_url)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            assert wait_for(done), calls
        finally:
            worker.stop()
            thread.join(timeout=30)
        assert not thread.is_alive()
        metrics = worker.metrics
    else:

        async def run() -> AsyncWorker:
            async_worker = AsyncWorker(app, broker.vhost_amqp_url)
            task = asyncio.create_task(async_worker.run())
            deadline = time.monotonic() + 30
            while not done() and time.monotonic() < deadline and not task.done():
                await asyncio.sleep(0.02)
            await async_worker.stop()
            await task
            return async_worker

        metrics = asyncio.run(run()).metrics
    assert done(), calls
    assert metrics["café"].retried, metrics["café"]
    assert depth(broker, "café") == 0
