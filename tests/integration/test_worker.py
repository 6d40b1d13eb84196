"""Workers on a real broker: the retry ladder, parking, crashes, shutdown, poison, cancellation.

What needs no broker (duplicates, time-to-run, errors never retried, reconnecting after the
broker closed the connection) runs on the scripted broker:
tests/unit/testing/test_scripted_worker_features.py."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pytest

from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.consumer.app import url_for_app
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    MAX_ERROR_TEXT,
    PARKED_REASON_HEADER,
    QUEUE_HEADER,
)
from rabbitry.publisher import Publisher
from rabbitry.topology import load_spec
from rabbitry.topology.patterns.delays import delay_scheme
from tests.integration.applied import applied_vhost_fixtures
from tests.integration.conftest import Broker, one_vhost_spec, worker_process
from tests.waiting import wait_for

# One xdist worker runs the module: one apply for all its tests (``applied``).
pytestmark = [pytest.mark.broker, pytest.mark.xdist_group("test_worker")]

SPEC = one_vhost_spec("""
        queues:
          - name: work
            retry: {attempts: 3, backoff: [1s, 2s], never_retry: [ValueError]}
          - name: mail
            type: quorum
            retry: {attempts: 3, backoff: [500ms, 1s], via: delay}
          - {name: poison, type: quorum, delivery_limit: 2, parking: true}
          - {name: jobs, type: quorum}
          - {name: slow}
        delays:
          - name: delay
            unit: 100ms
            count: 6
            targets: [{queue: jobs}]
""")


applied_once, applied = applied_vhost_fixtures(SPEC)


def make_app(broker: Broker, **options: Any) -> App:
    spec = load_spec(broker.tmp / "spec.yaml", {"vhost": broker.vhost, "stack": broker.stack})
    return App(spec, **options)


def run_worker(worker: AsyncWorker, until: Callable[[], bool], timeout: float = 30.0) -> float:
    async def main() -> float:
        started = time.monotonic()
        task = asyncio.create_task(worker.run())
        while not until() and time.monotonic() - started < timeout and not task.done():
            await asyncio.sleep(0.02)
        worker.stop()
        await task
        return time.monotonic() - started

    return asyncio.run(main())


def publish(broker: Broker, routing_key: str, bodies: list[bytes], **props: Any) -> None:
    with Publisher(broker.vhost_amqp_url) as pub:
        for i, body in enumerate(bodies):
            pub.publish(body, routing_key=routing_key, message_id=f"{routing_key}-{i}", **props)


def drain(broker: Broker, queue: str, timeout: float = 5.0) -> list[tuple[Any, bytes]]:
    """Every message in ``queue`` (waiting up to ``timeout`` for the first)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    out: list[tuple[Any, bytes]] = []
    deadline = time.monotonic() + timeout
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            if out or time.monotonic() > deadline:
                break
            time.sleep(0.05)
            continue
        out.append((props, body))
    connection.close()
    return out


