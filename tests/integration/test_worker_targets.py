"""Handlers on every queue the spec declares, on a real broker: shard queues (consistent-hash
and modulus-hash), a federated queue, stream queues read from an offset, several vhosts."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pika
import pytest

from rabbitry.amqp.settings import Backoff
from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.testing import TestVhost, create_test_vhost, delete_vhost
from rabbitry.testing import broker as testing
from rabbitry.topology import load_spec
from rabbitry.topology.patterns.sharding import is_plugin_shard_queue
from tests.integration.conftest import Broker, one_vhost_spec, worker_process
from tests.integration.test_sharding import wait_for_node_stats
from tests.integration.test_worker import depth, drain, make_app, run_worker
from tests.integration.test_worker_features import run_either
from tests.waiting import wait_for

pytestmark = pytest.mark.broker


def publish(url: str, exchange: str, messages: list[tuple[str, str]]) -> None:
    """(routing key, message id) each, confirmed; the body is the id."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    for key, message_id in messages:
        props = pika.BasicProperties(message_id=message_id, delivery_mode=2)
        channel.basic_publish(exchange, key, message_id.encode(), props, mandatory=True)
    connection.close()


SHARDS = one_vhost_spec(
    """
        sharded_exchanges:
          - name: orders
            shards: 3
            queue: {type: quorum, retry: {attempts: 2, backoff: [1s]}}
"""
)


def test_one_handler_takes_every_shard_and_each_shard_retries_and_parks_as_declared(
    broker: Broker,
) -> None:
    broker.apply(SHARDS)
    app = make_app(broker)
    seen: list[tuple[str, str, int]] = []

    @app.handler(shards="orders")
    def handle(message: IncomingMessage) -> None:
        seen.append((message.queue, message.message_id or "", message.attempt))
        if message.message_id == "m7" or (message.message_id == "m8" and message.attempt == 1):
            raise RuntimeError("failing on purpose")

    assert app.queues == ["orders.0", "orders.1", "orders.2"]
    publish(broker.vhost_amqp_url, "orders", [(f"key-{i}", f"m{i}") for i in range(60)])
    worker = AsyncWorker(app, broker.vhost_amqp_url)
    shards = app.queues

    def parked() -> int:
        return sum(worker.metrics[q].parked for q in shards)

    run_worker(worker, lambda: parked() == 1 and len({s[1] for s in seen}) == 60, timeout=30)
    done = {mid for _, mid, _ in seen} - {"m7"}
    assert done == {f"m{i}" for i in range(60)} - {"m7"}
    by_shard = Counter(queue for queue, _, attempt in seen if attempt == 1)
    assert set(by_shard) == set(shards), f"every shard has a consumer: {by_shard}"
    m8 = [(queue, attempt) for queue, mid, attempt in seen if mid == "m8"]
    assert len(m8) == 2 and m8[0][0] == m8[1][0], "a retry comes back to its own shard"
    assert worker.metrics[m8[0][0]].retried == {"1s": 1 + (m8[0][0] == _shard_of(seen, "m7"))}
    home = _shard_of(seen, "m7")
    assert [props.message_id for props, _ in drain(broker, f"{home}.parking")] == ["m7"]
    for queue in shards:
        assert depth(broker, queue) == 0
        if queue != home:
            assert depth(broker, f"{queue}.parking") == 0


def _shard_of(seen: list[tuple[str, str, int]], message_id: str) -> str:
    return next(queue for queue, mid, _ in seen if mid == message_id)


MODULUS = one_vhost_spec(
    """
        modulus_sharding:
          - {name: images, shards_per_node: 2}
"""
)


