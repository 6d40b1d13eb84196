"""Publisher and AsyncPublisher against a real broker: what the publisher issue must show."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pika
import pytest

from rabbitry.errors import BrokerError, Nacked, PublishError, Unroutable
from rabbitry.policies.delay import BinaryDelays, DelayError
from rabbitry.publisher import (
    AsyncPublisher,
    Backoff,
    ConnectionLost,
    ExchangeNotFound,
    Publisher,
    Status,
)
from rabbitry.topology import load_spec, load_topology
from rabbitry.topology.patterns.delays import delay_scheme
from tests.integration.conftest import Broker, drain_ids, one_vhost_spec

pytestmark = pytest.mark.broker


@pytest.fixture
def channel(rabbitmq_vhost: Any) -> Iterator[Any]:
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_vhost.amqp_url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def test_confirmed_messages_all_arrive(rabbitmq_vhost: Any, channel: Any) -> None:
    channel.queue_declare("work", durable=True)
    channel.queue_declare("work.q", durable=True, arguments={"x-queue-type": "quorum"})
    with Publisher(rabbitmq_vhost.amqp_url, window=64) as pub:
        first = pub.publish(b"one", routing_key="work", headers={"k": "v"})
        assert first.ok and first.message_id
        out = pub.publish_many((f"m{i}".encode() for i in range(3000)), routing_key="work")
        more = pub.publish_many([b"q"] * 1000, routing_key="work.q")
    assert all(d.ok for d in out + more)
    ids = drain_ids(channel, "work")
    assert len(ids) == 3001 and set(ids) == {first.message_id, *(d.message_id for d in out)}
    # confirmed means enqueued: the queue's AMQP count is exact at once, nothing to wait for
    assert channel.queue_declare("work.q", passive=True).method.message_count == 1000


def test_async_confirmed_messages_all_arrive(rabbitmq_vhost: Any, channel: Any) -> None:
    channel.queue_declare("work", durable=True)

    async def main() -> list[Any]:
        async with AsyncPublisher(rabbitmq_vhost.amqp_url, window=128) as pub:
            single = await pub.publish(b"one", routing_key="work")
            pending = [await pub.send(b"sent", routing_key="work") for _ in range(500)]
            many = await pub.publish_many([b"x"] * 2000, routing_key="work")
            return [single, *[await d for d in pending], *many]

    out = asyncio.run(main())
    assert len(out) == 2501 and all(d.ok for d in out)
    assert set(drain_ids(channel, "work")) == {d.message_id for d in out}


def test_missing_exchange_raises_and_the_publisher_carries_on(
    rabbitmq_vhost: Any, channel: Any
) -> None:
    channel.queue_declare("work", durable=True)
    with Publisher(rabbitmq_vhost.amqp_url) as pub:
        with pytest.raises(ExchangeNotFound, match="no exchange 'ghost'"):
            pub.publish(b"x", exchange="ghost", routing_key="k")
        assert pub.publish(b"after", routing_key="work").ok
        mixed = pub.publish_many([b"a", b"b"], routing_key="work") + pub.publish_many(
            [b"c"], exchange="ghost"
        )
    assert [d.ok for d in mixed] == [True, True, False]
    assert isinstance(mixed[2].error, ExchangeNotFound)
    assert len(drain_ids(channel, "work")) == 3


def test_unroutable_mandatory_message_raises(rabbitmq_vhost: Any, channel: Any) -> None:
    channel.exchange_declare("events", "topic", durable=True)
    channel.queue_declare("orders", durable=True)
    channel.queue_bind("orders", "events", "order.#")
    with Publisher(rabbitmq_vhost.amqp_url, exchange="events") as pub:
        assert pub.publish(b"x", routing_key="order.created", mandatory=True).ok
        with pytest.raises(Unroutable, match=r"user\.created.*312 NO_ROUTE"):
            pub.publish(b"x", routing_key="user.created", mandatory=True)
        # mandatory off, on purpose: dropped by the broker, confirmed
        assert pub.publish(b"x", routing_key="user.created", mandatory=False).ok

    async def main() -> None:
        async with AsyncPublisher(rabbitmq_vhost.amqp_url, exchange="events") as pub:
            with pytest.raises(Unroutable):
                await pub.publish(b"x", routing_key="user.created", mandatory=True)

    asyncio.run(main())


@pytest.mark.versions
def test_reject_publish_at_max_length_nacks_exactly_the_overflow(
    rabbitmq_vhost: Any, channel: Any
) -> None:
    for name, qtype in (("capped", "classic"), ("capped.q", "quorum")):
        channel.queue_declare(
            name,
            durable=True,
            arguments={"x-max-length": 10, "x-overflow": "reject-publish", "x-queue-type": qtype},
        )
    with Publisher(rabbitmq_vhost.amqp_url) as pub:
        out = pub.publish_many([b"x"] * 15, routing_key="capped")
        assert [d.status for d in out] == [Status.CONFIRMED] * 10 + [Status.NACKED] * 5
        assert all(isinstance(d.error, Nacked) for d in out[10:])
        with pytest.raises(Nacked):
            pub.publish(b"x", routing_key="capped")
        # A quorum queue applies its length limit through its log and may let a message or
        # two past it: whichever it refuses must be exactly the ones reported nacked.
        confirmed, nacked = [], []
        for i in range(15):
            try:
                confirmed.append(pub.publish(b"x", routing_key="capped.q", message_id=f"q{i}"))
            except Nacked:
                nacked.append(f"q{i}")
    assert drain_ids(channel, "capped") == [d.message_id for d in out[:10]]
    assert len(confirmed) >= 10 and nacked == [f"q{i}" for i in range(len(confirmed), 15)]
    assert drain_ids(channel, "capped.q") == [d.message_id for d in confirmed]

    async def main() -> None:
        async with AsyncPublisher(rabbitmq_vhost.amqp_url) as pub:
            out = await pub.publish_many([b"x"] * 13, routing_key="capped")
            assert [d.status for d in out] == [Status.CONFIRMED] * 10 + [Status.NACKED] * 3

    asyncio.run(main())


def test_credentials_never_appear_in_logs_or_errors(
    rabbitmq_vhost: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "wrong-S3cret-pw"
    bad = rabbitmq_vhost.amqp_url.replace(
        f":{quote(rabbitmq_vhost.password, safe='')}@", f":{secret}@"
    )
    pub = Publisher(bad, backoff=Backoff(initial=0.05, give_up_after=1.0))
    with pytest.raises(BrokerError) as refused:
        pub.publish(b"x", routing_key="q")
    assert secret not in str(refused.value) and secret not in repr(pub)
    assert "ACCESS_REFUSED" in str(refused.value) or "403" in str(refused.value)

    closed_port = "amqp://someone:" + secret + "@127.0.0.1:1/%2F"
    pub = Publisher(closed_port, backoff=Backoff(initial=0.05, give_up_after=0.5))
    with pytest.raises(ConnectionLost) as lost:
        pub.publish(b"x", routing_key="q")

    async def main() -> None:
        apub = AsyncPublisher(closed_port, backoff=Backoff(initial=0.05, give_up_after=0.5))
        with pytest.raises(PublishError) as exc:
            await apub.publish(b"x", routing_key="q")
        assert secret not in str(exc.value)

    asyncio.run(main())
    assert secret not in str(lost.value)
    assert secret not in caplog.text
    assert secret not in "".join(str(r.args) for r in caplog.records)


def test_broker_restart_during_a_stream_loses_no_confirmed_message(
    rabbitmq_broker_factory: Any,
) -> None:
    container = rabbitmq_broker_factory()
    broker = container.broker
    url = broker.amqp_url("/")
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare("stream", durable=True)
    connection.close()

    total = 20_000
    republished: list[int] = []
    produced = 0

    def messages() -> Iterator[bytes]:
        nonlocal produced
        for i in range(total):
            produced = i
            yield f"{i}".encode()

    def restart_midway() -> None:
        while produced < total // 4:
            time.sleep(0.01)
        container.restart()

    restarter = threading.Thread(target=restart_midway)
    restarter.start()
    with Publisher(
        url,
        window=256,
        backoff=Backoff(initial=0.2, maximum=2.0, give_up_after=180.0),
        on_republish=lambda ds: republished.append(len(ds)),
    ) as pub:
        out = pub.publish_many(messages(), routing_key="stream")
        stats = pub.stats
    restarter.join()

    assert stats.reconnects >= 1, "the publisher never saw the broker go away"
    confirmed = {d.message_id for d in out if d.ok}
    assert len(out) == total and len(confirmed) == total  # it resumed by itself
    connection = pika.BlockingConnection(pika.URLParameters(container.broker.amqp_url("/")))
    ids = drain_ids(connection.channel(), "stream")
    connection.close()
    assert confirmed <= set(ids), "confirmed messages were lost"
    assert len(ids) - len(set(ids)) <= stats.republished  # duplicates only from republishing


DELAY_SPEC = one_vhost_spec("""
        queues:
          - {name: reminders}
          - {name: digests}
        delays:
          - name: later
            unit: 100ms
            count: 6
            targets: [{queue: reminders}]
          - name: daily
            levels: [1d]
            targets: [{queue: digests}]