def depth(broker: Broker, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    count = connection.channel().queue_declare(queue, passive=True).method.message_count
    connection.close()
    return int(count)


@pytest.mark.versions
def test_failing_twice_then_succeeding_is_called_three_times_with_the_tier_delays(
    applied: Broker,
) -> None:
    app = make_app(applied)
    calls: list[float] = []

    @app.handler("work")
    async def handle(message: IncomingMessage) -> None:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise RuntimeError(f"attempt {message.attempt} fails")

    publish(applied, "work", [b"order-1"])
    worker = AsyncWorker(app, applied.vhost_amqp_url)
    run_worker(worker, lambda: len(calls) >= 3 and worker.in_flight == 0, timeout=20)
    assert len(calls) == 3
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert 1.0 - 0.05 <= gaps[0] < 1.9, gaps
    assert 2.0 - 0.05 <= gaps[1] < 3.5, gaps
    counters = worker.metrics["work"]
    assert dict(counters.retried) == {"1s": 1, "2s": 1}
    assert counters.acked == 3 and counters.parked == 0
    assert depth(applied, "work") == 0 and depth(applied, "work.parking") == 0


@pytest.mark.versions
def test_always_failing_parks_after_n_attempts_with_bounded_headers(applied: Broker) -> None:
    app = make_app(applied)
    calls: list[int] = []

    @app.handler("mail")
    def handle(message: IncomingMessage) -> None:
        calls.append(message.attempt)
        raise RuntimeError("smtp down " + "x" * 50_000)

    publish(applied, "mail", [b"hello"], headers={"tenant": "acme"})
    worker = Worker(app, url_for_app(applied.amqp_url, app))
    import threading

    def stop_when_parked() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and worker.metrics["mail"].parked < 1:
            time.sleep(0.02)
        worker.stop()

    threading.Thread(target=stop_when_parked, daemon=True).start()
    worker.run()
    assert calls == [1, 2, 3]
    ((props, body),) = drain(applied, "mail.parking")
    assert body == b"hello" and props.message_id == "mail-0"
    headers = props.headers
    assert headers[ATTEMPT_HEADER] == 3 and headers["tenant"] == "acme"
    assert headers[QUEUE_HEADER] == "mail"
    assert headers[LAST_ERROR_HEADER].startswith("RuntimeError: smtp down")
    assert len(headers[LAST_ERROR_HEADER]) <= MAX_ERROR_TEXT
    assert "3 attempts" in headers[PARKED_REASON_HEADER]
    assert depth(applied, "mail") == 0


WORKER_MODULE = """
    import os, time, asyncio
    from pathlib import Path
    from rabbitry.consumer import App
    from rabbitry.topology import load_spec

    spec = load_spec(Path(os.environ["T_SPEC"]), {"vhost": os.environ["T_VHOST"], "stack": "s"})
    app = App(spec)
    record = Path(os.environ["T_RECORD"])
    pause = float(os.environ.get("T_PAUSE", "0"))

    @app.handler("slow")
    async def slow(message):
        await asyncio.sleep(pause)
        with record.open("a") as f:
            f.write(message.message_id + "\\n")

    @app.handler("poison")
    def poison(message):
        if message.body == b"poison":
            os._exit(3)  # the process dies before it can ack: only the delivery limit helps
"""


def start_worker(broker: Broker, record: Path, *extra: str, pause: float = 0.0) -> Any:
    env = {"T_RECORD": str(record), "T_PAUSE": str(pause)}
    return worker_process(
        broker, "worker_app", WORKER_MODULE, env, "--log-level", "warning", *extra
    )


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_sigkilled_worker_loses_nothing(applied: Broker) -> None:
    total = 300
    publish(applied, "slow", [b"job"] * total)
    first_record = applied.tmp / "first.txt"
    first = start_worker(
        applied, first_record, "--prefetch", "100", "--concurrency", "20", pause=0.02
    )
    assert wait_for(lambda: len(lines(first_record)) >= 40, 30), "the first worker got going"
    first.send_signal(signal.SIGKILL)  # mid-batch: 100 delivered, some handled, few acked
    first.wait(10)
    handled_before = set(lines(first_record))
    assert len(handled_before) < total

    second_record = applied.tmp / "second.txt"
    second = start_worker(applied, second_record, "--prefetch", "100")
    try:
        assert wait_for(lambda: depth(applied, "slow") == 0, 30)
        assert wait_for(
            lambda: (
                set(lines(first_record)) | set(lines(second_record))
                >= {f"slow-{i}" for i in range(total)}
            ),
            30,
        ), "every message handled by one of the workers"
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    redelivered = handled_before & set(lines(second_record))
    # handled but unacked when killed: at-least-once means these come again, nothing else lost
    assert len(redelivered) <= 100


def test_graceful_shutdown_acks_or_returns_everything_in_flight(applied: Broker) -> None:
    total = 60
    publish(applied, "slow", [b"job"] * total)
    record = applied.tmp / "done.txt"
    worker = start_worker(
        applied,
        record,
        "--prefetch",
        "30",
        "--concurrency",
        "30",
        "--shutdown-timeout",
        "10",
        pause=0.5,
    )
    assert wait_for(lambda: len(lines(record)) >= 1, 20)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.stdout.read() if worker.stdout else ""
    handled = lines(record)
    assert len(handled) == len(set(handled))
    assert len(handled) >= 30, "the in-flight handlers were allowed to finish"
    # the broker puts back what the worker returned at shutdown once it handled the rejects
    # and the channel's close, which a count from another connection may see a moment later
    unhandled = total - len(handled)
    assert wait_for(lambda: depth(applied, "slow") == unhandled, 10), depth(applied, "slow")
    left = drain(applied, "slow", timeout=2)
    left_ids = {props.message_id for props, _ in left}
    assert not left_ids & set(handled), "everything handled was acked"
    assert len(left_ids) + len(handled) == total, "everything else went back to the queue"


@pytest.mark.versions
def test_poison_message_is_stopped_by_the_delivery_limit(applied: Broker) -> None:
    publish(applied, "poison", [b"poison"])
    record = applied.tmp / "unused.txt"
    crashes = 0
    # Counted, not waited out: after each crash the broker takes the message back from the dead
    # connection into the queue, or past the limit into the parking lot; a worker started while
    # the queue is empty would get nothing.
    while crashes < 5 and depth(applied, "poison.parking") == 0:
        worker = start_worker(applied, record)
        try:
            code = worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
            raise AssertionError("the worker got no poison message to crash on") from None
        assert code == 3
        crashes += 1
        assert wait_for(
            lambda: depth(applied, "poison") + depth(applied, "poison.parking") == 1, 10
        ), "the message went back to its queue or on to the parking lot"
    assert crashes == 3, "delivered 1 + delivery_limit times, then dead-lettered"
    ((props, body),) = drain(applied, "poison.parking")
    assert body == b"poison"
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    assert depth(applied, "poison") == 0


def test_cancellation_drops_the_cancelled_delayed_job_and_delivers_the_others(
    applied: Broker,
) -> None:
    app = make_app(applied, cancellation=True)
    got: list[str | None] = []

    @app.handler("jobs")
    def handle(message: IncomingMessage) -> None:
        got.append(message.message_id)

    spec = load_spec(applied.tmp / "spec.yaml", {"vhost": applied.vhost, "stack": "s"})
    scheme = delay_scheme(spec.vhosts[0].delays[0])
    from rabbitry.consumer import cancel_job

    with Publisher(applied.vhost_amqp_url, delays=scheme) as pub:
        for job in ("job-a", "job-b", "job-c"):
            pub.publish(job.encode(), routing_key="jobs", delay=1.0, message_id=job)
        cancel_job(pub, "jobs", "job-b")
    worker = AsyncWorker(app, applied.vhost_amqp_url)
    started = time.monotonic()
    run_worker(worker, lambda: len(got) >= 2 and worker.metrics["jobs"].cancelled >= 1, 15)
    assert sorted(got) == ["job-a", "job-c"]
    assert time.monotonic() - started >= 0.8, "the jobs waited for their delay"
    assert worker.metrics["jobs"].cancelled == 1
    assert depth(applied, "jobs") == 0
