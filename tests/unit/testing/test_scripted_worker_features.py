"""Worker behaviours on the wire, for both shells (``Worker`` and ``AsyncWorker``) against the
scripted broker: typed bodies and invalid ones, middleware order across a retry, duplicates,
time-to-run, errors never retried, reconnecting after the broker closed the connection. These
ran on a real broker before; nothing in them depends on one (what does stays in
tests/integration)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator

import pytest
from pydantic import BaseModel

from rabbitry.amqp.settings import Backoff as ConnectBackoff
from rabbitry.consumer import (
    App,
    AsyncWorker,
    IncomingMessage,
    InvalidBody,
    Middleware,
    Verdict,
    Worker,
)
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    PARKED_REASON_HEADER,
)
from rabbitry.testing import ScriptedBroker
from tests.unit.retry_ladders import work_retry

RETRY = work_retry(1000, 2000, never_retry=("ValueError",))
KINDS = [AsyncWorker, Worker]
WAIT = 20.0


class Order(BaseModel):
    id: int
    amount: float


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as scripted:
        for queue in ("work", "work.parking", "work.retry.1s", "work.retry.2s"):
            scripted.declare_queue(queue)
        yield scripted


def acked(broker: ScriptedBroker) -> set[tuple[int, int]]:
    """(connection, delivery tag) of each delivery the worker acked (multiple acks expanded)."""
    tags: set[tuple[int, int]] = set()
    for ack in broker.received("basic.ack"):
        delivered = [
            f.method.delivery_tag
            for f in broker.sent("basic.deliver")
            if f.connection == ack.connection
        ]
        tag = ack.method.delivery_tag
        if ack.method.multiple:
            tags.update((ack.connection, t) for t in delivered if t <= tag)
        else:
            tags.add((ack.connection, tag))
    return tags


def drive(worker: Worker | AsyncWorker, script: Callable[[], None]) -> None:
    """Run ``worker`` while ``script`` (the test's side: waits on the broker, moves messages)
    runs beside it; then stop the worker gracefully."""
    if isinstance(worker, Worker):
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            script()
        finally:
            worker.stop()
            thread.join(WAIT)
        assert not thread.is_alive()
        return

    async def main() -> None:
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.to_thread(script)
        finally:
            await worker.stop()
            await running

    asyncio.run(main())


def recording_ids(idempotent: bool = False) -> tuple[App, list[str | None]]:
    """An app whose handler of ``work`` records each message's id, and the list it records
    into."""
    app = App()
    seen: list[str | None] = []

    @app.handler("work", idempotent=idempotent)
    def handle(message: IncomingMessage) -> None:
        seen.append(message.message_id)

    return app, seen


def recording_attempts(
    then: Callable[[], Awaitable[object]], timeout: float | None = None
) -> tuple[App, list[int]]:
    """An app whose handler of ``work`` (retried by RETRY) records each attempt and then
    awaits ``then()``, and the list it records into."""
    app = App()
    attempts: list[int] = []

    @app.handler("work", retry=RETRY, timeout=timeout)
    async def handle(message: IncomingMessage) -> None:
        attempts.append(message.attempt)
        await then()

    return app, attempts


def until(broker: ScriptedBroker, condition: Callable[[ScriptedBroker], bool]) -> None:
    assert broker.wait_for(condition, WAIT), f"not reached in {WAIT} s: {broker.frames[-5:]}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_typed_handler_gets_models_and_an_invalid_body_is_parked_at_once(
    broker: ScriptedBroker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    app = App()
    calls: list[tuple[Order, int]] = []

    @app.handler("work", retry=RETRY)  # retries 3 times: an invalid body must not
    async def handle(order: Order, message: IncomingMessage) -> None:
        calls.append((order, message.attempt))

    broker.put("work", Order(id=1, amount=9.5).model_dump(), message_id="good")
    broker.put("work", {"id": "seven"}, message_id="bad-field")
    broker.put("work", b"{not json", message_id="bad-json", content_type="application/json")
    worker = kind(app, broker.url)
    drive(worker, lambda: until(broker, lambda b: len(acked(b)) == 3))
    counters = worker.metrics["work"]
    assert calls == [(Order(id=1, amount=9.5), 1)]
    assert counters.parked == 2 and counters.retried == {} and counters.failed == 2
    parked = {m.message_id: m for m in broker.queue("work.parking").messages}
    assert set(parked) == {"bad-field", "bad-json"}
    assert parked["bad-field"].body == b'{"id":"seven"}', "the body is kept as it came"
    headers = parked["bad-field"].headers
    assert headers[ATTEMPT_HEADER] == 1
    assert headers[PARKED_REASON_HEADER] == "InvalidBody is never retried"
    error = headers[LAST_ERROR_HEADER]
    assert error.startswith(f"{InvalidBody.__name__}: the body of message bad-field on work")
    assert "id: Input should be a valid integer" in error and "amount: Field required" in error
    assert "Invalid JSON" in parked["bad-json"].headers[LAST_ERROR_HEADER]
    assert not broker.queue("work").messages and not broker.queue("work.retry.1s").messages


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


@pytest.mark.parametrize("kind", KINDS)
def test_middleware_wraps_each_attempt_in_onion_order(
    broker: ScriptedBroker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    log: list[str] = []
    app = App(middleware=[Recorder("outer", log), Recorder("inner", log)])

    @app.handler("work", retry=RETRY)
    async def handle(message: IncomingMessage) -> None:
        log.append("handler")
        if message.attempt == 1:
            raise RuntimeError("first attempt fails")

    broker.put("work", b"job", message_id="job")
    worker = kind(app, broker.url)

    def script() -> None:
        until(broker, lambda b: len(acked(b)) == 1 and bool(b.queue("work.retry.1s").messages))
        broker.move("work.retry.1s", "work")  # the tier's delay, which a broker would keep
        until(broker, lambda b: len(acked(b)) == 2)

    drive(worker, script)
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


@pytest.mark.parametrize("kind", KINDS)
def test_duplicates_by_message_id_are_skipped(
    broker: ScriptedBroker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    app, seen = recording_ids(idempotent=True)
    for mid in ("a", "b", "a", "c", "b"):
        broker.put("work", b"x", message_id=mid)
    worker = kind(app, broker.url)
    drive(worker, lambda: until(broker, lambda b: len(acked(b)) == 5))
    assert seen == ["a", "b", "c"]
    assert worker.metrics["work"].duplicates == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_handler_past_its_time_to_run_fails_and_is_retried(
    broker: ScriptedBroker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    app, calls = recording_attempts(lambda: asyncio.sleep(5), timeout=0.2)  # cancelled at 0.2 s
    broker.put("work", b"slow", message_id="slow")
    worker = kind(app, broker.url)
    drive(worker, lambda: until(broker, lambda b: len(acked(b)) == 1))
    assert calls == [1]
    assert worker.metrics["work"].timeouts == 1
    (copy,) = broker.queue("work.retry.1s").messages
    assert copy.headers[LAST_ERROR_HEADER].startswith("HandlerTimeout")


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_never_retried_parks_at_once(
    broker: ScriptedBroker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    async def malformed() -> None:
        raise ValueError("malformed order")

    app, calls = recording_attempts(malformed)
    broker.put("work", b"bad", message_id="bad")
    worker = kind(app, broker.url)
    drive(worker, lambda: until(broker, lambda b: len(acked(b)) == 1))
    assert calls == [1]
    (parked,) = broker.queue("work.parking").messages
    assert parked.headers[ATTEMPT_HEADER] == 1
    assert "never retried" in parked.headers[PARKED_REASON_HEADER]
    assert worker.metrics["work"].retried == {}
    assert not broker.queue("work.retry.1s").messages


@pytest.mark.parametrize("kind", KINDS)
def test_the_worker_reconnects_and_consumes_again_after_the_broker_closes_its_connection(
    broker: ScriptedBroker, kind: type[AsyncWorker] | type[Worker]
) -> None:
    app, got = recording_ids()
    broker.put("work", b"x", message_id="before")
    worker = kind(app, broker.url, backoff=ConnectBackoff(initial=0.05))

    def script() -> None:
        until(broker, lambda b: len(acked(b)) == 1)
        broker.close_connections()  # 320 CONNECTION_FORCED, as a management close sends
        until(broker, lambda b: bool(b.received("basic.consume")[1:]))
        broker.put("work", b"x", message_id="after")
        until(broker, lambda b: len(acked(b)) == 2)

    drive(worker, script)
    assert got == ["before", "after"]
    assert worker.metrics.reconnects == 1 and broker.connections_opened == 2
