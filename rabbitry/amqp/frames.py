"""AMQP 0-9-1 frames a publisher writes on its hot path, encoded from pre-built parts.

``basic.publish`` method frames depend only on (exchange, routing key, mandatory), so they are
built once and cached; the content header is a fixed prefix with the body size and the few
per-message properties (message id, timestamp, headers) spliced in. This costs about a tenth of
a general-purpose encoder (pika, pamqp) per message and is byte-identical to their output.
Rare frames (the handshake, channel and confirm methods) go through pamqp, which also parses
everything incoming except the acknowledgements this module reads directly.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

from pamqp import commands, encode
from pamqp import frame as pamqp_frame
from pamqp.base import Frame
from pamqp.exceptions import PAMQPException

from rabbitry.amqp.properties import PROPERTY_FLAGS
from rabbitry.errors import FrameError

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = b"\xce"
FRAME_OVERHEAD = 8  # type (1) + channel (2) + size (4) + frame end (1)
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

# class 60 (basic) method ids the publisher reacts to
BASIC_CLASS = 60
BASIC_ACK = 80
BASIC_NACK = 120
BASIC_RETURN = 50

_FRAME_HEAD = struct.Struct(">BHI")
_ACK_BODY = struct.Struct(">HHQB")  # class, method, delivery tag, bits
_HEADER_HEAD = struct.Struct(">HHQH")  # class, weight, body size, property flags
_SHORTSTR_MAX = 255

FLAG_HEADERS = PROPERTY_FLAGS["headers"]
FLAG_MESSAGE_ID = PROPERTY_FLAGS["message id"]
FLAG_TIMESTAMP = PROPERTY_FLAGS["timestamp"]


def shortstr(value: str, what: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > _SHORTSTR_MAX:
        raise ValueError(f"{what} is {len(data)} bytes long; AMQP allows at most 255")
    return bytes((len(data),)) + data


def method_frame(channel: int, method: Frame) -> bytes:
    """Any method frame, through pamqp (handshake, channel and confirm methods)."""
    return pamqp_frame.marshal(method, channel)


def publish_method_frame(channel: int, exchange: str, routing_key: str, mandatory: bool) -> bytes:
    """The ``basic.publish`` method frame; equal inputs give equal bytes, so callers cache it."""
    payload = (
        b"\x00\x3c\x00\x28\x00\x00"  # basic.publish, reserved ticket
        + shortstr(exchange, "exchange name")
        + shortstr(routing_key, "routing key")
        + (b"\x01" if mandatory else b"\x00")
    )
    return _FRAME_HEAD.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END


# Methods that carry names: encoded here rather than through pamqp, which checks names against
# AMQP 0-9-1's grammar ([a-zA-Z0-9-_.:]*) while RabbitMQ takes any UTF-8 name of up to 255
# bytes, as rabbitry's spec does: a queue named ``café`` is declared and consumed like any other.


def method_payload_frame(channel: int, class_id: int, method_id: int, payload: bytes) -> bytes:
    """A method frame of ``payload`` (the method's arguments, encoded)."""
    return (
        _FRAME_HEAD.pack(FRAME_METHOD, channel, 4 + len(payload))
        + struct.pack(">HH", class_id, method_id)
        + payload
        + FRAME_END
    )


def bits(*flags: bool) -> bytes:
    """Consecutive bit arguments packed into one octet, the first in the lowest bit."""
    return bytes((sum(1 << i for i, flag in enumerate(flags) if flag),))


class DeclareOptions(TypedDict, total=False):
    """What an ``exchange.declare`` says besides names (all off, no arguments, by default)."""

    passive: bool
    """Only look it up: 404 NOT_FOUND when it does not exist."""
    durable: bool
    auto_delete: bool
    arguments: Mapping[str, Any] | None


class QueueDeclareOptions(DeclareOptions, total=False):
    """What a ``queue.declare`` says besides the name."""

    exclusive: bool


def queue_declare_frame(channel: int, queue: str, **options: Unpack[QueueDeclareOptions]) -> bytes:
    flags = _flags(options, "passive", "durable", "exclusive", "auto_delete")
    payload = b"\x00\x00" + shortstr(queue, "queue name") + flags  # reserved ticket first
    return method_payload_frame(channel, 50, 10, payload + headers_table(_arguments(options)))


def exchange_declare_frame(
    channel: int, exchange: str, exchange_type: str = "direct", **options: Unpack[DeclareOptions]
) -> bytes:
    names = shortstr(exchange, "exchange name") + shortstr(exchange_type, "exchange type")
    flags = _flags(options, "passive", "durable", "auto_delete")
    payload = b"\x00\x00" + names + flags + headers_table(_arguments(options))
    return method_payload_frame(channel, 40, 10, payload)


def _flags(options: DeclareOptions, *names: str) -> bytes:
    """The bits of a declare's flags, in the order the method lists them."""
    given: Mapping[str, Any] = options
    return bits(*(bool(given.get(name, False)) for name in names))


def _arguments(options: DeclareOptions) -> Mapping[str, Any]:
    return options.get("arguments") or {}


def consume_frame(
    channel: int,
    queue: str,
    consumer_tag: str,
    *,
    no_ack: bool = False,
    arguments: Mapping[str, Any] | None = None,
) -> bytes:
    payload = (
        b"\x00\x00"
        + shortstr(queue, "queue name")
        + shortstr(consumer_tag, "consumer tag")
        + bits(False, no_ack)  # no-local, no-ack (exclusive, no-wait: off)
        + headers_table(arguments or {})
    )
    return method_payload_frame(channel, 60, 20, payload)


def cancel_frame(channel: int, consumer_tag: str) -> bytes:
    return method_payload_frame(channel, 60, 30, shortstr(consumer_tag, "consumer tag") + bits())


def headers_table(headers: Mapping[str, Any]) -> bytes:
    """An AMQP field table (4-byte size prefix included)."""
    return bytes(encode.field_table(dict(headers)))


def properties_around_headers(
    *,
    content_type: str | None,
    content_encoding: str | None,
    delivery_mode: int | None,
    priority: int | None,
    correlation_id: str | None,
    reply_to: str | None,
    expiration: str | None,
) -> tuple[int, bytes, bytes]:
    """The properties that precede the message id in wire order, but for the headers: their
    flags, and their bytes before and after where the headers go. Builders cache this per value
    set and put each message's headers (``headers_table``) between, with ``FLAG_HEADERS``."""
    if priority is not None and not 0 <= priority <= 255:
        raise ValueError(f"priority must be between 0 and 255, got {priority}")
    first, before = _properties(
        ("content type", content_type), ("content encoding", content_encoding)
    )
    then, after = _properties(
        ("delivery mode", delivery_mode),
        ("priority", priority),
        ("correlation id", correlation_id),
        ("reply-to", reply_to),
        ("expiration", expiration),
    )
    return first | then, before, after


def properties_suffix(
    *, message_type: str | None, user_id: str | None, app_id: str | None
) -> tuple[int, bytes]:
    """Flags and bytes of the properties that follow the timestamp in wire order."""
    return _properties(("message type", message_type), ("user id", user_id), ("app id", app_id))


def _properties(*given: tuple[str, str | int | None]) -> tuple[int, bytes]:
    """Flags and bytes of the properties given by name (``PROPERTY_FLAGS``) and value, in that
    order: an int as an octet, a str as a short string. Not per message: builders cache them."""
    flags = 0
    parts: list[bytes] = []
    for name, value in given:
        if value is None:
            continue
        flags |= PROPERTY_FLAGS[name]
        parts.append(bytes((value,)) if isinstance(value, int) else shortstr(value, name))
    return flags, b"".join(parts)


def content_frames(
    channel: int,
    flags: int,
    prefix: bytes,
    message_id: bytes,
    timestamp: int | None,
    suffix: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Content header plus body frames. ``message_id`` is a pre-encoded shortstr (or b'')."""
    if message_id:
        flags |= FLAG_MESSAGE_ID
    if timestamp is not None:
        flags |= FLAG_TIMESTAMP
        stamp = timestamp.to_bytes(8, "big")
    else:
        stamp = b""
    props = prefix + message_id + stamp + suffix
    size = len(body)
    header_size = 14 + len(props)
    head = _FRAME_HEAD.pack(FRAME_HEADER, channel, header_size) + _HEADER_HEAD.pack(
        BASIC_CLASS, 0, size, flags
    )
    chunk = frame_max - FRAME_OVERHEAD
    if size == 0:
        return head + props + FRAME_END
    if size <= chunk:
        return (
            head
            + props
            + FRAME_END
            + _FRAME_HEAD.pack(FRAME_BODY, channel, size)
            + body
            + FRAME_END
        )
    out = [head, props, FRAME_END]
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start : start + chunk]
        out.append(_FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)))
        out.append(bytes(piece))
        out.append(FRAME_END)
    return b"".join(out)


class FrameReader:
    """Splits incoming bytes into frames; acks and nacks are decoded without pamqp.

    ``feed`` returns a list of events: ``("ack", channel, tag, multiple)``,
    ``("nack", channel, tag, multiple)``, ``("frame", channel, pamqp object)``,
    ``("heartbeat", 0, None)``.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[Any, ...]]:
        buffer = self._buffer
        buffer += data
        events: list[tuple[Any, ...]] = []
        offset = 0
        end = len(buffer)
        unpack_head = _FRAME_HEAD.unpack_from
        unpack_ack = _ACK_BODY.unpack_from
        while end - offset >= 7:
            if buffer[offset] == 0x41:  # "AMQP": the server refused our protocol version
                raise version_refused(bytes(buffer[offset : offset + 8]))
            kind, channel, size = unpack_head(buffer, offset)
            stop = offset + 7 + size
            if stop >= end:
                break
            if buffer[stop] != 0xCE:
                raise FrameError(f"frame of type {kind} does not end with 0xCE")
            if kind == FRAME_METHOD and size == 13:
                cls, method, tag, bits = unpack_ack(buffer, offset + 7)
                if cls == BASIC_CLASS and method == BASIC_ACK:
                    events.append(("ack", channel, tag, bool(bits & 1)))
                    offset = stop + 1
                    continue
                if cls == BASIC_CLASS and method == BASIC_NACK:
                    events.append(("nack", channel, tag, bool(bits & 1)))
                    offset = stop + 1
                    continue
            if kind == FRAME_HEARTBEAT:
                events.append(("heartbeat", 0, None))
            else:
                _, chan, obj = unmarshal(bytes(buffer[offset : stop + 1]))
                events.append(("frame", chan, obj))
            offset = stop + 1
        if offset:
            del buffer[:offset]
        return events


def version_refused(header: bytes) -> FrameError:
    """The error of a broker that answered with its protocol header (another version)."""
    return FrameError(f"the broker answered with another AMQP protocol version: {header.hex()}")


def unmarshal(data: bytes) -> tuple[int, int, Any]:
    """pamqp's reading of one whole frame; a frame it cannot read is a ``FrameError``."""
    try:
        return pamqp_frame.unmarshal(data)
    except (PAMQPException, ValueError, struct.error) as exc:  # pamqp lets some of these out
        raise FrameError(f"a frame of type {data[0]} cannot be read: {exc}") from None


def message_id_of(header: Any) -> str | None:
    """The message id of a pamqp content header, if any."""
    props = getattr(header, "properties", None)
    value = getattr(props, "message_id", None)
    return value if isinstance(value, str) else None


__all__ = [
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "DeclareOptions",
    "FrameError",
    "FrameReader",
    "QueueDeclareOptions",
    "bits",
    "cancel_frame",
    "commands",
    "consume_frame",
    "content_frames",
    "exchange_declare_frame",
    "method_frame",
    "method_payload_frame",
    "properties_around_headers",
    "properties_suffix",
    "publish_method_frame",
    "queue_declare_frame",
    "shortstr",
    "unmarshal",
]
