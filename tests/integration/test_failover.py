"""Failover on a three-node cluster: the node the clients are connected to stops while they
publish with confirms and consume. No confirmed message is lost, the clients are back within
seconds (the figures are printed), and the CLI's management calls skip the stopped node.

Each test takes the first node away itself and gets the whole cluster back afterwards
(the ``ready`` fixture), so the tests pass alone and in any order."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.consumer.aio import AsyncWorker
from rabbitry.consumer.app import App
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.sync import Worker
from rabbitry.errors import PublishError
from rabbitry.publisher.aio import AsyncPublisher
from rabbitry.publisher.sync import Publisher
from rabbitry.testing.broker import Broker
from rabbitry.testing.containers import BrokerContainer
from tests.integration.cluster import api, restore, wait

# the session's three-node cluster (tests/integration/cluster.py), shared with test_cluster
pytestmark = [pytest.mark.broker, pytest.mark.xdist_group("cluster")]

QUEUE = "orders"
# Traffic is counted, not timed: each client confirms or receives this many messages before
# the node goes, so that some are in flight when it does, and as many again after it went, so
# that each is seen back at work. (Fixed 3 s and 12 s of traffic before: the clients were
# back within 0.6 s, and the test waited out the rest.)
EVENTS = 200
BACK_WITHIN = 30.0  # seconds: a client not back by then has failed the test


@dataclass
class Log:
    """What one client saw: (monotonic time, message id) of each confirm or delivery."""

    events: list[tuple[float, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def since(self, moment: float) -> int:
        """How many events came after ``moment`` (monotonic)."""
        with self.lock:
            return sum(1 for t, _ in self.events if t > moment)

    def add(self, message_id: str | None) -> None:
        with self.lock:
            self.events.append((time.monotonic(), message_id or "?"))

    @property
    def ids(self) -> set[str]:
        with self.lock:
            return {message_id for _, message_id in self.events}

    def outage(self, stopped: float) -> float:
        """The longest silence between two events from the last one before the stop on: the
        clients publish and consume without pause, so this bounds the time they were without
        a working connection."""
        with self.lock:
            times = sorted(t for t, _ in self.events)
        before = [t for t in times if t <= stopped]
        after = [t for t in times if t > stopped]
        assert after, "no event after the stop"
        marks = [before[-1] if before else stopped, *after]
        return max(b - a for a, b in itertools.pairwise(marks))


def urls(nodes: list[BrokerContainer], vhost: str = "/") -> str:
    return ",".join(node.broker.amqp_url(vhost) for node in nodes)


def management_urls(nodes: list[Broker]) -> str:
    return ",".join(f"http://{b.username}:{b.password}@{b.host}:{b.management_port}" for b in nodes)


@pytest.fixture(scope="module")
def declared(cluster: list[BrokerContainer]) -> list[BrokerContainer]:
    """The cluster with the clients' quorum queue, a member on each node."""
    restore(cluster)
    connection = pika.BlockingConnection(pika.URLParameters(cluster[0].broker.amqp_url()))
    connection.channel().queue_declare(
        QUEUE,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 3},
    )
    connection.close()
    return cluster


@pytest.fixture
def ready(declared: list[BrokerContainer]) -> Iterator[list[BrokerContainer]]:
    """The whole cluster, before the test and again after it (each test takes a node away)."""
    restore(declared, queue=QUEUE)
    yield declared
    restore(declared, queue=QUEUE)


def node_of(broker: Broker, connection_name: str) -> str:
    found: list[str] = []

    def named() -> bool:
        found[:] = [
            c["node"]
            for c in api(broker, "/connections")
            if c.get("client_properties", {}).get("connection_name") == connection_name
        ]
        return bool(found)

    wait(named, timeout=30, what=f"connection {connection_name!r} in the management API")
    return found[0]


