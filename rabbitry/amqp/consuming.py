"""The read loop of a session that receives deliveries: the publisher's ``Session`` with
deliveries assembled off the wire (``deliveries.DeliveryAssembler``) instead of through pamqp.

Both consuming roles read through it: the worker's session (``rabbitry.consumer.session``) and
the tools' plain channel (``channel.ChannelSession``). Each frame is found by its head; a
delivery's three parts go to the assembler, publisher confirms (``basic.ack``/``basic.nack``)
to the tracker, heartbeats nowhere, and every other frame through pamqp to ``_frame``. A
subclass says what a finished delivery becomes (``_delivered``). No I/O.
"""

from __future__ import annotations

import struct

from rabbitry.amqp import frames
from rabbitry.amqp.deliveries import DeliveryAssembler, RawDelivery
from rabbitry.amqp.session import Session

_HEAD = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">HH")
_U64 = struct.Struct(">Q")
_DELIVER = 60
_ACK = frames.BASIC_ACK
_NACK = frames.BASIC_NACK


class ConsumingSession(Session):
    """A session whose deliveries come to ``_delivered`` as ``RawDelivery`` values."""

    _assembler: DeliveryAssembler | None = None
    """The delivery in progress, made at the first bytes read (``Session`` makes the rest)."""

    def _delivered(self, delivered: RawDelivery) -> None:
        raise NotImplementedError

    def _drop_delivery(self) -> None:
        """The channel closed: the delivery in progress went back to its queue."""
        if self._assembler is not None:
            self._assembler.drop()

    def receive(self, data: bytes, now: float = 0.0) -> None:
        """Feed bytes from the socket: deliveries to ``_delivered``, confirms to the tracker."""
        self.last_received = now
        buf = self._reader._buffer
        buf += data
        end = len(buf)
        offset = 0
        unpack_head = _HEAD.unpack_from
        tracker = self.tracker
        assembler = self._assembler
        if assembler is None:
            assembler = self._assembler = DeliveryAssembler()
        delivered: RawDelivery | None
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
                if kind == 3 and assembler.pending:
                    delivered = assembler.body(bytes(buf[start:stop]))
                    if delivered is not None:
                        self._delivered(delivered)
                    continue
                if kind == 1:
                    cls, method = _CLASS_METHOD.unpack_from(buf, start)
                    if cls == frames.BASIC_CLASS:
                        if method == _DELIVER:
                            assembler.deliver(buf, start + 4)
                            continue
                        if method in (_ACK, _NACK):
                            tag = _U64.unpack_from(buf, start + 4)[0]
                            multiple = bool(buf[start + 12] & 1)
                            if method == _ACK:
                                tracker.ack(tag, multiple)
                            else:
                                tracker.nack(tag, multiple)
                            continue
                elif kind == 2 and assembler.pending:
                    delivered = assembler.header(buf, start, stop)
                    if delivered is not None:
                        self._delivered(delivered)
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
