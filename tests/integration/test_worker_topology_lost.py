"""A retry tier or parking lot deleted under a running worker: the worker's copy of a failed
message comes back unroutable, and the worker stops (exit 1 from ``rabbitry worker run``)
naming the missing queue and ``rabbitry apply``, with the message back in its queue, instead
of redelivering it at once, again and again. Handler calls are counted exactly; queue depths
are exact AMQP counts (passive declares)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rabbitry.consumer import (
    App,
    AsyncWorker,
    IncomingMessage,
    NonRetryable,
    TopologyLost,
    Worker,
)
from tests.integration.conftest import Broker, worker_process
from tests.integration.test_worker import depth, publish
from tests.integration.test_worker_preflight import LADDER, VIA_DELAY, app_of, delete
from tests.waiting import wait_for

pytestmark = pytest.mark.broker

BOUND_S = 30.0
"""How long a worker may take to stop; one that loops runs into it and fails the test."""

HANDLERS = """
    import os
    from rabbitry.consumer import App, IncomingMessage, NonRetryable

    app = App(os.environ["T_SPEC"], variables={"vhost": os.environ["T_VHOST"], "stack": "s"})


    @app.handler("work")
    def work(message: IncomingMessage) -> None:
        with open(os.environ["T_CALLS"], "a") as calls:
            calls.write(f"{message.message_id}\\n")
        raise NonRetryable("never works")
"""


def failing(app: App, error: Callable[[], Exception]) -> list[int]:
    """A handler of ``work`` that raises ``error()``; the attempts it was called with."""
    calls: list[int] = []

    @app.handler("work")
    def handle(message: IncomingMessage) -> None:
        calls.append(message.attempt)
        raise error()

    return calls


def started_in_a_thread(worker: Worker) -> tuple[threading.Thread, list[BaseException]]:
    """``worker.run()`` in a thread of its own, started; what it raises lands in the list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def run_blocking_until_it_stops(worker: Worker, then: Callable[[], None]) -> BaseException | None:
    """Run ``worker`` in a thread; once it consumes, ``then()``; its error once it stopped by
    itself (stopped from here after ``BOUND_S``: None)."""
    thread, errors = started_in_a_thread(worker)
    try:
        assert wait_for(lambda: worker.core.start_check.passed, BOUND_S), "it consumes"
        then()
        thread.join(BOUND_S)
    finally:
        if thread.is_alive():
            worker.stop()
            thread.join(BOUND_S)
    return errors[0] if errors else None


def run_async_until_it_stops(worker: AsyncWorker, then: Callable[[], None]) -> BaseException | None:
    async def main() -> BaseException | None:
        task = asyncio.ensure_future(worker.run())
        started = time.monotonic()
        while not worker.core.start_check.passed and time.monotonic() - started < BOUND_S:
            await asyncio.sleep(0.02)
        assert not task.done(), task
        await asyncio.to_thread(then)
        done, _ = await asyncio.wait({task}, timeout=BOUND_S)
        if not done:
            await worker.stop()
            return None
        return task.exception()

    return asyncio.run(main())


def runner(kind: str, app: App, broker: Broker) -> Callable[[Callable[[], None]], object]:
    if kind == "asyncio":
        worker = AsyncWorker(app, broker.vhost_amqp_url)
        return lambda then: run_async_until_it_stops(worker, then)
    blocking = Worker(app, broker.vhost_amqp_url)
    return lambda then: run_blocking_until_it_stops(blocking, then)


LOST = [
    pytest.param(
        "work.parking",
        lambda: NonRetryable("never works"),
        "queue 'work.parking' (parking lot of 'work')",
        [],
        id="parking-lot",
    ),
    pytest.param(
        "work.retry.1s",
        lambda: RuntimeError("fails"),
        "retry tier of 'work'",
        ["work.parking"],  # not parked in its place: nothing is decided
        id="retry-tier",
    ),
]
"""The queue deleted, what the handler raises (so that the message goes there), how the
error names the queue, and the queues that stay empty."""


