"""Per-handler concurrency and rate limits on a real broker (typed bodies and middleware run on
the scripted broker: tests/unit/testing/test_scripted_worker_features.py)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import pytest

from rabbitry.consumer import (
    AsyncWorker,
    IncomingMessage,
    Worker,
)
from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker
from tests.integration.test_worker import applied, applied_once, depth, make_app, run_worker

pytestmark = pytest.mark.broker
__all__ = ["applied", "applied_once"]  # the fixtures, shared with test_worker


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
