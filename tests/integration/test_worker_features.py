"""Typed handlers and middleware on a real broker, in both workers."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from rabbitry.consumer import (
    App,
    AsyncWorker,
    IncomingMessage,
    InvalidBody,
    Middleware,
    Verdict,
    Worker,
)
from rabbitry.policies.retry import ATTEMPT_HEADER, LAST_ERROR_HEADER, PARKED_REASON_HEADER
from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker
from tests.integration.test_worker import applied, depth, drain, make_app, run_worker

pytestmark = pytest.mark.broker
__all__ = ["applied"]  # the fixture, shared with test_worker


class Order(BaseModel):
    id: int
    amount: float


def run_either(worker: AsyncWorker | Worker, until: Callable[[], bool], timeout: float) -> None:
    if isinstance(worker, AsyncWorker):
        run_worker(worker, until, timeout)
        return

    def stop_when_done() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until():
            time.sleep(0.02)
        worker.stop()

    threading.Thread(target=stop_when_done, daemon=True).start()
    worker.run()


@pytest.mark.parametrize("kind", [AsyncWorker, Worker])
def test_a_typed_handler_gets_models_and_an_invalid_body_is_parked_at_once(
    applied: Broker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    app = make_app(applied)
    calls: list[tuple[Order, int]] = []

    @app.handler("work")  # retries 3 times by the spec: an invalid body must not
    async def handle(order: Order, message: IncomingMessage) -> None:
        calls.append((order, message.attempt))

    with Publisher(applied.vhost_amqp_url) as pub:
        pub.publish(Order(id=1, amount=9.5), routing_key="work", message_id="good")
        pub.publish({"id": "seven"}, routing_key="work", message_id="bad-field")
        pub.publish(b"{not json", routing_key="work", message_id="bad-json")
    worker = kind(app, applied.vhost_amqp_url)
    counters = worker.metrics["work"]
    run_either(worker, lambda: counters.acked >= 3, timeout=15)
    assert calls == [(Order(id=1, amount=9.5), 1)]
    assert counters.parked == 2 and counters.retried == {} and counters.failed == 2
    parked = {props.message_id: (props, body) for props, body in drain(applied, "work.parking")}
    assert set(parked) == {"bad-field", "bad-json"}
    props, body = parked["bad-field"]
    assert body == b'{"id":"seven"}', "the body is kept as it came"
    assert props.headers[ATTEMPT_HEADER] == 1
    assert props.headers[PARKED_REASON_HEADER] == "InvalidBody is never retried"
    error = props.headers[LAST_ERROR_HEADER]
    assert error.startswith(f"{InvalidBody.__name__}: the body of message bad-field on work")
    assert "id: Input should be a valid integer" in error and "amount: Field required" in error
    assert "Invalid JSON" in parked["bad-json"][0].headers[LAST_ERROR_HEADER]
    assert depth(applied, "work") == 0 and depth(applied, "work.retry.1s") == 0


class Recorder(Middleware):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def before(self, message: IncomingMessage) -> None:
        self.log.append(f"{self.name}.before:{message.attempt}")

    def after(self, message: IncomingMessage) -> None:
        self.log.append(f"{self.name}.after")

    def on_error(self, message: IncomingMessage, error: BaseException) -> None:
        self.log.append(f"{self.name}.on_error:{type(error).__name__}")

    def decided(self, message: IncomingMessage, verdict: Verdict) -> None:
        self.log.append(f"{self.name}.decided:{verdict.action.value}")


@pytest.mark.parametrize("kind", [AsyncWorker, Worker])
def test_middleware_wraps_each_attempt_in_onion_order(
    applied: Broker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    log: list[str] = []
    app: App = make_app(applied, middleware=[Recorder("outer", log), Recorder("inner", log)])

    @app.handler("work")
    async def handle(message: IncomingMessage) -> None:
        log.append("handler")
        if message.attempt == 1:
            raise RuntimeError("first attempt fails")

    with Publisher(applied.vhost_amqp_url) as pub:
        pub.publish(b"job", routing_key="work", message_id="job")
    worker = kind(app, applied.vhost_amqp_url)
    run_either(worker, lambda: "outer.decided:ack" in log, timeout=15)
    assert log == [
        "outer.before:1",
        "inner.before:1",
        "handler",
        "inner.on_error:RuntimeError",
        "outer.on_error:RuntimeError",
        "inner.decided:retry",
        "outer.decided:retry",
        "outer.before:2",
        "inner.before:2",
        "handler",
        "inner.after",
        "outer.after",
        "inner.decided:ack",
        "outer.decided:ack",
    ]
    assert worker.metrics["work"].retried == {"1s": 1}


def publish_bodies(broker: Broker, queue: str, count: int) -> None:
    with Publisher(broker.vhost_amqp_url) as pub:
        pub.publish_many([b"x"] * count, routing_key=queue)


def test_a_concurrency_limit_holds_one_handler_and_not_the_others(applied: Broker) -> None:
    app = make_app(applied)
    running = [0]
    most = [0]
    slow_done: list[float] = []
    fast_done: list[float] = []

    @app.handler("slow", concurrency=2)
    async def slow(message: IncomingMessage) -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.3)
        running[0] -= 1
        slow_done.append(time.monotonic())

    @app.handler("work")
    async def fast(message: IncomingMessage) -> None:
        await asyncio.sleep(0.01)
        fast_done.append(time.monotonic())

    publish_bodies(applied, "slow", 8)
    publish_bodies(applied, "work", 40)
    worker = AsyncWorker(app, applied.vhost_amqp_url)
    run_worker(worker, lambda: len(slow_done) == 8 and len(fast_done) == 40, timeout=20)
    assert most[0] == 2 and len(slow_done) == 8
    assert len(fast_done) == 40
    assert max(fast_done) < sorted(slow_done)[2], "the fast handler did not wait for the slow"
    assert sorted(slow_done)[-1] - sorted(slow_done)[0] >= 0.85, "4 rounds of 2 at 0.3 s"


@pytest.mark.parametrize("kind", [AsyncWorker, Worker])
def test_a_rate_limit_spaces_one_handlers_starts_and_not_the_others(
    applied: Broker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    app = make_app(applied)
    starts: list[float] = []
    fast_done: list[float] = []

    @app.handler("slow", rate=10)
    def limited(message: IncomingMessage) -> None:
        starts.append(time.monotonic())

    @app.handler("work")
    def fast(message: IncomingMessage) -> None:
        fast_done.append(time.monotonic())

    publish_bodies(applied, "slow", 6)
    publish_bodies(applied, "work", 30)
    worker = kind(app, applied.vhost_amqp_url)
    run_either(worker, lambda: len(starts) == 6 and len(fast_done) == 30, timeout=20)
    assert len(starts) == 6 and len(fast_done) == 30
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.09, f"at most 10 a second: {gaps}"
    assert max(fast_done) < starts[-1], "the other handler was not held back"
    assert depth(applied, "slow") == 0
