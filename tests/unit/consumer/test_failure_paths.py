"""The failure paths of both workers, through the handler harness (the workers' own core and
dispatch): immediate retries, which errors retry, what a parked copy carries, fault events."""

from __future__ import annotations

import asyncio
import logging
import traceback
from pathlib import Path
from typing import Any

import pytest

from rabbitry.consumer import App, IncomingMessage
from rabbitry.consumer.decision import replay_headers
from rabbitry.consumer.outbox import header_frame_size
from rabbitry.consumer.parked_copy import TRACE_HEADER, stack_trace
from rabbitry.policies.retry import ATTEMPT_HEADER, Backoff, ImmediateRetry, RetryPolicy
from rabbitry.testing import HandlerHarness
from rabbitry.topology.patterns.retries import QueueRetry

SPEC = """
version: 1
name: failures
vhosts:
  - name: shop
    queues:
      - name: orders
        retry:
          attempts: 3
          backoff: [1s, 5s]
          immediate: {attempts: 3, pause: 1ms}
          retry_on: [ConnectionError]
          faults: {exchange: shop.faults}
      - name: plain
"""


def spec_app(tmp_path: Path) -> App:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return App(path)


def flaky(fails: int, error: type[Exception] = ConnectionError) -> tuple[list[int], Any]:
    calls: list[int] = []

    def handle(message: IncomingMessage) -> None:
        calls.append(message.attempt)
        if len(calls) <= fails:
            raise error(f"call {len(calls)} fails")

    return calls, handle


def test_a_handler_failing_twice_then_succeeding_is_acked_after_three_calls(
    tmp_path: Path,
) -> None:
    app = spec_app(tmp_path)
    calls, handle = flaky(2)
    app.add("orders", handle)
    outcome = HandlerHarness(app).deliver("orders", b"x")
    assert outcome.acked and len(calls) == 3


def test_immediate_calls_do_not_count_toward_the_ladders_attempts(tmp_path: Path) -> None:
    app = spec_app(tmp_path)
    calls, handle = flaky(1000)
    app.add("orders", handle)
    outcomes = HandlerHarness(app).follow("orders", b"x")
    assert [o.action.value for o in outcomes] == ["retry", "retry", "park"]
    assert calls == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert outcomes[-1].headers[ATTEMPT_HEADER] == 3


def test_an_error_the_rules_do_not_retry_is_called_once_and_parked(tmp_path: Path) -> None:
    app = spec_app(tmp_path)
    calls, handle = flaky(1000, KeyError)
    app.add("orders", handle)
    outcome = HandlerHarness(app).deliver("orders", b"x")
    assert outcome.parked and len(calls) == 1
    assert outcome.reason == "KeyError is not in retry_on (ConnectionError)"


def test_an_error_caused_by_an_allow_listed_one_retries(tmp_path: Path) -> None:
    app = spec_app(tmp_path)

    @app.handler("orders", immediate=ImmediateRetry(attempts=1))
    def handle(message: IncomingMessage) -> None:
        try:
            raise ConnectionResetError("peer")
        except ConnectionError as exc:
            raise RuntimeError("could not reach the stock service") from exc

    assert HandlerHarness(app).deliver("orders", b"x").retried


def test_the_handler_option_replaces_the_specs_immediate_retries(tmp_path: Path) -> None:
    app = spec_app(tmp_path)
    calls, handle = flaky(1000)
    app.add("orders", handle, immediate=ImmediateRetry(attempts=2, pause_ms=0))
    assert HandlerHarness(app).deliver("orders", b"x").retried and len(calls) == 2


def test_async_worker_calls_again_in_the_handlers_task(tmp_path: Path) -> None:
    app = spec_app(tmp_path)
    calls: list[int] = []

    @app.handler("orders")
    async def handle(message: IncomingMessage) -> None:
        calls.append(message.attempt)
        if len(calls) == 1:
            raise ConnectionError("before the first wait")
        await asyncio.sleep(0)
        if len(calls) == 2:
            raise ConnectionError("after a wait")

    async def main() -> Any:
        return await HandlerHarness(app).deliver_async("orders", b"x")

    assert asyncio.run(main()).acked and len(calls) == 3


def test_immediate_retries_are_counted_per_queue_in_the_worker_metrics(tmp_path: Path) -> None:
    from rabbitry.metrics import RabbitryCollector
    from tests.unit.consumer.test_stores_metrics_message import scrape

    app = spec_app(tmp_path)
    _, mended = flaky(2)  # two calls again, then acked
    app.add("orders", mended)
    app.add("plain", flaky(1000)[1])  # no immediate retries: one call, then its verdict
    harness = HandlerHarness(app)
    assert harness.deliver("orders", b"x").acked
    harness.deliver("plain", b"y")
    orders, plain = harness.metrics["orders"], harness.metrics["plain"]
    assert (orders.immediate_retries, orders.failed, orders.acked) == (2, 0, 1)
    assert plain.immediate_retries == 0 and plain.failed == 1
    failing_app = spec_app(tmp_path)
    failing_app.add("orders", flaky(1000)[1])  # every call fails: two calls again, then retried
    async_harness = HandlerHarness(failing_app)
    assert asyncio.run(async_harness.deliver_async("orders", b"x")).retried
    assert async_harness.metrics["orders"].immediate_retries == 2
    family = scrape(RabbitryCollector(workers=[harness.metrics, async_harness.metrics]))
    v = ("vhost", harness.metrics.vhost)
    assert family[f"rabbitry_worker_immediate_retries_total{[('queue', 'orders'), v]}"] == 4
    assert family[f"rabbitry_worker_immediate_retries_total{[('queue', 'plain'), v]}"] == 0