def test_a_handler_on_a_modulus_sharded_exchange_drains_every_plugin_shard(
    broker: Broker,
) -> None:
    wait_for_node_stats(broker)
    broker.apply(MODULUS)

    def plugin_queues() -> list[str]:
        return sorted(q for q in broker.queue_names() if is_plugin_shard_queue(q))

    assert wait_for(lambda: len(plugin_queues()) == 2, step=0.3), broker.queue_names()
    shards = plugin_queues()
    publish(broker.vhost_amqp_url, "images", [(f"image-{i}", f"i{i}") for i in range(100)])
    assert sum(depth(broker, q) for q in shards) == 100
    assert min(depth(broker, q) for q in shards) > 0, "both shards hold messages"
    app = make_app(broker)
    got: list[str] = []

    @app.handler(shards="images")
    def handle(message: IncomingMessage) -> None:
        got.append(message.message_id or "")

    worker = AsyncWorker(app, broker.vhost_amqp_url)
    run_worker(worker, lambda: len(got) >= 100, timeout=30)
    assert sorted(got) == sorted(f"i{i}" for i in range(100))
    assert [depth(broker, q) for q in shards] == [0, 0]


def test_a_stream_handler_that_reconnects_goes_on_where_it_left_off(broker: Broker) -> None:
    broker.apply(STREAM)
    publish(broker.vhost_amqp_url, "", [("events", f"e{i}") for i in range(10)])
    app = make_app(broker)
    offsets: list[int] = []

    @app.handler("events", offset="first")
    def handle(message: IncomingMessage) -> None:
        offsets.append(message.headers["x-stream-offset"])

    name = f"stream-{broker.vhost}"
    worker = AsyncWorker(
        app, broker.vhost_amqp_url, connection_name=name, backoff=Backoff(initial=0.05)
    )
    closed: list[int] = []

    def progress() -> bool:
        # all ten handled and acked: the worker has noted where it left off
        if len(offsets) == 10 and worker.metrics["events"].acked == 10 and not closed:
            for connection in broker.get("/connections") or []:
                if (connection.get("client_properties") or {}).get("connection_name") == name:
                    response = broker.http.delete(
                        f"/connections/{quote(connection['name'], safe='')}"
                    )
                    closed.append(response.status_code)
        if closed and worker.metrics.reconnects >= 1 and len(offsets) == 10:
            publish(broker.vhost_amqp_url, "", [("events", "e10"), ("events", "e11")])
            offsets.append(-1)
        return len(offsets) >= 13

    run_worker(worker, progress, timeout=40)
    assert closed and worker.metrics.reconnects >= 1
    assert offsets == [*range(10), -1, 10, 11], "not read again from the first offset"


def two_vhosts(keys: str, other: str, other_keys: str) -> str:
    """A spec of the test's vhost with ``keys`` and the vhost ``other`` with ``other_keys``
    (each one line of YAML)."""
    return f"""
        version: 1
        name: "{{{{ vars.stack }}}}"
        vhosts:
          - name: "{{{{ vars.vhost }}}}"
            {keys}
          - name: "{other}"
            {other_keys}
        """


@pytest.fixture
def second_vhost(rabbitmq_broker: testing.Broker) -> Iterator[TestVhost]:
    vhost = create_test_vhost(rabbitmq_broker)
    try:
        yield vhost
    finally:
        delete_vhost(rabbitmq_broker, vhost.name)


def test_a_handler_on_a_federated_queue_gets_what_is_published_upstream(
    broker: Broker, second_vhost: TestVhost
) -> None:
    # The upstream is another vhost of the same broker: the federation link connects to it
    # from inside the broker's own node.
    upstream = second_vhost
    user = quote(upstream.username, safe="")
    broker.apply(
        f"""
        version: 1
        name: "{{{{ vars.stack }}}}"
        vhosts:
          - name: "{upstream.name}"
            queues: [{{name: jobs, type: quorum}}]
          - name: "{{{{ vars.vhost }}}}"
            queues: [{{name: jobs, type: quorum}}]
            federation:
              upstreams:
                - name: up
                  uri: "amqp://{user}@localhost:5672/{quote(upstream.name, safe="")}"
                  password: "{upstream.password}"
                  reconnect_delay: 1s
              queues:
                - {{pattern: "^jobs$", upstream: up}}
        """
    )
    publish(upstream.amqp_url, "", [("jobs", f"j{i}") for i in range(20)])
    spec = load_spec(broker.tmp / "spec.yaml", {"vhost": broker.vhost, "stack": broker.stack})
    app = App(spec, vhost=broker.vhost)
    got: list[str] = []

    @app.handler("jobs")
    def handle(message: IncomingMessage) -> None:
        got.append(message.message_id or "")

    worker = AsyncWorker(app, broker.vhost_amqp_url)
    run_worker(worker, lambda: len(got) >= 20, timeout=60)
    assert sorted(got) == sorted(f"j{i}" for i in range(20)), "moved from upstream on demand"
    connection = pika.BlockingConnection(pika.URLParameters(upstream.amqp_url))
    left = connection.channel().queue_declare("jobs", passive=True).method.message_count
    connection.close()
    assert left == 0


