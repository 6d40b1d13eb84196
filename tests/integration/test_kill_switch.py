"""A handler's kill switch on a real broker, in both workers: a queue whose dependency is dead
stops being consumed after the threshold (its messages stay in the queue, none walks into the
retry tier or the parking lot), another queue of the same worker keeps flowing, and after the
cool-down the worker consumes it again: half-open, tripped again by one failure, closed by
successes, and the backlog drains.

The cool-down is moved on by the switches' own clock (``WorkerCore.switchboard.clock``), so every
step is an event the test waits for, never a wall-clock bound."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from rabbitry.consumer import AsyncWorker, IncomingMessage, KillSwitch, Worker
from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_worker import depth, make_app
from tests.unit.consumer.payments_down import with_payments_down

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        queues:
          - name: payments
            type: quorum
            retry: {attempts: 3, backoff: [5m]}
          - name: emails
""")
PAYMENTS, EMAILS = 60, 30
PREFETCH = 10
SWITCH = KillSwitch(failure_ratio=0.5, window_s=600, min_messages=8, cool_down_s=30, probes=3)
TIER, PARKING = "payments.retry.5m", "payments.parking"


class Clock:
    """Monotonic time, moved on by the test to end a cool-down."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextmanager
def running(worker: Worker | AsyncWorker) -> Iterator[None]:
    """The worker consuming in a thread of its own for the block; stopped after it."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            if isinstance(worker, Worker):
                worker.run()
                return

            async def main() -> None:
                task = asyncio.ensure_future(worker.run())
                while not stop.is_set() and not task.done():
                    await asyncio.sleep(0.02)
                await worker.stop()
                await task

            asyncio.run(main())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        if isinstance(worker, Worker):
            worker.stop()
        thread.join(60)
    assert not failures, failures


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_dead_dependency_pauses_its_queue_the_other_flows_and_it_resumes_after_the_cool_down(
    broker: Broker, kind: type[Worker] | type[AsyncWorker], caplog: pytest.LogCaptureFixture
) -> None:
    broker.apply(SPEC)
    app = make_app(broker)
    healthy = threading.Event()
    calls: list[int] = []  # the kill switch's trips so far, as each payments handler starts

    def call_payments() -> None:
        if not healthy.is_set():
            raise ConnectionError("payments API: connection refused")

    if kind is AsyncWorker:  # a handler that really waits: several run side by side

        @app.handler("payments", kill_switch=SWITCH)
        async def pay(message: IncomingMessage) -> None:
            calls.append(counters.kill_switch_trips)
            await asyncio.sleep(0.001)
            call_payments()

    else:

        @app.handler("payments", kill_switch=SWITCH)
        def pay_blocking(message: IncomingMessage) -> None:
            calls.append(counters.kill_switch_trips)
            call_payments()

    @app.handler("emails")
    def send(message: IncomingMessage) -> None:
        pass

    worker = kind(app, broker.vhost_amqp_url, prefetch=PREFETCH)
    core = worker.core
    clock = Clock()
    core.switchboard.clock = clock
    counters, emails = worker.metrics["payments"], worker.metrics["emails"]
    payments_consumer = next(i for i, r in enumerate(core.routes) if r.queue == "payments")

    def paused() -> bool:
        """The broker confirmed the cancel, and every failure's retry copy is confirmed."""
        session = core.session
        return (
            session is not None
            and payments_consumer not in session.consuming
            and sum(counters.retried.values()) == len(calls)
        )

    with Publisher(broker.vhost_amqp_url) as pub:
        pub.publish_many([b"p"] * PAYMENTS, routing_key="payments")
    with caplog.at_level(logging.INFO, logger="rabbitry.worker"), running(worker):
        # 1. the dead dependency trips the switch after min_messages failures
        wait_for(lambda: counters.kill_switch_trips == 1 and paused(), "the first trip")
        first = len(calls)  # the handlers that ran: up to the trip, and those running then
        assert SWITCH.min_messages <= first <= SWITCH.min_messages + PREFETCH
        if kind is Worker:
            assert first == SWITCH.min_messages, "one handler at a time: none after the trip"
        held = counters.received - first
        assert 0 <= held <= PREFETCH, "the deliveries in hand wait, unhandled"
        assert depth(broker, "payments") == PAYMENTS - counters.received
        assert depth(broker, TIER) == first, "only the failures before the trip"
        assert depth(broker, PARKING) == 0
        assert counters.kill_switch == "open"

        # 2. the other queue of the same worker flows while the switch is open
        with Publisher(broker.vhost_amqp_url) as pub:
            pub.publish_many([b"e"] * EMAILS, routing_key="emails")
        wait_for(lambda: emails.acked == EMAILS, "the emails handled during the pause")
        assert depth(broker, "emails") == 0
        assert len(calls) == first and counters.kill_switch == "open"

        # 3. after the cool-down it consumes again, half-open: one failure trips it at once
        clock.offset += SWITCH.cool_down_s
        wait_for(lambda: counters.kill_switch_trips == 2 and paused(), "the trip after resuming")
        assert calls == [0] * first + [1], "one probe, then paused again"
        assert depth(broker, TIER) == first + 1
        assert depth(broker, PARKING) == 0

        # 4. the dependency is back: after the next cool-down the backlog drains to zero
        healthy.set()
        clock.offset += SWITCH.cool_down_s
        failures = first + 1
        wait_for(
            lambda: len(calls) == PAYMENTS and counters.acked == PAYMENTS,
            "the backlog handled",
        )
        assert counters.kill_switch == "closed" and counters.kill_switch_trips == 2
        assert depth(broker, "payments") == 0
        assert depth(broker, TIER) == failures and depth(broker, PARKING) == 0
    lines = [r.getMessage() for r in caplog.records if "kill switch of payments" in r.getMessage()]
    assert lines[0].startswith(
        f"kill switch of payments tripped: {SWITCH.min_messages} of {SWITCH.min_messages}"
        " handled messages failed (100%, threshold 50%) in the last 600 s; cancelling its"
        " consumer for 30 s"
    )
    again = "tripped: 1 of 1 handled messages failed (100%, threshold 50%) after resuming"
    assert again in lines[2]
    turns = [line.split(": ")[0].split(" ")[4] for line in lines]
    assert turns == ["tripped", "half-open", "tripped", "half-open", "closed"]


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_worker_stopped_while_the_switch_is_open_returns_what_it_held(
    broker: Broker, kind: type[Worker] | type[AsyncWorker]
) -> None:
    broker.apply(SPEC)
    app = with_payments_down(make_app(broker), SWITCH)
    worker = kind(app, broker.vhost_amqp_url, prefetch=PREFETCH)
    counters = worker.metrics["payments"]
    with Publisher(broker.vhost_amqp_url) as pub:
        pub.publish_many([b"p"] * PAYMENTS, routing_key="payments")
    with running(worker):
        wait_for(
            lambda: (
                counters.kill_switch_trips == 1
                and sum(counters.retried.values()) == SWITCH.min_messages
            ),
            "the trip",
        )
    held = counters.received - SWITCH.min_messages
    assert counters.requeued == held, "returned at shutdown, and counted"
    # the broker counts a returned message ready once its queue has applied the return, which
    # a quorum queue does after the worker's connection is gone: a CI run read 50 of 52 at once
    wait_for(
        lambda: depth(broker, "payments") == PAYMENTS - SWITCH.min_messages,
        f"{PAYMENTS - SWITCH.min_messages} messages ready in payments",
        timeout=10.0,
    )
    assert depth(broker, TIER) == SWITCH.min_messages and depth(broker, PARKING) == 0