""")


def wait_for_message(broker: Broker, queue: str, timeout: float) -> tuple[float, Any, bytes]:
    """When the first message appeared in ``queue`` (polled every 20 ms), its properties, body."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    try:
        channel = connection.channel()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is not None:
                return time.monotonic(), props, body
            time.sleep(0.02)
    finally:
        connection.close()
    raise AssertionError(f"nothing arrived in {queue!r} within {timeout} s")


def counts(broker: Broker, queues: Iterable[str]) -> dict[str, int]:
    """Exact message counts (passive declares), all through one connection: a snapshot."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    try:
        channel = connection.channel()
        return {q: int(channel.queue_declare(q, passive=True).method.message_count) for q in queues}
    finally:
        connection.close()


def assert_delayed(
    broker: Broker, scheme: BinaryDelays, sent: Any, published_at: float, delay: float
) -> None:
    """The message waited ``delay`` (0.9x at least, +3 s at most) in the spec's delay levels."""
    seen = counts(broker, ["reminders", *map(scheme.level_queue, range(scheme.levels))])
    assert seen.pop("reminders") == 0 and sum(seen.values()) == 1, "it waits in the levels"
    arrived, props, _ = wait_for_message(broker, "reminders", delay + 3.0)
    waited = arrived - published_at
    assert 0.9 * delay <= waited <= delay + 3.0, f"delivered after {waited:.2f} s, not {delay} s"
    assert props.message_id == sent.message_id
    # The route is the spec's encoding: it visited the levels of the delay's set bits.
    ticks = scheme.ticks(delay)
    wanted = {scheme.level_queue(k) for k in range(scheme.levels) if ticks >> k & 1}
    assert {death["queue"] for death in props.headers["x-death"]} == wanted


