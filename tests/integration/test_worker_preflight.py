"""A worker checks at start that the broker holds what its handlers need, and refuses to start
(consuming nothing) when it does not: the issue's case, a ``retry: {via: broker}`` worker on a
broker older than 4.3 that had 5 of 5 failing messages redelivered until the quorum queue
dropped them, the CLI's refusal, and starting once ``apply`` made what was missing. Queue depths
are exact AMQP counts (passive declares). Missing retry tiers, parking lots and delay levels,
and ``async with`` refusing on entry, run on the scripted broker:
tests/unit/testing/test_scripted_preflight.py."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pika
import pytest

from rabbitry.consumer import App, AsyncWorker, IncomingMessage, TopologyMissing, Worker
from rabbitry.topology import load_spec
from tests.integration.conftest import Broker, one_vhost_spec, worker_process
from tests.integration.test_worker import depth, publish, run_worker
from tests.worker_runs import start_async

pytestmark = pytest.mark.broker

VIA_BROKER = one_vhost_spec("""
        queues:
          - name: work
            type: quorum
            retry: {attempts: 4, backoff: [1s, 2s, 3s], via: broker}
""")

LADDER = one_vhost_spec("""
        queues:
          - name: work
            retry: {attempts: 3, backoff: [1s, 2s]}
""")

VIA_DELAY = one_vhost_spec("""
        queues:
          - name: mail
            type: quorum
            retry: {attempts: 3, backoff: [500ms, 1s], via: delay}
        delays:
          - {name: delay, unit: 100ms, count: 4, targets: [{queue: mail}]}
""")

HANDLERS = """
    import os
    from rabbitry.consumer import App, IncomingMessage

    app = App(os.environ["T_SPEC"], variables={"vhost": os.environ["T_VHOST"], "stack": "s"})


    @app.handler("work")
    def work(message: IncomingMessage) -> None:
        raise RuntimeError("always fails")
"""


def app_of(broker: Broker, path: Path) -> App:
    return App(load_spec(path, {"vhost": broker.vhost, "stack": broker.stack}))


def failing(app: App, queue: str = "work") -> list[bytes]:
    calls: list[bytes] = []

    @app.handler(queue)
    async def handle(message: IncomingMessage) -> None:
        calls.append(message.body)
        raise RuntimeError("always fails")

    return calls


def handled(app: App, queue: str = "work") -> list[bytes]:
    calls: list[bytes] = []

    @app.handler(queue)
    async def handle(message: IncomingMessage) -> None:
        calls.append(message.body)

    return calls


def declare_quorum_queue(broker: Broker, name: str) -> None:
    """The work queue as an operator would have it on 4.0, where ``apply`` refuses the spec."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    connection.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
    connection.close()


def delete(broker: Broker, *, queue: str | None = None, exchange: str | None = None) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    if queue is not None:
        channel.queue_delete(queue)
    if exchange is not None:
        channel.exchange_delete(exchange)
    connection.close()


def start_blocking(worker: Worker) -> BaseException | None:
    try:
        worker.run(max_idle=3)
    except Exception as exc:
        return exc
    return None


def test_a_worker_retrying_via_the_broker_refuses_a_broker_older_than_4_3_and_consumes_nothing(
    broker: Broker,
) -> None:
    if broker.version >= (4, 3):
        pytest.skip("the suite's broker has the delayed retry: the refusal needs one older")
    path = broker.spec(VIA_BROKER)
    declare_quorum_queue(broker, "work")
    publish(broker, "work", [f"order-{i}".encode() for i in range(5)])

    app = app_of(broker, path)
    calls = failing(app)
    error = start_async(AsyncWorker(app, broker.vhost_amqp_url))
    assert isinstance(error, TopologyMissing), error
    text = str(error)
    assert "retry: {via: broker}) needs RabbitMQ 4.3 or newer" in text, text
    assert "queue 'work.parking' (dead-letter target of 'work'" in text, text
    assert f"rabbitry apply {path}" in text and "nothing was consumed" in text, text
    assert "\n" not in text
    blocking_app = app_of(broker, path)
    blocking = failing(blocking_app)
    assert isinstance(start_blocking(Worker(blocking_app, broker.vhost_amqp_url)), TopologyMissing)
    assert calls == [] and blocking == []
    assert depth(broker, "work") == 5


@pytest.mark.parametrize("flags", [(), ("--sync",)], ids=["asyncio", "blocking"])
def test_worker_run_refuses_with_one_error_line_and_exit_1(
    broker: Broker, flags: tuple[str, ...]
) -> None:
    if broker.version >= (4, 3):
        pytest.skip("the suite's broker has the delayed retry: the refusal needs one older")
    broker.spec(VIA_BROKER)
    declare_quorum_queue(broker, "work")
    publish(broker, "work", [f"order-{i}".encode() for i in range(5)])
    process = worker_process(broker, "handlers", HANDLERS, {}, *flags)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    text = output.decode()
    assert process.returncode == 1, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "needs RabbitMQ 4.3" in errors[0], text
    assert "retry in" not in text and "parked" not in text and "consuming" not in text, text
    assert depth(broker, "work") == 5


def test_after_apply_the_same_workers_start_and_handle_the_message(broker: Broker) -> None:
    path = broker.spec(LADDER)
    broker.apply(LADDER)
    delete(broker, queue="work.parking")
    publish(broker, "work", [b"order"])
    app = app_of(broker, path)
    calls = handled(app)
    worker = AsyncWorker(app, broker.vhost_amqp_url)
    assert isinstance(start_async(worker), TopologyMissing)
    blocking_app = app_of(broker, path)
    blocking_calls = handled(blocking_app)
    blocking = Worker(blocking_app, broker.vhost_amqp_url)
    assert isinstance(start_blocking(blocking), TopologyMissing)
    assert calls == [] and depth(broker, "work") == 1

    broker.apply(LADDER)
    run_worker(worker, lambda: bool(calls) and worker.in_flight == 0, timeout=10)
    assert calls == [b"order"] and depth(broker, "work") == 0
    publish(broker, "work", [b"second"])
    blocking.run(max_idle=0.5)
    assert blocking_calls == [b"second"] and depth(broker, "work") == 0


def test_async_with_runs_the_worker_for_the_block_and_await_stop_waits_for_it(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "rabbitry.worker")
    path = broker.spec(LADDER)
    broker.apply(LADDER)
    app = app_of(broker, path)
    calls = handled(app)

    async def main() -> None:
        async with AsyncWorker(app, broker.vhost_amqp_url) as worker:
            publish(broker, "work", [b"in the block"])
            async with asyncio.timeout(10):
                while not calls:
                    await asyncio.sleep(0.02)
        assert worker._finished is not None and worker._finished.is_set()

        again = AsyncWorker(app, broker.vhost_amqp_url)
        task = asyncio.ensure_future(again.run())
        await asyncio.sleep(0)
        publish(broker, "work", [b"second"])
        async with asyncio.timeout(10):
            while len(calls) < 2:
                await asyncio.sleep(0.02)
        await again.stop()
        assert task.done() and task.exception() is None

    asyncio.run(main())
    assert calls == [b"in the block", b"second"] and depth(broker, "work") == 0
    started = "the broker holds what the handlers need (4 queues and exchanges): consuming work"
    assert [r.getMessage() for r in caplog.records].count(started) == 2
