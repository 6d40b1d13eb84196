"""The stream session without a broker: consumers at an offset, refusals kept, not retried."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from pamqp import commands

from rabbitry.amqp import frames
from rabbitry.amqp.message import CHANNEL
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer import streams
from rabbitry.consumer.streams import (
    FIRST_WAIT,
    OFFSET_HEADER,
    QUIET,
    SETTLE_LIMIT,
    SLOWEST_WAIT,
    StreamReader,
    StreamSession,
    Waits,
)
from rabbitry.errors import StreamUnreachable
from rabbitry.testing.host import free_port
from tests.unit.amqp.wire import frames_in


def ready_session() -> StreamSession:
    session = StreamSession(ConnectionSettings(), prefetch=100)
    session.state = State.READY
    session.out.clear()
    return session


def sent(session: StreamSession) -> list[object]:
    return frames_in(session.take_output())


def test_a_consumer_starts_at_the_offset_it_is_given() -> None:
    session = ready_session()
    assert session.consume("orders", 42) == 0
    assert session.consume("orders-1", "last") == 1
    first, second = sent(session)
    assert isinstance(first, commands.Basic.Consume)
    assert (first.queue, first.consumer_tag, first.arguments) == (
        "orders",
        "rabbitry.0",
        {OFFSET_HEADER: 42},
    )
    assert isinstance(second, commands.Basic.Consume)
    assert second.arguments == {OFFSET_HEADER: "last"}
    session.receive(frames.method_frame(CHANNEL, commands.Basic.ConsumeOk("rabbitry.1")))
    assert session.consuming == {1}


def test_a_refused_consume_names_its_queue_and_starts_no_consumer_again() -> None:
    session = ready_session()
    session.consume("orders", "first")
    session.consume("missing", "first")
    sent(session)
    close = commands.Channel.Close(404, "NOT_FOUND - no queue 'missing' in vhost 'shop'", 60, 20)
    session.receive(frames.method_frame(CHANNEL, close))
    assert session.refused == (404, "NOT_FOUND - no queue 'missing' in vhost 'shop'", "missing")
    out = sent(session)
    assert any(isinstance(f, commands.Channel.CloseOk) for f in out)
    session.receive(frames.method_frame(CHANNEL, commands.Channel.OpenOk()))
    assert not any(isinstance(f, commands.Basic.Consume) for f in sent(session))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class PacedBroker(StreamReader):
    """A broker that answers ``basic.consume`` after ``answer`` seconds and delivers a
    stream's ``messages`` (offsets 0 up) ``deliver`` seconds after that; never, with None."""

    def __init__(self, clock: Clock, answer: float, deliver: float | None, messages: int) -> None:
        super().__init__("amqp://guest:guest@localhost/")
        self.clock, self.answer, self.deliver, self.messages = clock, answer, deliver, messages
        self.session = ready_session()
        self.consumers: list[int] = []
        self.delivered = True

    def _connect(self) -> tuple[Any, StreamSession]:
        return object(), self.session

    def _started(self, wire: Any, session: StreamSession, indexes: list[int]) -> list[Any]:
        self.clock.now += self.answer
        self.consumers, self.delivered, self.answered_at = indexes, False, self.clock.now
        return []

    def _poll(self, wire: Any, session: StreamSession, timeout: float) -> list[Any]:
        self.clock.now += timeout
        due = self.deliver is not None and self.clock.now >= self.answered_at + self.deliver
        if self.delivered or not due:
            return []
        self.delivered = True
        return [
            SimpleNamespace(consumer=i, headers={OFFSET_HEADER: n}, queue="events")
            for i in self.consumers
            for n in range(self.messages)
        ]


def bounds_on(
    broker: PacedBroker, monkeypatch: pytest.MonkeyPatch
) -> tuple[tuple[int, int], float]:
    monkeypatch.setattr(streams, "time", broker.clock)
    started = broker.clock.now
    return broker.bounds("events"), broker.clock.now - started


def test_a_stream_a_busy_broker_is_slow_to_deliver_is_not_read_as_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker short of CPU answered consume in 0.2 s and delivered the first chunk 2.5 s
    later: a fixed one-second wait called the stream empty, and a batch read of it read
    nothing."""
    busy = PacedBroker(Clock(), answer=0.2, deliver=2.5, messages=1000)
    assert bounds_on(busy, monkeypatch)[0] == (0, 1000)


def test_an_empty_stream_on_an_idle_broker_is_known_within_a_second_or_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle = PacedBroker(Clock(), answer=0.002, deliver=None, messages=0)
    bounds, took = bounds_on(idle, monkeypatch)
    assert bounds == (0, 0)
    assert FIRST_WAIT <= took < FIRST_WAIT + 0.1


def test_a_stream_on_an_idle_broker_is_bounded_as_soon_as_it_delivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle = PacedBroker(Clock(), answer=0.002, deliver=0.01, messages=5)
    bounds, took = bounds_on(idle, monkeypatch)
    assert bounds == (0, 5)
    assert took < 1.0  # the first only to its first delivery, the last to a short quiet


def test_the_waits_grow_with_the_brokers_answer_and_stop_at_a_limit() -> None:
    assert Waits.after(0.001) == Waits(FIRST_WAIT, QUIET, SETTLE_LIMIT)
    slow = Waits.after(0.5)
    assert (slow.first, slow.quiet) == (10.0, 2.0) and slow.limit >= slow.first + slow.quiet
    assert Waits.after(60).first == SLOWEST_WAIT


def test_a_reader_given_patience_waits_that_long_before_it_calls_a_stream_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch read gives more patience: a broker that answers consume at once but delivers
    five seconds later has a stream the short wait would call empty."""
    monkeypatch.setattr(streams, "time", Clock())
    late = PacedBroker(streams.time, answer=0.002, deliver=5.0, messages=7)  # type: ignore[arg-type]
    assert late.bounds_of(["events"]) == {"events": (0, 0)}
    assert late.bounds_of(["events"], patience=10.0) == {"events": (0, 7)}


def test_a_reader_that_no_node_takes_says_so_at_once() -> None:
    ports = free_port(), free_port()
    urls = [f"amqp://guest:s3cret@127.0.0.1:{port}/" for port in ports]
    settings = ConnectionSettings.from_url(urls, node_order="in-order")
    started = time.monotonic()
    with pytest.raises(StreamUnreachable) as caught:
        StreamReader(settings, connect_timeout=2.0).check(["events"])
    assert time.monotonic() - started < 30  # no back-off pause after the round
    text = str(caught.value)
    assert text.startswith("cannot reach the broker at amqp://guest@127.0.0.1:")
    assert "s3cret" not in text
