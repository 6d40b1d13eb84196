"""Typed handlers and middleware on a real broker, in both workers."""

from __future__ import annotations

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
