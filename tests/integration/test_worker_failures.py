"""The failure paths of both workers on a real broker: immediate retries never reach a retry
tier, which errors retry, the parked copy's trace within the negotiated frame size, and the
fault event of a parked message. Counts are exact (passive declares), never management stats."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
import pytest

from rabbitry.consumer import App, AsyncWorker, IncomingMessage, TopologyMissing, Worker
from rabbitry.consumer.faults import FAULT_TYPE
from rabbitry.consumer.parked_copy import TRACE_HEADER
from rabbitry.policies.retry import ATTEMPT_HEADER
from rabbitry.publisher import Publisher
from rabbitry.topology import load_spec
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_dlq import contents

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        queues:
          - name: orders
            retry:
              attempts: 2
              backoff: [1m]        # a message that reached the tier would still be there
              immediate: {attempts: 3, pause: 10ms}
              retry_on: [ConnectionError]
              faults: {exchange: shop.faults}
          - name: quick
            retry: {attempts: 2, backoff: [200ms], immediate: {attempts: 3, pause: 10ms}}
          - name: deep
            retry: {attempts: 1}
""")
WORKERS = ["sync", "async"]


@pytest.fixture
def applied(broker: Broker) -> Broker:
    return broker.apply(SPEC)


def make_app(broker: Broker) -> App:
    spec = load_spec(broker.tmp / "spec.yaml", {"vhost": broker.vhost, "stack": broker.stack})
    return App(spec)


def publish(broker: Broker, queue: str, *ids: str) -> None:
    with Publisher(broker.vhost_amqp_url) as publisher:
        for mid in ids:
            publisher.publish(mid.encode(), routing_key=queue, message_id=mid)


def run_until(
    kind: str, app: App, url: str, until: Callable[[Worker | AsyncWorker], bool]
) -> Worker | AsyncWorker:
    """Run a worker of ``kind`` until ``until(worker)`` holds and nothing is left unconfirmed
    (at most 30 s), then stop it."""
    deadline = time.monotonic() + 30

    def done(worker: Worker | AsyncWorker) -> bool:
        return until(worker) and not worker.core.publishing

    if kind == "sync":
        worker = Worker(app, url)
        thread = threading.Thread(target=worker.run)
        thread.start()
        while not done(worker) and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.02)
        worker.stop()
        thread.join(30)
        return worker

    aworker = AsyncWorker(app, url)

    async def main() -> None:
        task = asyncio.create_task(aworker.run())
        while not done(aworker) and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.02)
        await aworker.stop()
        await task

    asyncio.run(main())
    return aworker


def failing_handler(app: App, queue: str, *, failures: int | None) -> list[int]:
    """A handler of ``queue`` that raises ``ConnectionError`` on its first ``failures`` calls
    (None: on every call); the attempt of each call, as they come."""
    calls: list[int] = []

    @app.handler(queue)
    def handle(message: IncomingMessage) -> None:
        calls.append(message.attempt)
        if failures is None or len(calls) <= failures:
            raise ConnectionError(f"call {len(calls)}: the {queue} dependency is down")

    return calls


@pytest.mark.parametrize("kind", WORKERS)
def test_immediate_retries_mend_a_transient_error_without_touching_the_retry_tier(
    applied: Broker, kind: str
) -> None:
    app = make_app(applied)
    calls = failing_handler(app, "orders", failures=2)
    publish(applied, "orders", "order-1")
    worker = run_until(kind, app, applied.vhost_amqp_url, lambda w: w.metrics["orders"].acked == 1)
    assert calls == [1, 1, 1]  # three calls of one delivery
    counters = worker.metrics["orders"]
    assert dict(counters.retried) == {} and counters.parked == 0 and counters.failed == 0
    assert applied.count("orders.retry.1m") == 0
    assert applied.count("orders.parking") == 0 and applied.count("orders") == 0


@pytest.mark.parametrize("kind", WORKERS)
def test_an_always_failing_handler_goes_through_immediate_calls_then_the_ladder_then_parking(
    applied: Broker, kind: str
) -> None:
    app = make_app(applied)
    calls = failing_handler(app, "quick", failures=None)
    publish(applied, "quick", "job-1")
    worker = run_until(kind, app, applied.vhost_amqp_url, lambda w: w.metrics["quick"].parked == 1)
    assert calls == [1, 1, 1, 2, 2, 2]  # immediate calls do not count as ladder attempts
    assert dict(worker.metrics["quick"].retried) == {"200ms": 1}
    parked = contents(applied, "quick.parking")
    assert len(parked) == 1 and parked[0][0].headers[ATTEMPT_HEADER] == 2
    assert applied.count("quick.retry.200ms") == 0 and applied.count("quick") == 0


