"""The in-memory handler harness: each outcome is the one the worker reaches, and it is
reached by the worker's own core (typed bodies, middleware, retry decision, copies, acks)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from rabbitry.consumer import (
    Action,
    App,
    AppError,
    HandlerTimeout,
    IncomingMessage,
    InvalidBody,
    Middleware,
    NonRetryable,
    Verdict,
    decide,
)
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    PARKED_REASON_HEADER,
)
from rabbitry.testing import HandlerHarness, Outcome
from tests.unit.retry_ladders import work_retry

RETRY = work_retry(1000, 5000)
SPEC = """
version: 1
name: harness
vhosts:
  - name: shop
    queues:
      - name: orders
        retry: {attempts: 3, backoff: [250ms, 1s], via: delay}
      - name: plain
    delays:
      - {name: delay, unit: 250ms, count: 4, targets: [{queue: orders}]}
"""


class Order(BaseModel):
    id: int
    amount: float


@dataclass
class Mail:
    to: str


def test_a_handler_that_returns_is_acked_and_counted() -> None:
    app = App()
    app.add("work", lambda m: None, retry=RETRY)
    harness = HandlerHarness(app)
    outcome = harness.deliver("work", b"x")
    assert outcome.acked and outcome.error is None and outcome.copy is None
    assert harness.metrics["work"].acked == 1 and harness.metrics["work"].received == 1


def test_failures_walk_the_tiers_then_park_with_the_workers_headers() -> None:
    app = App()

    @app.handler("work", retry=RETRY)
    def fail(message: IncomingMessage) -> None:
        raise RuntimeError(f"down on attempt {message.attempt}")

    outcomes = HandlerHarness(app).follow("work", b"job", message_id="job-1")
    assert [o.action for o in outcomes] == [Action.RETRY, Action.RETRY, Action.PARK]
    assert [o.attempt for o in outcomes] == [1, 2, 3]
    assert [o.tier for o in outcomes] == ["1s", "5s", None]
    assert [o.routing_key for o in outcomes] == ["work.retry.1s", "work.retry.5s", "work.parking"]
    parked = outcomes[-1]
    assert parked.headers[ATTEMPT_HEADER] == 3
    assert parked.headers[LAST_ERROR_HEADER] == "RuntimeError: down on attempt 3"
    assert "gave up after 3 attempts" in parked.headers[PARKED_REASON_HEADER]
    assert isinstance(parked.error, RuntimeError)
    assert parked.copy is not None and parked.copy.message_id == "job-1"
    assert b"x-rabbitry-parked-reason" in parked.copy.frames, "the copy the worker publishes"


def test_the_harness_agrees_with_the_pure_decision() -> None:
    app = App()

    @app.handler("work", retry=RETRY)
    def fail(message: IncomingMessage) -> None:
        raise RuntimeError("x")

    outcome = HandlerHarness(app).deliver("work", b"", headers={ATTEMPT_HEADER: 1})
    expected = decide(RETRY, "work", {ATTEMPT_HEADER: 1}, RuntimeError("x"))
    assert (outcome.action, outcome.delay_ms, outcome.routing_key) == (
        expected.action,
        expected.delay_ms,
        expected.routing_key,
    )


def test_retries_through_the_spec_delay_levels_name_the_level_exchange(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    app = App(path)

    @app.handler("orders")
    async def fail(order: Order) -> None:
        raise RuntimeError("payment service down")

    outcome = HandlerHarness(app).deliver("orders", Order(id=1, amount=2))
    assert outcome.retried and outcome.delay_ms == 250 and outcome.tier == "250ms"
    assert outcome.verdict.exchange != "" and outcome.routing_key.endswith("orders")


def test_without_a_retry_set_up_a_failure_is_rejected_to_the_brokers_dead_lettering() -> None:
    app = App()

    @app.handler("plain")
    def fail(message: IncomingMessage) -> None:
        raise RuntimeError("x")

    outcome = HandlerHarness(app).deliver("plain", b"")
    assert outcome.rejected and "declares no retry" in outcome.reason and outcome.copy is None


def test_a_valid_typed_body_reaches_the_handler_as_the_model() -> None:
    app = App()
    got: list[object] = []

    @app.handler("work", retry=RETRY)
    def handle(order: Order, message: IncomingMessage) -> None:
        got.append((order, message.message_id))

    @app.handler("mail")
    async def mail(mail: Mail) -> None:
        got.append(mail)

    with HandlerHarness(app) as harness:
        assert harness.deliver("work", Order(id=1, amount=9.5), message_id="m1").acked
        assert harness.deliver("work", {"id": "2", "amount": 1}).acked, "JSON, validated"
        assert harness.deliver("mail", Mail(to="a@b")).acked
    assert got[0] == (Order(id=1, amount=9.5), "m1")
    assert got[1][0] == Order(id=2, amount=1)  # type: ignore[index]
    assert got[2] == Mail(to="a@b")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"id": "seven", "amount": 1}, "id: Input should be a valid integer"),
        ({"id": 7}, "amount: Field required"),
        (b"{not json", "Invalid JSON"),
    ],
)
def test_an_invalid_typed_body_is_parked_at_once_with_the_validation_error(
    body: object, problem: str
) -> None:
    app = App()
    calls: list[Order] = []

    @app.handler("work", retry=RETRY)
    def handle(order: Order) -> None:
        calls.append(order)

    outcome = HandlerHarness(app).deliver("work", body, message_id="bad-1")  # type: ignore[arg-type]
    assert outcome.parked and outcome.attempt == 1 and calls == []
    assert isinstance(outcome.error, InvalidBody)
    error = outcome.headers[LAST_ERROR_HEADER]
    assert error.startswith("InvalidBody: the body of message bad-1 on work is not a valid Order")
    assert problem in error
    assert outcome.headers[PARKED_REASON_HEADER] == "InvalidBody is never retried"


def test_a_handler_codec_decodes_its_body() -> None:
    class Lines:
        content_type = "text/x-lines"

        def encode(self, data: object) -> bytes:
            assert isinstance(data, dict)
            return "\n".join(f"{k}={v}" for k, v in data.items()).encode()

        def decode(self, body: bytes) -> object:
            return dict(line.split("=", 1) for line in body.decode().splitlines())

    app = App()
    got: list[Mail] = []

    def handle(mail: Mail) -> None:
        got.append(mail)

    app.add("mail", handle, codec=Lines())
    outcome = HandlerHarness(app).deliver("mail", Mail(to="x@y"))
    assert outcome.acked and outcome.message.content_type == "text/x-lines"
    assert got == [Mail(to="x@y")]


class Recorder(Middleware):
    def __init__(self, name: str, log: list[str], fail: str = "") -> None:
        self.name, self.log, self.fail = name, log, fail

    def before(self, message: IncomingMessage) -> None:
        self.log.append(f"{self.name}.before")
        if self.fail == "before":
            raise PermissionError("not allowed")

    def after(self, message: IncomingMessage) -> None:
        self.log.append(f"{self.name}.after")
        if self.fail == "after":
            raise RuntimeError("commit failed")

    def on_error(self, message: IncomingMessage, error: BaseException) -> None:
        self.log.append(f"{self.name}.on_error:{type(error).__name__}")
        if self.fail == "on_error":
            raise NonRetryable(f"cannot recover from {error}")

    def decided(self, message: IncomingMessage, verdict: Verdict) -> None:
        self.log.append(f"{self.name}.decided:{verdict.action.value}")


def app_with(log: list[str], *middleware: Middleware, fails: bool = False) -> App:
    app = App(middleware=middleware)

    @app.handler("work", retry=RETRY)
    def handle(message: IncomingMessage) -> None:
        log.append("handler")
        if fails:
            raise RuntimeError("boom")

    return app


def deliver_through(*layers: str, fails: bool = False) -> tuple[Outcome, list[str]]:
    """Deliver one message to ``app_with``'s handler inside a Recorder per layer, the first
    outermost (``"b:after"``: recorder ``b`` whose after hook raises): the outcome and the log."""
    log: list[str] = []
    split = (layer.partition(":") for layer in layers)
    recorders = [Recorder(name, log, fail) for name, _, fail in split]
    return HandlerHarness(app_with(log, *recorders, fails=fails)).deliver("work", b""), log


# (the layers, whether the handler fails, the action, the error it ends with, the log in order)
HOOK_ORDER = [
    pytest.param(
        ("a", "b"),
        False,
        "ack",
        None,
        "a.before b.before handler b.after a.after b.decided:ack a.decided:ack",
        id="onion order, first registered outermost",
    ),
    pytest.param(
        ("a", "b"),
        True,
        "retry",
        RuntimeError,
        "a.before b.before handler b.on_error:RuntimeError a.on_error:RuntimeError"
        " b.decided:retry a.decided:retry",
        id="on_error hooks see the failure innermost first",
    ),
    pytest.param(
        ("a", "b:before", "c"),
        False,
        "retry",
        PermissionError,
        "a.before b.before a.on_error:PermissionError c.decided:retry b.decided:retry"
        " a.decided:retry",
        id="a before hook that raises fails the message without running the handler",
    ),
]


@pytest.mark.parametrize(("layers", "fails", "action", "error", "log"), HOOK_ORDER)
def test_middleware_hooks_run_in_their_order(
    layers: tuple[str, ...], fails: bool, action: str, error: type | None, log: str
) -> None:
    outcome, seen = deliver_through(*layers, fails=fails)
    assert outcome.action.value == action
    assert (type(outcome.error) if outcome.error else None) is error
    assert seen == log.split()


def test_an_after_hook_that_raises_turns_success_into_a_retry() -> None:
    outcome, log = deliver_through("a", "b:after")
    assert outcome.retried and outcome.headers[LAST_ERROR_HEADER] == "RuntimeError: commit failed"
    assert "a.on_error:RuntimeError" in log


def test_an_on_error_hook_may_replace_the_error_to_park_at_once() -> None:
    outcome, log = deliver_through("a", "b:on_error", fails=True)
    assert outcome.parked and isinstance(outcome.error, NonRetryable)
    assert "a.on_error:NonRetryable" in log


def test_a_failing_decided_hook_is_logged_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Middleware):
        def decided(self, message: IncomingMessage, verdict: Verdict) -> None:
            raise RuntimeError("metrics backend down")

    log: list[str] = []
    app = app_with(log, Broken())
    with caplog.at_level(logging.ERROR, "rabbitry.worker"):
        assert HandlerHarness(app).deliver("work", b"").acked
    assert "failed in decided()" in caplog.text


def test_middleware_must_be_a_middleware() -> None:
    with pytest.raises(AppError, match="is not a Middleware"):
        App().use(object())  # type: ignore[arg-type]


def test_duplicates_are_skipped_without_running_the_handler() -> None:
    app = App()
    calls: list[str | None] = []

    @app.handler("work", retry=RETRY, idempotent=True)
    def handle(message: IncomingMessage) -> None:
        calls.append(message.message_id)

    harness = HandlerHarness(app)
    assert harness.deliver("work", b"", message_id="once").acked
    second = harness.deliver("work", b"", message_id="once")
    assert second.skipped and second.action is Action.DUPLICATE and calls == ["once"]


def test_a_coroutine_past_its_time_to_run_is_a_handler_timeout() -> None:
    app = App()

    @app.handler("work", retry=RETRY, timeout=0.05)
    async def slow(message: IncomingMessage) -> None:
        await asyncio.sleep(5)

    with HandlerHarness(app) as harness:
        outcome = harness.deliver("work", b"")
    assert outcome.retried and isinstance(outcome.error, HandlerTimeout)
    assert harness.metrics["work"].timeouts == 1


def test_an_unknown_queue_names_the_handled_ones() -> None:
    app = App()
    app.add("work", lambda m: None)
    with pytest.raises(AppError, match=r"no handler for 'nope' \(handlers: work\)"):
        HandlerHarness(app).deliver("nope", b"")


def test_from_async_code_handlers_run_on_the_callers_loop_through_the_async_workers_dispatch() -> (
    None
):
    app = App()
    loops: list[asyncio.AbstractEventLoop] = []

    @app.handler("work", retry=RETRY)
    async def handle(order: Order, message: IncomingMessage) -> None:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)  # a real wait: the handler goes on in a task
        if message.attempt < 3:
            raise RuntimeError("not yet")

    async def main() -> tuple[list[Action], asyncio.AbstractEventLoop]:
        harness = HandlerHarness(app)
        outcomes = await harness.follow_async("work", Order(id=1, amount=2))
        invalid = await harness.deliver_async("work", {"id": "x"})
        assert invalid.parked and isinstance(invalid.error, InvalidBody)
        return [o.action for o in outcomes], asyncio.get_running_loop()

    actions, loop = asyncio.run(main())
    assert actions == [Action.RETRY, Action.RETRY, Action.ACK]
    assert loops == [loop, loop, loop]


def test_from_async_code_a_rate_limited_handler_waits_its_turn() -> None:
    app = App()
    started: list[float] = []

    @app.handler("work", retry=RETRY, rate=20)
    async def handle(message: IncomingMessage) -> None:
        started.append(time.monotonic())

    async def main() -> list[Outcome]:
        harness = HandlerHarness(app)
        return list(await asyncio.gather(*(harness.deliver_async("work", b"") for _ in range(3))))

    outcomes = asyncio.run(main())
    assert all(o.acked for o in outcomes)
    assert [o.message.message_id for o in outcomes] == ["harness-1", "harness-2", "harness-3"]
    # the i-th start comes i/rate after the first at the earliest (a token bucket: a late wake
    # on a loaded machine may bring two starts closer, never ahead of the rate)
    assert all(t - started[0] >= i / 20 - 0.005 for i, t in enumerate(started)), started