def test_sync_handlers_of_the_async_worker_are_called_again_too(tmp_path: Path) -> None:
    app = spec_app(tmp_path)
    calls, handle = flaky(1000)
    app.add("orders", handle)

    async def main() -> Any:
        return await HandlerHarness(app).deliver_async("orders", b"x")

    assert asyncio.run(main()).retried and len(calls) == 3


def deep(depth: int, text: str) -> None:
    if depth == 0:
        raise ConnectionError(text)
    deep(depth - 1, text)


@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_the_parked_copy_carries_the_trace_within_the_frame_size(
    tmp_path: Path, frame_max: int
) -> None:
    app = spec_app(tmp_path)

    @app.handler("orders", immediate=ImmediateRetry(attempts=1))
    def handle(message: IncomingMessage) -> None:
        deep(300, "stock service down " + "y" * 500_000)

    harness = HandlerHarness(app)
    harness.core.builder.frame_max = frame_max
    outcome = harness.follow("orders", b"x")[-1]
    assert outcome.parked and outcome.copy is not None
    trace = outcome.headers[TRACE_HEADER]
    size = header_frame_size(outcome.copy.frames)
    assert frame_max - 64 < size <= frame_max  # the room is measured and used, not guessed
    assert trace.startswith("Traceback (most recent call last):\n")
    assert "ConnectionError: stock service down yyy" in trace and "bytes, cut]" in trace
    assert "raise ConnectionError(text)" in trace  # the innermost frame


def test_a_short_trace_is_kept_whole() -> None:
    try:
        deep(2, "down")
    except ConnectionError as exc:
        error = exc
    assert stack_trace(error, 100_000) == "".join(traceback.format_exception(error))


def test_a_cut_trace_keeps_the_exception_line_and_the_innermost_frames() -> None:
    try:
        deep(50, "down")
    except ConnectionError as exc:
        error = exc
    trace = stack_trace(error, 600)
    assert len(trace.encode()) <= 600
    assert trace.endswith("ConnectionError: down\n")
    assert "raise ConnectionError(text)" in trace  # the innermost frame
    assert "in test_a_cut_trace" not in trace  # the outermost one went first


def test_the_parked_copy_carries_the_handlers_own_headers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = spec_app(tmp_path)

    def extra(message: IncomingMessage, error: BaseException) -> dict[str, Any]:
        return {"x-tenant": "acme", "x-error-kind": type(error).__name__, "x-rabbitry-attempt": 99}

    @app.handler("orders", parked_headers=extra)
    def handle(message: IncomingMessage) -> None:
        raise KeyError("sku")

    with caplog.at_level(logging.WARNING, "rabbitry.worker"):
        outcome = HandlerHarness(app).deliver("orders", b"x")
    assert outcome.parked
    assert outcome.headers["x-tenant"] == "acme" and outcome.headers["x-error-kind"] == "KeyError"
    assert outcome.headers[ATTEMPT_HEADER] == 1  # rabbitry's own header is not overridden
    assert "x-rabbitry-attempt: those names are rabbitry's" in caplog.text


def test_a_failing_parked_headers_hook_still_parks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = spec_app(tmp_path)

    def extra(message: IncomingMessage, error: BaseException) -> dict[str, Any]:
        raise RuntimeError("hook broke")

    @app.handler("orders", parked_headers=extra)
    def handle(message: IncomingMessage) -> None:
        raise KeyError("sku")

    outcome = HandlerHarness(app).deliver("orders", b"x")
    assert outcome.parked and TRACE_HEADER in outcome.headers
    assert "parked_headers of orders failed" in caplog.text


def test_a_parked_message_publishes_its_fault_event(tmp_path: Path) -> None:
    app = spec_app(tmp_path)

    @app.handler("orders")
    def handle(message: IncomingMessage) -> None:
        raise KeyError("sku")

    outcome = HandlerHarness(app).deliver("orders", b"x", message_id="order-7")
    assert outcome.fault is not None
    assert outcome.fault["message_id"] == "order-7"
    assert outcome.fault["queue"] == "orders"
    assert outcome.fault["parking_queue"] == "orders.parking"
    assert outcome.fault["attempts"] == 1
    assert outcome.fault["error"] == "KeyError: 'sku'"
    assert "raise KeyError" in outcome.fault["trace"]


def test_a_retried_message_publishes_no_fault_event(tmp_path: Path) -> None:
    app = spec_app(tmp_path)
    _, handle = flaky(1000)
    app.add("orders", handle)
    outcome = HandlerHarness(app).deliver("orders", b"x")
    assert outcome.retried and outcome.fault is None


def test_retry_rules_given_in_code_apply_too() -> None:
    app = App()
    retry = QueueRetry(
        "jobs",
        RetryPolicy(attempts=2, backoff=Backoff(tiers_ms=(1000,)), retry_on=("TimeoutError",)),
        "jobs.parking",
        {1000: "jobs.retry.1s"},
    )
    calls, handle = flaky(1000, TimeoutError)
    app.add("jobs", handle, retry=retry, immediate=ImmediateRetry(attempts=2, pause_ms=0))
    assert HandlerHarness(app).deliver("jobs", b"x").retried and len(calls) == 2


def test_a_replayed_message_goes_back_without_its_old_trace() -> None:
    headers = replay_headers({TRACE_HEADER: "Traceback ...", ATTEMPT_HEADER: 3, "x-tenant": "a"})
    assert TRACE_HEADER not in headers and ATTEMPT_HEADER not in headers
    assert headers["x-tenant"] == "a"
