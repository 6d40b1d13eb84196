"""Publisher and AsyncPublisher against an in-process fake broker: windows, outcomes, reconnects."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator

import pytest

from rabbitry.errors import Nacked, Unroutable
from rabbitry.policies.delay import BinaryDelays
from rabbitry.publisher import AsyncPublisher, Backoff, Message, Publisher, Status

from .fake_broker import FakeBroker


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    b = FakeBroker()
    yield b
    b.close()


def test_publish_many_never_exceeds_the_window(broker: FakeBroker) -> None:
    broker.ack_every = 1000  # acks come only when the publisher stops writing
    with Publisher(broker.url, window=50) as pub:
        out = pub.publish_many([b"x"] * 1000, routing_key="q")
    assert len(out) == 1000 and all(d.ok for d in out)
    assert broker.peak_unacked <= 50


def test_stream_reads_lazily(broker: FakeBroker) -> None:
    read = 0

    def source() -> Iterator[bytes]:
        nonlocal read
        for _ in range(10_000):
            read += 1
            yield b"x"

    with Publisher(broker.url, window=64) as pub:
        stream = pub.stream(source(), routing_key="q")
        first = next(stream)
        assert first.ok and read <= 2 * 64 + 1  # one window in flight, one settled
        assert sum(1 for _ in stream) == 9_999


def test_outcomes_are_per_message(broker: FakeBroker) -> None:
    broker.decide = lambda i, e, k: {3: "nack", 5: "return"}.get(i, "ack")
    with Publisher(broker.url) as pub:
        out = pub.publish_many([Message(b"x", mandatory=True) for _ in range(8)], routing_key="q")
    assert [d.status for d in out] == [Status.CONFIRMED] * 2 + [
        Status.NACKED,
        Status.CONFIRMED,
        Status.RETURNED,
    ] + [Status.CONFIRMED] * 3
    assert isinstance(out[2].error, Nacked) and isinstance(out[4].error, Unroutable)


def test_publish_raises_the_mapped_error(broker: FakeBroker) -> None:
    broker.decide = lambda i, e, k: "return" if k == "nowhere" else "ack"
    with Publisher(broker.url) as pub:
        assert pub.publish(b"x", routing_key="q").ok
        with pytest.raises(Unroutable, match="nowhere"):
            pub.publish(b"x", routing_key="nowhere", mandatory=True)


def test_connection_loss_republishes_the_unconfirmed(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.ack_every = 10_000
    broker.drop_after = 300
    seen: list[int] = []
    caplog.set_level(logging.INFO)
    with Publisher(
        broker.url,
        window=100,
        backoff=Backoff(initial=0.01),
        on_republish=lambda ds: seen.append(len(ds)),
    ) as pub:
        out = pub.publish_many([b"x"] * 1000, routing_key="q")
        assert all(d.ok for d in out)
        assert pub.stats.reconnects == 1 and pub.stats.republished == sum(seen) > 0
    assert broker.connections == 2
    assert "secret-pw" not in caplog.text


DELAYS = BinaryDelays("delay", unit_ms=1000, levels=4)


def jobs(count: int, delayed: bool) -> list[Message]:
    return [Message(b"x", routing_key="jobs", delay=1 if delayed else None) for _ in range(count)]


def peaks(broker: FakeBroker) -> tuple[int, int]:
    """The most unconfirmed messages seen with a delayed publish, and with a plain one."""
    delayed = [n for exchange, n in broker.in_flight if exchange == DELAYS.layout_exchange]
    plain = [n for exchange, n in broker.in_flight if exchange != DELAYS.layout_exchange]
    return max(delayed, default=0), max(plain, default=0)


def test_a_delayed_message_is_sent_with_at_most_32_unconfirmed_when_the_window_adapts(
    broker: FakeBroker,
) -> None:
    broker.ack_every = 1000  # acks come only when the publisher stops writing
    with Publisher(broker.url, delays=DELAYS) as pub:
        # plain, delayed, plain again: the limit holds from the first delayed message on
        out = pub.publish_many([*jobs(300, False), *jobs(300, True), *jobs(300, False)])
    assert all(d.ok for d in out)
    delayed, plain = peaks(broker)
    assert delayed == 32 and plain > 32


def test_a_fixed_window_holds_for_delayed_messages_too(broker: FakeBroker) -> None:
    broker.ack_every = 1000
    with Publisher(broker.url, delays=DELAYS, window=100) as pub:
        assert all(d.ok for d in pub.publish_many(jobs(500, True)))
    assert peaks(broker) == (100, 0)


def test_the_async_publisher_limits_delayed_messages_alike(broker: FakeBroker) -> None:
    broker.ack_every = 1000

    async def main() -> None:
        async with AsyncPublisher(broker.url, delays=DELAYS) as pub:
            out = await pub.publish_many([*jobs(300, False), *jobs(300, True)])
            assert all(d.ok for d in out)
            sent = [await pub.send(b"x", routing_key="jobs", delay=1) for _ in range(100)]
            assert all([(await d).ok for d in sent])

    asyncio.run(main())
    delayed, plain = peaks(broker)
    assert delayed == 32 and plain > 32


def test_async_publisher_window_outcomes_and_reconnect(broker: FakeBroker) -> None:
    broker.decide = lambda i, e, k: "nack" if i == 7 else "ack"

    async def main() -> None:
        async with AsyncPublisher(broker.url, window=32, backoff=Backoff(initial=0.01)) as pub:
            out = await pub.publish_many([b"x"] * 500, routing_key="q")
            assert [d.status for d in out].count(Status.NACKED) == 1 and out[
                6
            ].status is Status.NACKED
            assert broker.peak_unacked <= 32
            d = await pub.send(b"y", routing_key="q")
            assert (await d).ok
            with pytest.raises(Nacked):
                broker.decide = lambda i, e, k: "nack"
                await pub.publish(b"z", routing_key="q")
            broker.decide = lambda i, e, k: "ack"
            broker.drop_after = broker.published + 50
            broker.ack_every = 10_000
            out = await pub.publish_many([b"x"] * 400, routing_key="q")
            assert all(d.ok for d in out) and pub.stats.reconnects == 1

    asyncio.run(main())


def test_a_lost_node_hands_the_unconfirmed_messages_to_the_next_node() -> None:
    first, second = FakeBroker(ack_every=10_000), FakeBroker()
    first.drop_after = 300
    try:
        with Publisher(f"{first.url},{second.url}", node_order="in-order", window=100) as pub:
            out = pub.publish_many([b"x"] * 1000, routing_key="q")
            assert all(d.ok for d in out)
            assert pub.stats.reconnects == 1 and pub.stats.republished > 0
            assert pub.walk.current.port == second.port
        assert (first.connections, second.connections) == (1, 1)
    finally:
        first.close()
        second.close()


def test_a_node_that_refuses_is_skipped_without_a_pause() -> None:
    alive = FakeBroker()
    with socket.socket() as sock:  # a port nothing listens on: connections are refused
        sock.bind(("127.0.0.1", 0))
        dead = f"amqp://u:secret-pw@127.0.0.1:{sock.getsockname()[1]}/%2F"

    async def main() -> None:
        async with AsyncPublisher(
            f"{dead},{alive.url}", node_order="in-order", backoff=Backoff(initial=5.0)
        ) as pub:
            assert (await pub.publish(b"x", routing_key="q")).ok
            assert pub.walk.current.port == alive.port

    try:
        asyncio.run(asyncio.wait_for(main(), 4.0))  # a back-off pause would take 5 s
    finally:
        alive.close()
