"""The plain channel of the tools (``amqp.channel``): what it writes and what it makes of what
the broker answers, without a broker. Against a broker it is shown by the parking-lot, plan
count, shard check, Spark check and delay layout tests under tests/integration."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.amqp import channel as channel_module
from rabbitry.amqp.channel import Channel, ChannelSession
from rabbitry.amqp.message import CHANNEL
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import Backoff, ConnectionSettings
from rabbitry.consumer.streams import StreamReader
from rabbitry.errors import BrokerError, FrameError
from rabbitry.testing import ScriptedBroker
from tests.unit.amqp.wire import frames_in


def ready_session() -> ChannelSession:
    session = ChannelSession(ConnectionSettings(vhost="shop"))
    start = commands.Connection.Start(mechanisms="PLAIN", locales="en_US")
    session.receive(pamqp_frame.marshal(start, 0))
    session.receive(pamqp_frame.marshal(commands.Connection.Tune(2047, 131072, 60), 0))
    session.receive(pamqp_frame.marshal(commands.Connection.OpenOk(), 0))
    session.receive(pamqp_frame.marshal(commands.Channel.OpenOk(), CHANNEL))
    session.take_output()
    return session


def delivery(tag: int, body: bytes, **properties: Any) -> bytes:
    deliver = commands.Basic.Deliver("rabbitry.tool.1", tag, False, "ex", "key")
    props = commands.Basic.Properties(**properties)
    data = pamqp_frame.marshal(deliver, CHANNEL)
    data += pamqp_frame.marshal(header.ContentHeader(0, len(body), props), CHANNEL)
    if body:  # an empty body has no body frame
        data += pamqp_frame.marshal(pamqp_body.ContentBody(body), CHANNEL)
    return data


def test_a_plain_channel_opens_without_confirm_mode() -> None:
    session = ChannelSession(ConnectionSettings())
    session.take_output()
    session.receive(pamqp_frame.marshal(commands.Connection.OpenOk(), 0))
    assert [type(f) for f in frames_in(session.take_output())] == [commands.Channel.Open]
    session.receive(pamqp_frame.marshal(commands.Channel.OpenOk(), CHANNEL))
    assert session.ready and session.take_output() == b""


def test_methods_with_names_encode_as_pamqp_does_for_ascii_names() -> None:
    encoded = {
        "queue.declare": (
            channel_module._method(
                50,
                10,
                b"\0\0"
                + channel_module._names("q")
                + channel_module._bits(True, True)
                + channel_module._table({"x-queue-type": "quorum"}),
            ),
            commands.Queue.Declare(
                queue="q", passive=True, durable=True, arguments={"x-queue-type": "quorum"}
            ),
        ),
        "queue.bind": (
            channel_module._method(
                50,
                20,
                b"\0\0"
                + channel_module._names("q", "ex", "1")
                + channel_module._bits()
                + channel_module._table(None),
            ),
            commands.Queue.Bind(queue="q", exchange="ex", routing_key="1", arguments={}),
        ),
        "basic.nack": (
            channel_module._method(
                60, 120, (7).to_bytes(8, "big") + channel_module._bits(True, True)
            ),
            commands.Basic.Nack(7, multiple=True, requeue=True),
        ),
    }
    for what, (ours, method) in encoded.items():
        assert ours == pamqp_frame.marshal(method, CHANNEL), what


def test_a_name_outside_ascii_is_sent_as_utf8() -> None:
    # pamqp refuses such names; RabbitMQ and the spec accept them
    payload = b"\0\0" + channel_module._names("café") + b"\0" + channel_module._table(None)
    method = frames_in(channel_module._method(50, 10, payload))
    assert isinstance(method[0], commands.Queue.Declare) and method[0].queue == "café"


def test_replies_and_deliveries_are_kept_in_order_with_their_properties() -> None:
    session = ready_session()
    session.receive(pamqp_frame.marshal(commands.Queue.DeclareOk("q", 3, 1), CHANNEL))
    session.receive(delivery(1, b"one", headers={"x-rabbitry-queue": "work"}, message_id="m1"))
    session.receive(delivery(2, b"", message_type="order"))
    reply = session.replies.popleft()
    assert isinstance(reply, commands.Queue.DeclareOk) and reply.message_count == 3
    first, second = session.deliveries
    assert (first.delivery_tag, first.body, first.routing_key) == (1, b"one", "key")
    assert first.properties.headers == {"x-rabbitry-queue": "work"}
    assert first.properties.message_id == "m1" and first.consumer_tag == "rabbitry.tool.1"
    assert (second.body, second.properties.message_type) == (b"", "order")


def test_a_body_in_several_frames_is_one_delivery() -> None:
    session = ready_session()
    deliver = commands.Basic.Deliver("t", 1, False, "", "q")
    data = pamqp_frame.marshal(deliver, CHANNEL) + pamqp_frame.marshal(
        header.ContentHeader(0, 6, commands.Basic.Properties()), CHANNEL
    )
    for piece in (b"ab", b"cd", b"ef"):
        data += pamqp_frame.marshal(pamqp_body.ContentBody(piece), CHANNEL)
    session.receive(data)
    assert [d.body for d in session.deliveries] == [b"abcdef"]


def test_a_refused_method_is_kept_and_the_channel_opens_again() -> None:
    session = ready_session()
    session.receive(delivery(1, b"x"))
    close = commands.Channel.Close(404, "NOT_FOUND - no queue 'gone' in vhost 'shop'", 50, 10)
    session.receive(pamqp_frame.marshal(close, CHANNEL))
    refused = session.refused
    assert refused is not None and refused.reply_code == 404
    assert "no queue 'gone'" in refused.reply_text
    # the closed channel's deliveries went back to the queue: their tags mean nothing now
    assert not session.deliveries and session.state is State.OPENING_CHANNEL
    assert [type(f) for f in frames_in(session.take_output())] == [
        commands.Channel.CloseOk,
        commands.Channel.Open,
    ]
    session.receive(pamqp_frame.marshal(commands.Channel.OpenOk(), CHANNEL))
    assert session.ready


def test_a_broker_that_answers_with_another_protocol_version_is_a_frame_error() -> None:
    # the consuming read loop (amqp.consuming) waits for no frame of that "size"
    session = ChannelSession(ConnectionSettings())
    with pytest.raises(FrameError, match="another AMQP protocol version: 414d515000000901"):
        session.receive(b"AMQP\x00\x00\x09\x01")


def test_settling_with_multiple_forgets_the_buffered_deliveries_it_covers() -> None:
    session = ready_session()
    for tag in (1, 2, 3):
        session.receive(delivery(tag, b"x"))
    session.settled(2, multiple=True)
    assert [d.delivery_tag for d in session.deliveries] == [3]
    session.settled(3, multiple=False)
    assert [d.delivery_tag for d in session.deliveries] == [3]
    session.settled(0, multiple=True)
    assert not session.deliveries


def test_a_port_nobody_listens_on_says_where_and_what_to_set() -> None:
    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(BrokerError) as caught:
        Channel(f"amqp://guest:s3cret@127.0.0.1:{port}/shop", timeout=2.0)
    text = str(caught.value)
    assert text.startswith(f"cannot connect to amqp://guest@127.0.0.1:{port}/shop: ")
    assert "is the broker running and listening there? set --url or RABBITRY_URL" in text
    assert "s3cret" not in text


def test_a_port_that_accepts_and_never_answers_is_not_an_amqp_port() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(BrokerError) as caught:
            Channel(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=0.5)
    assert str(caught.value) == (
        f"amqp://guest@127.0.0.1:{port}/%2F did not complete the AMQP handshake in time: is it"
        " a RabbitMQ AMQP port (5672, or 5671 for amqps)? set --url or RABBITRY_URL"
    )


def free_port() -> int:
    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CLIENT_BACKOFF = Backoff(initial=60.0, maximum=60.0, jitter=0.0, give_up_after=0.0)
"""A publisher's back-off (a tool may be given its settings) that a tool does not follow: a
pause after a round of nodes would stall a test for a minute, and giving up after 0 s would
stop before the second node."""


def _asks_through_a_channel(settings: ConnectionSettings) -> None:
    with Channel(settings) as channel:
        assert channel.queue_declare("work", passive=True).message_count == 1


def _asks_through_a_stream_reader(settings: ConnectionSettings) -> None:
    reader = StreamReader(settings, connect_timeout=2.0)
    try:
        reader.check(["work"])
    finally:
        reader.close()


@pytest.mark.parametrize("ask", [_asks_through_a_channel, _asks_through_a_stream_reader])
def test_a_tool_moves_on_to_the_next_node_as_every_client_does_and_says_so(
    caplog: pytest.LogCaptureFixture, ask: Callable[[ConnectionSettings], None]
) -> None:
    # the connector's walk and its log: a tool's failover (the tools' Channel, the stream
    # reader of the Spark source and dlq tools) reads like a publisher's
    dead = free_port()
    with ScriptedBroker() as broker:
        broker.declare_queue("work")
        broker.put("work", b"one")
        urls = [f"amqp://guest:guest@127.0.0.1:{dead}/", broker.url]
        settings = ConnectionSettings.from_url(urls, node_order="in-order", backoff=CLIENT_BACKOFF)
        with caplog.at_level(logging.INFO, "rabbitry.amqp"):
            ask(settings)
        assert broker.connections_opened == 1
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith(f"connecting to amqp://guest@127.0.0.1:{dead}/%2F failed (")
    assert said[0].endswith(f"); trying amqp://guest@{broker.host}:5672/%2F")
    assert said[1] == f"connected to amqp://guest@{broker.host}:5672/%2F"


def test_after_every_node_failed_once_a_tool_gives_up_at_once_naming_them_all() -> None:
    ports = free_port(), free_port()
    urls = [f"amqp://guest:s3cret@127.0.0.1:{port}/" for port in ports]
    settings = ConnectionSettings.from_url(urls, node_order="in-order", backoff=CLIENT_BACKOFF)
    with pytest.raises(BrokerError) as caught:
        Channel(settings, timeout=2.0)
    text = str(caught.value)
    nodes = ",".join(f"127.0.0.1:{port}" for port in ports)
    assert text.startswith(f"cannot connect to amqp://guest@{nodes}/%2F: ")
    assert "is the broker running and listening there?" in text and "s3cret" not in text
