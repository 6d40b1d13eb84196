"""The stream session without a broker: consumers at an offset, refusals kept, not retried."""

from __future__ import annotations

from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp import frames
from rabbitry.amqp.message import CHANNEL
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.streams import OFFSET_HEADER, StreamSession


def ready_session() -> StreamSession:
    session = StreamSession(ConnectionSettings(), prefetch=100)
    session.state = State.READY
    session.out.clear()
    return session


def sent(session: StreamSession) -> list[object]:
    data = session.take_output()
    found = []
    while data:
        size = int.from_bytes(data[3:7], "big") + 8
        found.append(pamqp_frame.unmarshal(data[:size])[2])
        data = data[size:]
    return found


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