STREAM = one_vhost_spec(
    """
        queues:
          - {name: events, type: stream}
"""
)


def read_stream(
    broker: Broker, offset: Any, last: str, fail_on: str = "", after_start: int = 0
) -> tuple[list[tuple[int, str]], AsyncWorker]:
    """(offset, body) of what a handler at ``offset`` gets until it has handled and acked
    ``last``, the stream's last message: a stream is read in order, so nothing more can come;
    ``after_start`` more messages are published once a probe shows the worker consumes."""
    app = make_app(broker)
    got: list[tuple[int, str]] = []

    @app.handler("events", offset=offset)
    def handle(message: IncomingMessage) -> None:
        got.append((message.headers["x-stream-offset"], message.body.decode()))
        if message.body.decode() == fail_on:
            raise ValueError("a poison message")

    worker = AsyncWorker(app, broker.vhost_amqp_url)

    def read(body: str) -> bool:
        return bool(got) and got[-1][1] == body and worker.metrics["events"].acked == len(got)

    async def main() -> None:
        ready = asyncio.Event()
        task = asyncio.create_task(worker.run(ready=ready))
        await asyncio.wait_for(ready.wait(), 10)
        deadline = time.monotonic() + 15
        while after_start and not got and time.monotonic() < deadline:
            # a stream queue counts no consumers: a probe that arrives shows it attached
            await asyncio.to_thread(publish, broker.vhost_amqp_url, "", [("events", "probe")])
            for _ in range(10):
                if not got:
                    await asyncio.sleep(0.05)
        if after_start:
            late = [("events", f"late{i}") for i in range(after_start)]
            await asyncio.to_thread(publish, broker.vhost_amqp_url, "", late)
        deadline = time.monotonic() + 15
        while not read(last) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.stop()
        await task

    asyncio.run(main())
    return got, worker


def test_a_stream_handler_reads_from_its_offset_and_skips_a_failure(broker: Broker) -> None:
    broker.apply(STREAM)
    publish(broker.vhost_amqp_url, "", [("events", f"e{i}") for i in range(5)])

    got, worker = read_stream(broker, "first", "e4", fail_on="e2")
    assert got == [(i, f"e{i}") for i in range(5)], "the failure did not stop the stream"
    counters = worker.metrics["events"]
    assert counters.failed == 1 and counters.skipped == 1 and counters.rejected == 0
    assert counters.acked == 5, "acks return credit: the stream keeps every message"

    got, _ = read_stream(broker, 3, "e4")
    assert got == [(3, "e3"), (4, "e4")]

    got, _ = read_stream(broker, "next", "late1", after_start=2)
    *probes, late0, late1 = got
    assert probes and {body for _, body in probes} == {"probe"}, "nothing from before the start"
    last = probes[-1][0]
    assert (late0, late1) == ((last + 1, "late0"), (last + 2, "late1"))

    # wall-clock time, not synchronisation: a chunk's timestamp has second granularity, so the
    # earlier chunks must be a second older than ``since`` and the next one a second newer
    time.sleep(1.2)
    since = dt.datetime.now(dt.UTC)
    time.sleep(1.2)  # the next chunk's timestamp is after ``since``
    publish(broker.vhost_amqp_url, "", [("events", "after")])
    got, _ = read_stream(broker, since, "after")
    assert got == [(last + 3, "after")]