@pytest.mark.versions
def test_delay_waits_in_the_spec_delay_levels_and_a_delay_beyond_them_is_refused(
    broker: Broker,
) -> None:
    path = broker.spec(DELAY_SPEC)
    result = broker.run("apply", str(path), "--auto-approve")
    assert result.exit_code == 0, result.output
    variables = {"vhost": broker.vhost, "stack": broker.stack}
    spec = load_spec(path, variables)
    scheme = delay_scheme(spec.vhosts[0].delays[0])
    assert isinstance(scheme, BinaryDelays) and scheme.max_delay_ms == 6300
    too_long = scheme.max_delay_ms / 1000 + 0.1

    # No delays= given: the publisher takes the levels of the spec's delay that delivers to
    # "reminders" (not the one for "digests"), from the spec file or the loaded spec alike.
    with Publisher.from_spec(path, variables=variables, url=broker.vhost_amqp_url) as pub:
        with pytest.raises(DelayError, match=r"exceeds the 6 levels of 100 ms"):
            pub.publish(b"too late", routing_key="reminders", delay=too_long)
        assert pub.stats.in_flight == 0 and pub.stats.confirmed == 0
        published_at = time.monotonic()
        sent = pub.publish(b"in 2 s", routing_key="reminders", delay=2.0)
    assert sent.ok
    assert_delayed(broker, scheme, sent, published_at, 2.0)

    async def publish_async() -> tuple[Any, float]:
        async with AsyncPublisher.from_spec(spec, url=broker.vhost_amqp_url) as pub:
            with pytest.raises(DelayError, match="declare more levels"):
                await pub.publish(b"too late", routing_key="reminders", delay=too_long)
            assert pub.stats.in_flight == 0 and pub.stats.confirmed == 0
            started = time.monotonic()
            delivery = await pub.publish(
                b"in 1.5 s", routing_key="reminders", delay=timedelta(seconds=1.5)
            )
            return delivery, started

    sent, published_at = asyncio.run(publish_async())
    assert sent.ok
    assert_delayed(broker, scheme, sent, published_at, 1.5)
    # Nothing of the refused delays went anywhere: not the target, not the levels, not parking.
    queues = ["reminders", "later.parking", *map(scheme.level_queue, range(scheme.levels))]
    queues += ["digests", "daily.00", "daily.parking"]
    assert counts(broker, queues) == dict.fromkeys(queues, 0)

    # A delay the publisher cannot place is refused before sending, saying what to do.
    topology = load_topology(path, variables)
    with (
        Publisher.from_spec(topology, url=broker.vhost_amqp_url) as pub,
        pytest.raises(PublishError, match="make the publisher with from_spec"),
    ):
        pub.publish(b"x", routing_key="reminders", delay=1.0)
    with Publisher.from_spec(spec, url=broker.vhost_amqp_url) as pub:
        with pytest.raises(PublishError, match=r"no delay of vhost .* delivers to 'ghost'"):
            pub.publish(b"x", routing_key="ghost", delay=1.0)
        assert pub.stats.in_flight == 0 and pub.stats.confirmed == 0