def fail_over(
    ready: list[BrokerContainer],
    how: str,
    capsys: pytest.CaptureFixture[str],
    heartbeat: int = 5,
) -> None:
    """Publish with confirms and consume (both shells of each) through the cluster's URLs,
    in order, so every client is on the first node; ``how`` (stop or kill) takes that node
    away; then check that every confirmed message was consumed and print the figures."""
    cluster_urls = urls(ready)
    common = {"node_order": "in-order", "heartbeat": heartbeat}
    confirmed_sync, confirmed_async = Log(), Log()
    received_sync, received_async = Log(), Log()
    stop_publishing = threading.Event()

    sync_app, async_app = App(), App()

    @sync_app.handler(QUEUE)
    def take(message: IncomingMessage) -> None:
        received_sync.add(message.message_id)

    @async_app.handler(QUEUE)
    async def take_async(message: IncomingMessage) -> None:
        received_async.add(message.message_id)

    worker = Worker(sync_app, cluster_urls, connection_name="failover-worker", **common)
    async_worker = AsyncWorker(
        async_app, cluster_urls, connection_name="failover-async-worker", **common
    )
    publisher = Publisher(cluster_urls, connection_name="failover-publisher", **common)
    async_publisher = AsyncPublisher(
        cluster_urls, connection_name="failover-async-publisher", **common
    )

    def publish() -> None:
        i = 0
        while not stop_publishing.is_set():
            message_id = f"{how}-sync-{i}"
            try:
                publisher.publish(b"order", routing_key=QUEUE, message_id=message_id)
                confirmed_sync.add(message_id)
            except PublishError as exc:  # not confirmed: not counted as sent
                confirmed_sync.failures.append(f"{message_id}: {exc}")
            i += 1
        publisher.close()

    loop_ready = threading.Event()
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def run_async() -> None:
        loop_box.append(asyncio.get_running_loop())
        loop_ready.set()
        consuming = asyncio.create_task(async_worker.run())
        await async_publisher.connect()
        i = 0
        while not stop_publishing.is_set():
            message_id = f"{how}-async-{i}"
            try:
                await async_publisher.publish(b"order", routing_key=QUEUE, message_id=message_id)
                confirmed_async.add(message_id)
            except PublishError as exc:
                confirmed_async.failures.append(f"{message_id}: {exc}")
            i += 1
        await async_publisher.close()
        await consuming

    threads = [
        threading.Thread(target=worker.run, daemon=True),
        threading.Thread(target=publish, daemon=True),
        threading.Thread(target=lambda: asyncio.run(run_async()), daemon=True),
    ]
    for thread in threads:
        thread.start()
    first = ready[0].broker
    names = (
        "failover-worker",
        "failover-async-worker",
        "failover-publisher",
        "failover-async-publisher",
    )
    assert {node_of(first, name) for name in names} == {f"rabbit@{ready[0].hostname}"}
    logs = (confirmed_sync, confirmed_async, received_sync, received_async)
    started = time.monotonic()
    wait(
        lambda: all(log.since(started) >= EVENTS for log in logs),
        timeout=60,
        what=f"{EVENTS} messages confirmed and received by each client",
    )

    stopped = time.monotonic()
    ready[0].kill() if how == "kill" else ready[0].stop()
    stop_took = time.monotonic() - stopped
    # a client still silent past the bound fails below, with the figures printed
    with contextlib.suppress(AssertionError):
        wait(lambda: all(log.since(stopped) >= EVENTS for log in logs), timeout=BACK_WITHIN)
    stop_publishing.set()
    threads[1].join(60)
    loop_ready.wait(10)

    confirmed = confirmed_sync.ids | confirmed_async.ids
    received = lambda: received_sync.ids | received_async.ids  # noqa: E731
    wait(lambda: confirmed <= received(), timeout=60, what="every confirmed message consumed")
    worker.stop()
    loop_box[0].call_soon_threadsafe(async_worker.stop)
    for thread in (threads[0], threads[2]):
        thread.join(60)

    lost = confirmed - received()
    figures = {
        "sync publisher": confirmed_sync,
        "async publisher": confirmed_async,
        "sync worker": received_sync,
        "async worker": received_async,
    }
    with capsys.disabled():
        print(
            f"\nfailover ({how}): the {how} took {stop_took:.1f} s; {len(confirmed)} confirmed,"
            f" {len(lost)} lost, {len(received())} distinct received;"
            f" {publisher.stats.republished + async_publisher.stats.republished} republished"
        )
        for name, log in figures.items():
            print(f"failover ({how}): {name} back within {log.outage(stopped):.2f} s")
    assert not lost, f"confirmed but never consumed: {sorted(lost)[:10]}"
    assert not confirmed_sync.failures and not confirmed_async.failures
    assert publisher.stats.reconnects >= 1 and async_publisher.stats.reconnects >= 1
    assert worker.core.metrics.reconnects >= 1 and async_worker.core.metrics.reconnects >= 1
    for name, log in figures.items():
        assert log.outage(stopped) < BACK_WITHIN, f"{name} not back within {BACK_WITHIN} s"


def test_stopping_the_clients_node_loses_no_confirmed_message(
    ready: list[BrokerContainer], capsys: pytest.CaptureFixture[str]
) -> None:
    fail_over(ready, "stop", capsys)


def test_cli_management_calls_skip_a_stopped_node(
    ready: list[BrokerContainer], tmp_path: Path
) -> None:
    brokers = [node.broker for node in ready]
    # the first node's management and AMQP URLs come first, and nothing answers there
    ready[0].stop()
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        textwrap.dedent(
            """
            version: 1
            name: failover
            vhosts:
              - name: after-failover
                queues:
                  - {name: kept, type: quorum}
            """
        ).lstrip()
    )
    argv = ["--url", urls(ready), "--management-url", management_urls(brokers)]
    started = time.monotonic()
    applied = CliRunner().invoke(
        cli, ["apply", str(spec), "--auto-approve", *argv], catch_exceptions=False
    )
    took = time.monotonic() - started
    assert applied.exit_code == 0, applied.output
    assert "guest:guest" not in applied.output
    print(f"\nfailover: apply through a dead first management URL took {took:.1f} s")
    queue = api(brokers[1], "/queues/after-failover/kept")
    assert queue["type"] == "quorum"
    planned = CliRunner().invoke(cli, ["plan", str(spec), *argv], catch_exceptions=False)
    assert planned.exit_code == 0, planned.output
    assert "No changes" in planned.output or "no changes" in planned.output, planned.output


def test_killing_the_clients_node_loses_no_confirmed_message(
    ready: list[BrokerContainer], capsys: pytest.CaptureFixture[str]
) -> None:
    # a killed node says goodbye to no one: where its host does not reset the connections
    # either, missed heartbeats are how a client learns that it is gone
    fail_over(ready, "kill", capsys, heartbeat=2)
