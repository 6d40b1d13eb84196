"""Pre-built frames are byte-identical to pamqp's encoder; the reader splits frames correctly."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from rabbitry.amqp import frames
from rabbitry.amqp.message import MessageBuilder


def reference(
    exchange: str,
    key: str,
    mandatory: bool,
    props: commands.Basic.Properties,
    body: bytes,
    frame_max: int = 131072,
) -> bytes:
    out = frame.marshal(
        commands.Basic.Publish(exchange=exchange, routing_key=key, mandatory=mandatory), 1
    )
    out += frame.marshal(header.ContentHeader(0, len(body), props), 1)
    chunk = frame_max - 8
    for start in range(0, len(body), chunk):
        out += frame.marshal(pamqp_body.ContentBody(body[start : start + chunk]), 1)
    return out


# Properties the builder puts on the wire as it is given them (the rest it converts or adds).
PASSED_THROUGH: dict[str, Any] = {
    "headers": {"tenant": "acme", "n": 3},
    "message_id": "id-1",
    "content_type": "application/json",
    "correlation_id": "c",
    "reply_to": "r",
    "priority": 4,
    "message_type": "created",
}


@pytest.mark.parametrize("size", [0, 1, 1024, 131072 - 8, 131072 - 7, 400_000])
def test_publish_frames_match_pamqp(size: int) -> None:
    builder = MessageBuilder(app_id="app")
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    d = builder.build(
        body,
        exchange="orders",
        routing_key="eu.created",
        mandatory=True,
        expiration=5000,
        timestamp=1_700_000_000,
        **PASSED_THROUGH,
    )
    props = commands.Basic.Properties(
        delivery_mode=2,
        expiration="5000",
        timestamp=datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.UTC),
        app_id="app",
        **PASSED_THROUGH,
    )
    assert d.frames == reference("orders", "eu.created", True, props, body)


def test_minimal_message_matches_pamqp() -> None:
    d = MessageBuilder().build(b"abc", exchange="", routing_key="q", message_id="m", timestamp=None)
    d2 = MessageBuilder(timestamps=False).build(
        b"abc", exchange="", routing_key="q", message_id="m"
    )
    props = commands.Basic.Properties(delivery_mode=2, message_id="m")
    assert d2.frames == reference("", "q", False, props, b"abc")
    assert d.frames != d2.frames  # the first one carries a timestamp


def test_reader_decodes_acks_nacks_and_other_frames_across_chunks() -> None:
    data = (
        frame.marshal(commands.Basic.Ack(delivery_tag=7, multiple=True), 1)
        + frame.marshal(commands.Basic.Nack(delivery_tag=9, multiple=False), 1)
        + frame.marshal(commands.Connection.Blocked("low memory"), 0)
        + frames.HEARTBEAT_FRAME
    )
    reader = frames.FrameReader()
    events = []
    for i in range(0, len(data), 5):
        events += reader.feed(data[i : i + 5])
    assert events[0] == ("ack", 1, 7, True)
    assert events[1] == ("nack", 1, 9, False)
    assert events[2][0] == "frame" and isinstance(events[2][2], commands.Connection.Blocked)
    assert events[3] == ("heartbeat", 0, None)


def test_reader_rejects_a_protocol_header_answer() -> None:
    with pytest.raises(frames.FrameError, match="protocol version"):
        frames.FrameReader().feed(b"AMQP\x00\x00\x09\x01")


def test_long_names_are_refused_with_the_limit() -> None:
    with pytest.raises(ValueError, match="at most 255"):
        frames.publish_method_frame(1, "x" * 256, "", False)