@pytest.mark.parametrize(("gone", "error", "named", "still_empty"), LOST)
@pytest.mark.parametrize("kind", ["asyncio", "blocking"])
def test_a_queue_of_the_ladder_deleted_under_a_running_worker_stops_it_with_the_message_kept(
    broker: Broker,
    kind: str,
    gone: str,
    error: Callable[[], Exception],
    named: str,
    still_empty: list[str],
) -> None:
    path = broker.spec(LADDER)
    broker.apply(LADDER)
    app = app_of(broker, path)
    calls = failing(app, error)

    def delete_then_publish() -> None:
        delete(broker, queue=gone)
        publish(broker, "work", [b"order"])

    stopped = runner(kind, app, broker)(delete_then_publish)
    assert calls == [1], f"called {len(calls)} times: the worker looped on the message"
    assert isinstance(stopped, TopologyLost), stopped
    assert [(n.kind, n.name) for n in stopped.missing] == [("queue", gone)]
    text = str(stopped)
    assert named in text, text
    assert f"run `rabbitry apply {path}`" in text and "back in its queue" in text, text
    # the broker puts the message back once it handled the worker's nack or channel close,
    # which a count from another connection may see a moment later
    assert wait_for(lambda: depth(broker, "work") == 1, 10), depth(broker, "work")
    assert [depth(broker, queue) for queue in still_empty] == [0] * len(still_empty)


def test_delay_levels_refused_under_a_running_worker_stop_it_with_the_message_kept(
    broker: Broker,
) -> None:
    """A retry ``via`` a delay whose layout marker was deleted: the broker refuses the publish
    with 404 and closes the channel (so it requeues the message itself)."""
    path = broker.spec(VIA_DELAY)
    broker.apply(VIA_DELAY)
    app = app_of(broker, path)
    calls: list[int] = []

    @app.handler("mail")
    def handle(message: IncomingMessage) -> None:
        calls.append(message.attempt)
        raise RuntimeError("fails")

    def delete_then_publish() -> None:
        delete(broker, exchange="delay.layout.binary-100ms-4")
        publish(broker, "mail", [b"letter"])

    error = runner("asyncio", app, broker)(delete_then_publish)
    assert calls == [1], f"called {len(calls)} times"
    assert isinstance(error, TopologyLost), error
    assert [(n.kind, n.name) for n in error.missing] == [
        ("exchange", "delay.layout.binary-100ms-4")
    ]
    assert "delay levels carrying retries of 'mail'" in str(error)
    assert wait_for(lambda: depth(broker, "mail") == 1, 10), depth(broker, "mail")


def test_worker_run_exits_1_naming_the_lost_parking_lot_and_the_command(
    broker: Broker, tmp_path: Path
) -> None:
    path = broker.spec(LADDER)
    broker.apply(LADDER)
    calls = tmp_path / "calls.txt"
    process = worker_process(
        broker, "handlers", HANDLERS, {"T_CALLS": str(calls)}, "--sync", "--log-level", "info"
    )
    try:
        assert process.stdout is not None
        assert wait_for(lambda: process.poll() is not None or _consuming(broker), BOUND_S)
        delete(broker, queue="work.parking")
        publish(broker, "work", [b"order"])
        output, _ = process.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(output.decode()) from None
    text = output.decode()
    assert process.returncode == 1, text
    assert calls.read_text().splitlines() == ["work-0"], text
    [line] = [line for line in text.splitlines() if line.startswith("error:")]
    assert "queue 'work.parking' (parking lot of 'work')" in line, text
    assert f"rabbitry apply {path}" in line, text
    assert "; parked (" not in text, text
    assert wait_for(lambda: depth(broker, "work") == 1, 10), depth(broker, "work")


def _consuming(broker: Broker) -> bool:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    try:
        found = connection.channel().queue_declare("work", passive=True).method.consumer_count
    finally:
        connection.close()
    return int(found) > 0