@pytest.mark.parametrize("kind", [AsyncWorker, Worker])
def test_one_app_consumes_queues_of_two_vhosts_over_a_connection_each(
    broker: Broker, second_vhost: TestVhost, kind: type[AsyncWorker] | type[Worker]
) -> None:
    other = second_vhost.name
    broker.apply(
        two_vhosts(
            "queues: [{name: work, type: quorum, retry: {attempts: 2, backoff: [1s]}}]",
            other,
            "queues: [{name: work, type: quorum}, {name: invoices, type: quorum}]",
        )
    )
    spec = load_spec(broker.tmp / "spec.yaml", {"vhost": broker.vhost, "stack": broker.stack})
    app = App(spec)
    calls: list[tuple[str, str, int]] = []

    @app.handler("work", vhost=broker.vhost)
    def here(message: IncomingMessage) -> None:
        calls.append(("here", message.body.decode(), message.attempt))
        if message.attempt == 1 and message.body == b"h0":
            raise RuntimeError("retried in this vhost's own tier")

    @app.handler("work", vhost=other)
    def there(message: IncomingMessage) -> None:
        calls.append(("there", message.body.decode(), message.attempt))

    @app.handler("invoices")
    def invoices(message: IncomingMessage) -> None:
        calls.append(("invoices", message.body.decode(), message.attempt))

    publish(broker.vhost_amqp_url, "", [("work", "h0"), ("work", "h1")])
    publish(second_vhost.amqp_url, "", [("work", "t0"), ("invoices", "i0")])
    # an app of two vhosts takes a URL naming none: each connection names its own vhost
    parts = urlsplit(broker.vhost_amqp_url)
    worker = kind(app, urlunsplit(parts._replace(path="")))
    assert len(worker.workers) == 2
    run_either(worker, lambda: len(calls) >= 5, timeout=20)
    assert sorted(calls) == [
        ("here", "h0", 1),
        ("here", "h0", 2),
        ("here", "h1", 1),
        ("invoices", "i0", 1),
        ("there", "t0", 1),
    ]
    metrics = worker.metrics
    assert metrics[f"{broker.vhost}/work"].retried == {"1s": 1}
    assert metrics[f"{other}/work"].acked == 1 and metrics[f"{other}/invoices"].acked == 1


CLI_APP = """
    import os

    from rabbitry.consumer import App

    app = App(os.environ["T_SPEC"], variables={"vhost": os.environ["T_VHOST"], "stack": "s"})
    record = open(os.environ["T_OUT"], "a")


    @app.handler(shards="orders")
    def shard(message):
        record.write(f"{message.queue} {message.body.decode()}\\n")
        record.flush()


    @app.handler("invoices")
    def invoice(message):
        record.write(f"invoices {message.body.decode()}\\n")
        record.flush()
"""


@pytest.mark.parametrize("blocking", [False, True])
def test_worker_run_serves_shards_and_a_second_vhost_from_one_process(
    broker: Broker, second_vhost: TestVhost, blocking: bool
) -> None:
    broker.apply(
        two_vhosts(
            "sharded_exchanges: [{name: orders, shards: 2, queue: {type: quorum}}]",
            second_vhost.name,
            "queues: [{name: invoices, type: quorum}]",
        )
    )
    publish(broker.vhost_amqp_url, "orders", [(f"key-{i}", f"o{i}") for i in range(20)])
    publish(second_vhost.amqp_url, "", [("invoices", "i0")])
    record = broker.tmp / "record.txt"
    flags = ["--sync"] if blocking else []
    process = worker_process(broker, "cli_app", CLI_APP, {"T_OUT": str(record)}, *flags)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if record.exists() and len(record.read_text().splitlines()) >= 21:
                break
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 0, output
    lines = record.read_text().splitlines()
    assert "invoices i0" in lines
    shards = {line.split()[0] for line in lines if line.startswith("orders.")}
    assert shards == {"orders.0", "orders.1"}, lines
    assert sorted(line.split()[1] for line in lines if line.startswith("orders.")) == sorted(
        f"o{i}" for i in range(20)
    )
