"""Request/reply on a real broker: ``request`` over direct reply-to, a handler's return value
as the reply, timeouts, unroutable requests and many requests at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from rabbitry.consumer import App, AsyncWorker, ImmediateRetry, IncomingMessage, Worker
from rabbitry.publisher import AsyncPublisher, Publisher, RequestTimeout, Unroutable
from rabbitry.topology import load_spec
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        queues:
          - name: rpc
          - {name: rpc-quorum, type: quorum}
          - name: unserved
""")


@pytest.fixture
def applied(broker: Broker) -> Broker:
    return broker.apply(SPEC)


def doubling_app(broker: Broker) -> App:
    spec = load_spec(broker.tmp / "spec.yaml", {"vhost": broker.vhost, "stack": broker.stack})
    app = App(spec)

    @app.handler("rpc")
    def double(message: IncomingMessage) -> dict[str, Any]:
        return {"double": 2 * message.json()["n"]}

    @app.handler("rpc-quorum")
    async def double_later(message: IncomingMessage) -> dict[str, Any]:
        await asyncio.sleep(0.01 * (message.json()["n"] % 5))  # replies come out of order
        return {"double": 2 * message.json()["n"]}

    return app


@pytest.fixture
def blocking_worker(applied: Broker) -> Iterator[Worker]:
    worker = Worker(doubling_app(applied), applied.vhost_amqp_url)
    thread = threading.Thread(target=worker.run, name="rpc worker")
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)


def test_a_request_gets_the_handlers_return_value_as_its_reply(
    applied: Broker, blocking_worker: Worker
) -> None:
    with Publisher(applied.vhost_amqp_url) as pub:
        first = pub.request({"n": 21}, routing_key="rpc", timeout=30)
        second = pub.request({"n": 2}, routing_key="rpc", timeout=30)
    assert first.json() == {"double": 42} and second.json() == {"double": 4}
    assert first.content_type == "application/json"
    assert first.correlation_id != second.correlation_id
    assert applied.count("rpc") == 0, "the requests were acked after their replies"


def test_concurrent_asyncio_requests_each_get_their_own_reply(applied: Broker) -> None:
    worker = AsyncWorker(doubling_app(applied), applied.vhost_amqp_url)

    async def main() -> list[Any]:
        task = asyncio.create_task(worker.run())
        try:
            async with AsyncPublisher(applied.vhost_amqp_url) as pub:
                replies = await asyncio.gather(
                    *(
                        pub.request({"n": n}, routing_key="rpc-quorum", timeout=60)
                        for n in range(40)
                    )
                )
                assert len(pub.replies) == 0
                return [reply.json() for reply in replies]
        finally:
            worker.stop()
            await task

    assert asyncio.run(main()) == [{"double": 2 * n} for n in range(40)]


def answer_one(broker: Broker, queue: str, body: bytes) -> None:
    """Take one request from ``queue`` and reply ``body`` to it, as any responder would."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    try:
        channel = connection.channel()
        for _ in range(200):
            method, props, _ = channel.basic_get(queue, auto_ack=True)
            if method is not None:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no request arrived in {queue}")
        channel.basic_publish(
            "", props.reply_to, body, pika.BasicProperties(correlation_id=props.correlation_id)
        )
    finally:
        connection.close()


def test_a_timed_out_request_raises_and_its_late_reply_is_not_taken_for_the_next(
    applied: Broker,
) -> None:
    with Publisher(applied.vhost_amqp_url) as pub:
        with pytest.raises(RequestTimeout, match=r"no reply within 0\.3 s"):
            pub.request(b"first", routing_key="unserved", timeout=0.3)
        answer_one(applied, "unserved", b"late reply to the first")
        result: list[Any] = []
        asker = threading.Thread(
            target=lambda: result.append(pub.request(b"second", routing_key="unserved", timeout=60))
        )
        asker.start()
        answer_one(applied, "unserved", b"reply to the second")
        asker.join(90)
        assert [reply.body for reply in result] == [b"reply to the second"]
        assert pub.replies.late == 1


def test_an_unroutable_request_raises_at_its_confirm_not_at_the_timeout(applied: Broker) -> None:
    """Its timeout is an hour: only the mandatory publish's return can end the call."""
    with Publisher(applied.vhost_amqp_url) as pub:
        with pytest.raises(Unroutable, match="reached no queue"):
            pub.request(b"x", routing_key="no-such-queue", timeout=3600)
        assert len(pub.replies) == 0

    async def main() -> None:
        async with AsyncPublisher(applied.vhost_amqp_url) as apub:
            with pytest.raises(Unroutable, match="reached no queue"):
                await apub.request(b"x", routing_key="no-such-queue", timeout=3600)

    asyncio.run(main())


@pytest.mark.parametrize("shell", ["blocking", "asyncio-sync-handler", "asyncio-async-handler"])
def test_a_handler_that_succeeds_on_an_immediate_retry_replies_with_that_calls_value(
    applied: Broker, shell: str
) -> None:
    spec = load_spec(applied.tmp / "spec.yaml", {"vhost": applied.vhost, "stack": applied.stack})
    app = App(spec)
    calls: list[int] = []
    immediate = ImmediateRetry(attempts=3, pause_ms=10)

    if shell == "asyncio-async-handler":

        @app.handler("rpc", immediate=immediate)
        async def flaky_async(message: IncomingMessage) -> dict[str, Any]:
            calls.append(1)
            await asyncio.sleep(0)  # the retried call runs in the handler's task
            if len(calls) == 1:
                raise ConnectionError("transient")
            return {"double": 2 * message.json()["n"], "calls": len(calls)}

    else:

        @app.handler("rpc", immediate=immediate)
        def flaky(message: IncomingMessage) -> dict[str, Any]:
            calls.append(1)
            if len(calls) == 1:
                raise ConnectionError("transient")
            return {"double": 2 * message.json()["n"], "calls": len(calls)}

    if shell == "blocking":
        worker = Worker(app, applied.vhost_amqp_url)
        thread = threading.Thread(target=worker.run, name="rpc worker")
        thread.start()
        try:
            with Publisher(applied.vhost_amqp_url) as pub:
                reply = pub.request({"n": 5}, routing_key="rpc", timeout=30).json()
        finally:
            worker.stop()
            thread.join(30)
    else:
        async_worker = AsyncWorker(app, applied.vhost_amqp_url)

        async def main() -> Any:
            task = asyncio.create_task(async_worker.run())
            try:
                async with AsyncPublisher(applied.vhost_amqp_url) as pub:
                    return (await pub.request({"n": 5}, routing_key="rpc", timeout=30)).json()
            finally:
                await async_worker.stop()
                await task

        reply = asyncio.run(main())
    assert reply == {"double": 10, "calls": 2}
