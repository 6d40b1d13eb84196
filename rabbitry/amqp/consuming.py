"""The read loop of a session that receives deliveries: the publisher's ``Session`` with
deliveries read off the wire (``deliveries``) instead of through pamqp.

Both consuming roles read through it: the worker's session (``rabbitry.consumer.session``) and
the tools' plain channel (``channel.ChannelSession``). Each frame is found by its head; a
delivery's three parts go to ``_delivered``, publisher confirms (``basic.ack``/``basic.nack``)
to the tracker, heartbeats nowhere, and every other frame through pamqp to ``_frame``. A
subclass says what a finished delivery becomes (``_delivered``). No I/O.
"""

from __future__ import annotations

import struct

from rabbitry.amqp import frames
from rabbitry.amqp.deliveries import (
    CONTENT_HEADER,
    DeliverFields,
    parse_deliver,
)
from rabbitry.amqp.session import Session

_HEAD = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">HH")
_U64 = struct.Struct(">Q")
_BASIC = frames.BASIC_CLASS
_DELIVER = 60
_ACK = frames.BASIC_ACK
_NACK = frames.BASIC_NACK


class ConsumingSession(Session):
    """A session whose deliveries come to ``_delivered`` whole."""

    # the delivery in progress: its deliver fields (None: none), then its content header
    _incoming: DeliverFields | None = None
    _flags = 0
    _properties = b""
    _size = 0
    _parts: list[bytes]

    def _delivered(self, fields: DeliverFields, flags: int, properties: bytes, body: bytes) -> None:
        """A whole delivery: its ``basic.deliver`` fields, property flags and bytes (for
        ``properties.decode_properties``), body. Four arguments, no object: one per delivery
        would cost more than the rest of its parse."""
        raise NotImplementedError

    def _drop_delivery(self) -> None:
        """The channel closed: the delivery in progress went back to its queue."""
        self._incoming = None
        self._parts = []

    def receive(self, data: bytes, now: float = 0.0) -> None:
        """Feed bytes from the socket: deliveries to ``_delivered``, confirms to the tracker."""
        self.last_received = now
        buf = self._reader._buffer
        buf += data
        end = len(buf)
        offset = 0
        unpack_head = _HEAD.unpack_from
        unpack_content = CONTENT_HEADER.unpack_from
        tracker = self.tracker
        kind = 0
        try:
            while end - offset >= 8:
                kind, _, size = unpack_head(buf, offset)
                start = offset + 7
                stop = start + size
                if stop >= end:
                    if kind == frames.PROTOCOL_HEADER[0]:
                        raise frames.version_refused(bytes(buf[offset : offset + 8]))
                    break
                if buf[stop] != 0xCE:
                    raise frames.FrameError(f"frame of type {kind} does not end with 0xCE")
                offset = stop + 1
                if kind == 3 and self._incoming is not None:
                    parts = self._parts
                    parts.append(bytes(buf[start:stop]))
                    self._size -= size
                    if self._size <= 0:
                        body = parts[0] if len(parts) == 1 else b"".join(parts)
                        self._delivered(self._incoming, self._flags, self._properties, body)
                        self._incoming = None
                    continue
                if kind == 1:
                    cls, method = _CLASS_METHOD.unpack_from(buf, start)
                    if cls == _BASIC:
                        if method == _DELIVER:
                            self._incoming = parse_deliver(buf, start + 4)
                            continue
                        if method in (_ACK, _NACK):
                            tag = _U64.unpack_from(buf, start + 4)[0]
                            multiple = bool(buf[start + 12] & 1)
                            if method == _ACK:
                                tracker.ack(tag, multiple)
                            else:
                                tracker.nack(tag, multiple)
                            continue
                elif kind == 2 and self._incoming is not None:
                    _, _, body_size, flags = unpack_content(buf, start)
                    self._flags = flags
                    self._properties = bytes(buf[start + CONTENT_HEADER.size : stop])
                    self._size = body_size
                    self._parts = []
                    if body_size == 0:
                        self._delivered(self._incoming, flags, self._properties, b"")
                        self._incoming = None
                    continue
                elif kind == frames.FRAME_HEARTBEAT:
                    continue
                _, chan, obj = frames.unmarshal(bytes(buf[offset - size - 8 : offset]))
                self._frame(chan, obj)
        except struct.error as exc:  # a method frame too short for what its class and id say
            raise frames.FrameError(f"a frame of type {kind} is too short: {exc}") from None
        finally:
            if offset:
                del buf[:offset]