def test_a_broker_alarm_blocks_both_publishers_without_piling_up_and_they_resume(
    rabbitmq_broker_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    container = rabbitmq_broker_factory()
    url = container.broker.amqp_url("/")
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare("flow", durable=True)
    connection.close()
    caplog.set_level(logging.WARNING, logger="rabbitry.publisher")
    window, total = 64, 500

    def alarm(on: bool) -> None:
        # A memory high watermark of 0 raises the memory alarm at once: the broker blocks
        # every publishing connection until the watermark is back.
        code, output = container.exec(
            "rabbitmqctl", "set_vm_memory_high_watermark", "0" if on else "0.4"
        )
        assert code == 0, output

    def wait_until(condition: Any, what: str, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < end, what
            time.sleep(0.05)

    # The blocking publisher, its calls in a thread: they must wait, not return or pile up.
    with Publisher(url, window=window) as pub:
        pub.publish(b"before", routing_key="flow")
        alarm(True)
        result: dict[str, Any] = {}
        try:
            worker = threading.Thread(
                target=lambda: result.update(
                    out=pub.publish_many((b"s%d" % i for i in range(total)), routing_key="flow")
                ),
                daemon=True,
            )
            worker.start()
            wait_until(lambda: pub.blocked, "the publisher never saw connection.blocked")
            worker.join(3)  # a span to watch, as below
            assert worker.is_alive(), "publish_many returned while the broker blocked publishing"
            assert pub.tracker.unsettled <= window
        finally:
            alarm(False)
        worker.join(30)
        assert not worker.is_alive(), "the publisher did not resume once unblocked"
        assert not pub.blocked
        assert len(result["out"]) == total and all(d.ok for d in result["out"])

    # The asyncio publisher: a send waits while blocked, the loop stays free.
    async def run_async() -> None:
        async with AsyncPublisher(url, window=window) as apub:
            await apub.publish(b"before", routing_key="flow")
            await asyncio.to_thread(alarm, True)
            try:
                many = asyncio.ensure_future(
                    apub.publish_many((b"a%d" % i for i in range(total)), routing_key="flow")
                )
                end = time.monotonic() + 20
                while not apub.blocked:
                    assert time.monotonic() < end, "AsyncPublisher never saw connection.blocked"
                    await asyncio.sleep(0.05)
                # a span to watch, not a wait: no event marks a send that keeps waiting
                await asyncio.sleep(2)
                assert not many.done(), "publish_many finished while the broker blocked it"
                assert apub.tracker.unsettled <= window
            finally:
                await asyncio.to_thread(alarm, False)
            out = await asyncio.wait_for(many, 30)
            assert len(out) == total and all(d.ok for d in out)
            assert not apub.blocked

    asyncio.run(run_async())
    assert "blocks publishing" in caplog.text and "accepts publishing again" in caplog.text
    connection = pika.BlockingConnection(pika.URLParameters(url))
    ids = drain_ids(connection.channel(), "flow")
    connection.close()
    assert len(ids) == 2 * (total + 1)