def test_an_allow_listed_error_retries_another_parks_at_once_and_a_cause_counts(
    applied: Broker,
) -> None:
    app = make_app(applied)
    calls: dict[str, int] = {}

    @app.handler("orders")
    def handle(message: IncomingMessage) -> None:
        mid = message.message_id or ""
        calls[mid] = calls.get(mid, 0) + 1
        if mid == "conn":
            raise ConnectionError("down")
        if mid == "key":
            raise KeyError("sku")
        try:
            raise ConnectionResetError("peer")
        except ConnectionError as exc:
            raise RuntimeError("stock lookup failed") from exc

    publish(applied, "orders", "conn", "key", "wrapped")
    worker = run_until(
        "async",
        app,
        applied.vhost_amqp_url,
        lambda w: (
            sum(w.metrics["orders"].retried.values()) == 2 and w.metrics["orders"].parked == 1
        ),
    )
    assert calls == {"conn": 3, "key": 1, "wrapped": 3}
    assert dict(worker.metrics["orders"].retried) == {"1m": 2}
    assert applied.count("orders.retry.1m") == 2
    parked = contents(applied, "orders.parking")
    assert [props.message_id for props, _ in parked] == ["key"]
    assert "KeyError is not in retry_on" in parked[0][0].headers["x-rabbitry-parked-reason"]


def deep(depth: int, text: str) -> None:
    if depth == 0:
        raise RuntimeError(text)
    deep(depth - 1, text)


@pytest.mark.parametrize("kind", WORKERS)
@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_the_parked_copy_carries_the_trace_and_own_headers_within_the_frame_size(
    applied: Broker, kind: str, frame_max: int
) -> None:
    app = make_app(applied)

    def tenant(message: IncomingMessage, error: BaseException) -> dict[str, Any]:
        return {"x-tenant": "acme", "x-failed-with": type(error).__name__}

    @app.handler("deep", parked_headers=tenant)
    def handle(message: IncomingMessage) -> None:
        deep(200, "inventory out of sync " + "z" * 300_000)

    publish(applied, "deep", "big-1")
    url = f"{applied.vhost_amqp_url}{'&' if '?' in applied.vhost_amqp_url else '?'}"
    worker = run_until(
        kind, app, f"{url}frame_max={frame_max}", lambda w: w.metrics["deep"].parked == 1
    )
    assert worker.core.builder.frame_max == frame_max  # negotiated as asked
    assert worker.metrics.reconnects == 0  # a header frame over frame_max closes the connection
    parked = contents(applied, "deep.parking")
    assert len(parked) == 1
    headers = parked[0][0].headers
    assert headers["x-tenant"] == "acme" and headers["x-failed-with"] == "RuntimeError"
    trace = headers[TRACE_HEADER]
    trace = trace.decode() if isinstance(trace, bytes) else trace
    assert trace.startswith("Traceback (most recent call last):")
    assert (
        "RuntimeError: inventory out of sync zzz" in trace and "raise RuntimeError(text)" in trace
    )
    assert frame_max // 2 < len(trace.encode()) < frame_max  # the room is used, not exceeded


@pytest.mark.parametrize("kind", WORKERS)
def test_a_parked_message_publishes_its_fault_event(applied: Broker, kind: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(applied.vhost_amqp_url))
    channel = connection.channel()
    channel.queue_declare("faults.audit")
    channel.queue_bind("faults.audit", "shop.faults", routing_key="#")
    connection.close()
    app = make_app(applied)

    @app.handler("orders")
    def handle(message: IncomingMessage) -> None:
        raise KeyError("sku 42")

    publish(applied, "orders", "order-9")
    run_until(kind, app, applied.vhost_amqp_url, lambda w: w.metrics["orders"].parked == 1)
    events = contents(applied, "faults.audit")
    assert len(events) == 1
    props, body = events[0]
    assert props.type == FAULT_TYPE and props.correlation_id == "order-9"
    assert props.content_type == "application/json"
    event = json.loads(body)
    assert event["message_id"] == "order-9" and event["queue"] == "orders"
    assert event["parking_queue"] == "orders.parking" and event["attempts"] == 1
    assert event["error"] == "KeyError: 'sku 42'"
    assert "KeyError is not in retry_on" in event["reason"]
    assert "raise KeyError" in event["trace"]
    assert applied.count("orders.parking") == 1 and applied.count("orders") == 0


def test_a_worker_refuses_to_start_without_its_fault_exchange(applied: Broker) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(applied.vhost_amqp_url))
    connection.channel().exchange_delete("shop.faults")
    connection.close()
    app = make_app(applied)
    calls: list[str] = []
    app.add("orders", lambda message: calls.append("ran"))
    publish(applied, "orders", "order-1")

    async def main() -> BaseException | None:
        try:
            async with asyncio.timeout(20):
                await AsyncWorker(app, applied.vhost_amqp_url).run()
        except Exception as exc:
            return exc
        return None

    error = asyncio.run(main())
    assert isinstance(error, TopologyMissing), error
    assert [(n.kind, n.name) for n in error.missing] == [("exchange", "shop.faults")]
    assert "exchange 'shop.faults' (fault events of 'orders')" in str(error)
    assert calls == [] and applied.count("orders") == 1
