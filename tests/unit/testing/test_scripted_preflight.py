"""A worker refuses to start, consuming nothing, when the broker lacks what its handlers need:
checked against the scripted broker, whose passive declares answer 404 for what it lacks, as a
broker does. (What a broker version decides, and the CLI, stay in
tests/integration/test_worker_preflight.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.consumer import App, AsyncWorker, IncomingMessage, TopologyMissing, Worker
from rabbitry.consumer.preflight import Needed
from rabbitry.testing import ScriptedBroker
from tests.worker_runs import start_async

SPEC = """
version: 1
name: preflight
vhosts:
  - name: shop
    queues:
      - name: work
        retry: {attempts: 3, backoff: [1s, 2s]}
      - name: mail
        type: quorum
        retry: {attempts: 3, backoff: [500ms, 1s], via: delay}
    delays:
      - {name: delay, unit: 100ms, count: 4, targets: [{queue: mail}]}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as scripted:
        yield scripted


def failing_app(spec: Path, queue: str = "work") -> tuple[App, list[bytes]]:
    app = App(spec)
    calls: list[bytes] = []

    @app.handler(queue)
    async def handle(message: IncomingMessage) -> None:
        calls.append(message.body)
        raise RuntimeError("always fails")

    return app, calls


def provide_all_but(broker: ScriptedBroker, app: App, *missing: str) -> None:
    """Declare on the broker everything the app's worker asks for, but ``missing``: what it
    asks for is read off its refusal on the empty broker."""
    with pytest.raises(TopologyMissing) as refused:
        Worker(app, broker.url_for("shop")).run(max_idle=0)
    for need in refused.value.missing:
        if need.name in missing:
            continue
        if need.kind is Needed.QUEUE:
            broker.declare_queue(need.name)
        else:
            broker.declare_exchange(need.name, "direct")


def test_a_missing_parking_lot_refuses_naming_it_and_the_command(
    broker: ScriptedBroker, spec: Path
) -> None:
    app, calls = failing_app(spec)
    provide_all_but(broker, app, "work.parking")
    for body in (b"a", b"b", b"c"):
        broker.put("work", body)
    error = start_async(AsyncWorker(app, broker.url_for("shop")))
    assert isinstance(error, TopologyMissing), error
    assert [(n.kind, n.name) for n in error.missing] == [("queue", "work.parking")]
    assert "queue 'work.parking' (parking lot of 'work')" in str(error)
    assert f"run `rabbitry apply {spec}` to make them" in str(error)
    assert calls == [] and len(broker.queue("work").messages) == 3
    assert broker.received("basic.consume") == []


def test_a_missing_retry_tier_refuses_the_blocking_worker_too(
    broker: ScriptedBroker, spec: Path
) -> None:
    app, calls = failing_app(spec)
    provide_all_but(broker, app, "work.retry.2s")
    broker.put("work", b"a")
    with pytest.raises(TopologyMissing) as refused:
        Worker(app, broker.url_for("shop")).run(max_idle=3)
    assert [n.name for n in refused.value.missing] == ["work.retry.2s"]
    assert "retry tier of 'work', 2000 ms" in str(refused.value)
    assert calls == [] and len(broker.queue("work").messages) == 1
    assert broker.received("basic.consume") == []


def test_missing_delay_levels_are_each_named(broker: ScriptedBroker, spec: Path) -> None:
    app, calls = failing_app(spec, "mail")
    provide_all_but(broker, app, "delay.02", "delay.00")
    broker.declare_exchange("delay.00", "direct")  # only the queue delay.00 is gone
    broker.declare_queue("delay.02")  # only the exchange delay.02 is gone
    broker.put("mail", b"a")
    error = start_async(AsyncWorker(app, broker.url_for("shop")))
    assert isinstance(error, TopologyMissing), error
    assert sorted((n.kind, n.name) for n in error.missing) == [
        ("exchange", "delay.02"),
        ("queue", "delay.00"),
    ]
    assert calls == [] and len(broker.queue("mail").messages) == 1


def test_async_with_raises_the_refusal_on_entry(broker: ScriptedBroker, spec: Path) -> None:
    app, _ = failing_app(spec)
    provide_all_but(broker, app, "work.retry.1s")

    async def main() -> None:
        with pytest.raises(TopologyMissing, match=r"queue 'work\.retry\.1s'"):
            async with AsyncWorker(app, broker.url_for("shop")):
                raise AssertionError("entered without the retry tier")

    asyncio.run(main())
