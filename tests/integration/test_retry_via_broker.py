"""``retry: {via: broker}`` on a real RabbitMQ 4.3: the quorum queue's own delayed retry holds a
failed message for the configured delay, the broker parks it after ``attempts`` deliveries, a
failure that is never retried parks at once, and the in-memory ``HandlerHarness`` reaches the
same outcomes. Whatever image the suite runs on, a broker of ``RABBITRY_NEWEST_IMAGE`` is
started for this module; the refusal of the spec by older brokers is checked on the suite's
own broker."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.consumer import App, AsyncWorker, IncomingMessage
from rabbitry.testing import HandlerHarness
from rabbitry.testing.broker import Broker as ContainerBroker
from rabbitry.testing.containers import start_broker
from rabbitry.testing.vhosts import create_test_vhost, delete_vhost
from rabbitry.topology.versions import parse_version
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_worker import depth, drain, make_app, publish, run_worker

pytestmark = pytest.mark.broker

NEWEST_IMAGE = "rabbitmq:4.3-management"
"""The image when RABBITRY_NEWEST_IMAGE is not set (scripts/setup.sh sets it)."""

SPEC = one_vhost_spec("""
        queues:
          - name: work
            type: quorum
            retry: {attempts: 4, backoff: [1s, 2s, 3s], via: broker, never_retry: [ValueError]}
""")


def version_of(broker: Broker) -> tuple[int, ...]:
    return parse_version(str(broker.get("/overview")["rabbitmq_version"]))


@pytest.fixture(scope="module")
def newest() -> Iterator[ContainerBroker]:
    image = os.environ.get("RABBITRY_NEWEST_IMAGE") or NEWEST_IMAGE
    with start_broker(image=image) as container:
        yield container.broker


@pytest.fixture
def on_4_3(newest: ContainerBroker, tmp_path: Path) -> Iterator[Broker]:
    vhost = create_test_vhost(newest)
    try:
        broker = Broker(vhost, tmp_path)
        assert version_of(broker) >= (4, 3), "RABBITRY_NEWEST_IMAGE must be RabbitMQ 4.3+"
        yield broker.apply(SPEC)
    finally:
        delete_vhost(newest, vhost.name)


def failing(app: App, failures: int, error: type[Exception] = RuntimeError) -> list[float]:
    """Handle ``work`` by failing ``failures`` times, then succeeding; the calls' times."""
    calls: list[float] = []

    @app.handler("work")
    async def handle(message: IncomingMessage) -> None:
        calls.append(time.monotonic())
        if len(calls) <= failures:
            raise error(f"call {len(calls)} fails")

    return calls


def test_the_queue_is_declared_with_the_broker_retry_arguments_and_no_tier_queue(
    on_4_3: Broker,
) -> None:
    queue = on_4_3.get("/queues/{vhost}/work")
    arguments = queue["arguments"]
    assert arguments["x-delivery-limit"] == 3  # 4 attempts: the first delivery and 3 more
    assert arguments["x-delayed-retry-type"] == "failed"
    assert (arguments["x-delayed-retry-min"], arguments["x-delayed-retry-max"]) == (1000, 3000)
    assert arguments["x-dead-letter-routing-key"] == "work.parking"
    assert on_4_3.queue_names() == {"work", "work.parking"}


def test_failing_twice_then_succeeding_waits_the_broker_delays_and_is_done_once(
    on_4_3: Broker,
) -> None:
    app = make_app(on_4_3)
    calls = failing(app, 2)
    publish(on_4_3, "work", [b"order-1"])
    worker = AsyncWorker(app, on_4_3.vhost_amqp_url)
    run_worker(worker, lambda: len(calls) >= 3 and worker.in_flight == 0, timeout=20)
    # No fourth delivery can come: the third was acked and the queue is empty (counted below).
    assert len(calls) == 3
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 1.0 - 0.05 and gaps[1] >= 2.0 - 0.05, gaps
    counters = worker.metrics["work"]
    assert dict(counters.retried) == {"1s": 1, "2s": 1} and counters.acked == 1
    assert depth(on_4_3, "work") == 0 and depth(on_4_3, "work.parking") == 0

    in_memory = make_app(on_4_3)
    failing(in_memory, 2)
    harness = HandlerHarness(in_memory)
    outcomes = harness.follow("work", b"order-1")
    assert [o.action.value for o in outcomes] == ["retry", "retry", "ack"]
    assert [o.delay_ms for o in outcomes[:2]] == [1000, 2000]
    assert [o.attempt for o in outcomes] == [1, 2, 3]


def test_always_failing_is_parked_by_the_broker_after_all_attempts(on_4_3: Broker) -> None:
    app = make_app(on_4_3)
    calls = failing(app, 1000)
    publish(on_4_3, "work", [b"order-2"], headers={"tenant": "acme"})
    worker = AsyncWorker(app, on_4_3.vhost_amqp_url)
    run_worker(worker, lambda: len(calls) >= 4 and worker.in_flight == 0, timeout=30)
    ((props, body),) = drain(on_4_3, "work.parking")
    assert len(calls) == 4
    assert body == b"order-2" and props.headers["tenant"] == "acme"
    assert props.headers["x-first-death-reason"] == "delivery_limit"
    assert props.headers["x-first-death-queue"] == "work"
    assert depth(on_4_3, "work") == 0

    in_memory = make_app(on_4_3)
    failing(in_memory, 1000)
    harness = HandlerHarness(in_memory)
    outcomes = harness.follow("work", b"order-2")
    assert [o.action.value for o in outcomes] == ["retry", "retry", "retry", "park"]
    assert outcomes[-1].routing_key == "work.parking"


def test_a_never_retried_error_is_dead_lettered_at_once(on_4_3: Broker) -> None:
    app = make_app(on_4_3)
    calls = failing(app, 1000, ValueError)
    publish(on_4_3, "work", [b"order-3"])
    worker = AsyncWorker(app, on_4_3.vhost_amqp_url)
    run_worker(worker, lambda: worker.metrics["work"].parked >= 1, timeout=10)
    ((props, body),) = drain(on_4_3, "work.parking")
    assert len(calls) == 1 and body == b"order-3"
    assert props.headers["x-first-death-reason"] == "rejected"
    assert worker.metrics["work"].retried == {}

    in_memory = make_app(on_4_3)
    failing(in_memory, 1000, ValueError)
    harness = HandlerHarness(in_memory)
    (outcome,) = harness.follow("work", b"order-3")
    assert outcome.parked and outcome.attempt == 1


def test_a_broker_older_than_4_3_refuses_the_spec_naming_4_3_and_nothing_changes(
    broker: Broker,
) -> None:
    before = broker.queue_names()
    result = broker.run("plan", str(broker.spec(SPEC)))
    if version_of(broker) >= (4, 3):  # the suite runs on the newest image
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 1, result.output
    assert "retry: {via: broker}" in result.output and "needs RabbitMQ 4.3" in result.output
    assert "nothing was changed" in result.output
    applied = broker.run("apply", str(broker.spec(SPEC)), "--auto-approve")
    assert applied.exit_code == 1 and "needs RabbitMQ 4.3" in applied.output
    assert broker.queue_names() == before
