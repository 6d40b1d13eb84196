"""Which deliveries may be acknowledged now, and in how few frames.

Handlers finish out of order; a retried message may be acked only once its republish is
confirmed. ``AckTracker`` keeps the outstanding delivery tags of one channel in order and
turns finished ones into ``basic.ack`` frames: one ``multiple`` ack covers the longest finished
run from the oldest outstanding tag; what finished behind a slow message is acked one by one
when the worker flushes (so a slow handler never holds other messages unacked for long).
Rejections and requeues (``basic.nack``) are sent singly, in the order decided; so are failed
returns (``basic.reject``), which RabbitMQ 4.3 quorum queues count as failed deliveries and
hold for their delayed retry, where a ``basic.nack`` returns a message uncounted and at once
(measured on 4.3.6). Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections import deque

from rabbitry.amqp.frames import BASIC_ACK, BASIC_CLASS, BASIC_NACK, FRAME_METHOD

_ACK = struct.Struct(">BHIHHQBB")  # frame type, channel, size, class, method, tag, bits, end
_ACK_SIZE = 13
BASIC_REJECT = 90


def ack_frame(channel: int, tag: int, multiple: bool) -> bytes:
    return _ACK.pack(
        FRAME_METHOD, channel, _ACK_SIZE, BASIC_CLASS, BASIC_ACK, tag, 1 if multiple else 0, 0xCE
    )


def nack_frame(channel: int, tag: int, requeue: bool, multiple: bool = False) -> bytes:
    """``basic.nack`` of one message, or with ``multiple`` of every one up to ``tag`` (bits:
    multiple, requeue)."""
    return _ACK.pack(
        FRAME_METHOD,
        channel,
        _ACK_SIZE,
        BASIC_CLASS,
        BASIC_NACK,
        tag,
        (2 if requeue else 0) | (1 if multiple else 0),
        0xCE,
    )


def reject_frame(channel: int, tag: int, requeue: bool) -> bytes:
    """``basic.reject`` of one message (bits: requeue)."""
    return _ACK.pack(
        FRAME_METHOD, channel, _ACK_SIZE, BASIC_CLASS, BASIC_REJECT, tag, 1 if requeue else 0, 0xCE
    )


class AckTracker:
    """Outstanding delivery tags of one channel; ``take_frames`` yields what to send."""

    __slots__ = (
        "_done",
        "_order",
        "_since",
        "_singles",
        "acked",
        "batch",
        "channel",
        "frames",
        "nacked",
    )

    def __init__(self, channel: int = 1, batch: int = 0) -> None:
        self.channel = channel
        self.batch = batch
        """Send a multiple ack as soon as this many finished in a row (0: only on flush)."""
        self._order: deque[int] = deque()
        self._done: set[int] = set()
        self._singles: list[bytes] = []
        self._since = 0
        self.frames = 0
        self.acked = 0
        self.nacked = 0

    def __len__(self) -> int:
        return len(self._order)

    @property
    def outstanding(self) -> int:
        return len(self._order)

    def received(self, tag: int) -> None:
        self._order.append(tag)

    def done(self, tag: int) -> None:
        """The message ``tag`` may be acked."""
        self._done.add(tag)
        self._since += 1

    def reject(self, tag: int, requeue: bool) -> None:
        """Nack ``tag`` (requeue or dead-letter); it leaves the outstanding set at once."""
        self._singles.append(nack_frame(self.channel, tag, requeue))
        self.nacked += 1
        self._done.add(-tag)  # marks "settled, but not by an ack": skipped by the runs

    def fail(self, tag: int, requeue: bool) -> None:
        """Reject ``tag`` as a failed delivery (basic.reject): the broker counts it; with
        ``requeue`` a quorum queue retries it after its delay (``retry: {via: broker}``)."""
        self._singles.append(reject_frame(self.channel, tag, requeue))
        self.nacked += 1
        self._done.add(-tag)

    def take_frames(self, flush: bool = False) -> bytes:
        """Frames for everything that may be settled now; with ``flush`` also out-of-order ones."""
        order = self._order
        done = self._done
        out = bytearray()
        self._since = 0
        if self._singles:
            for frame in self._singles:
                out += frame
            self.frames += len(self._singles)
            self._singles.clear()
        last = 0
        count = 0
        while order:
            tag = order[0]
            if tag in done:
                done.discard(tag)
                order.popleft()
                last = tag
                count += 1
            elif -tag in done:
                done.discard(-tag)
                order.popleft()
                if count:
                    out += ack_frame(self.channel, last, count > 1)
                    self.frames += 1
                    self.acked += count
                    count = 0
            else:
                break
        if count:
            out += ack_frame(self.channel, last, count > 1)
            self.frames += 1
            self.acked += count
        if flush and done:
            keep: deque[int] = deque()
            for tag in order:
                if tag in done:
                    done.discard(tag)
                    out += ack_frame(self.channel, tag, False)
                    self.frames += 1
                    self.acked += 1
                elif -tag in done:
                    done.discard(-tag)
                else:
                    keep.append(tag)
            self._order = keep
        return bytes(out)

    def should_send(self) -> bool:
        """True when ``batch`` messages finished since the last frames (or a nack waits)."""
        return bool(self._singles) or (0 < self.batch <= self._since)

    def forget(self) -> list[int]:
        """The channel is gone: drop every tag (the broker requeued them); the unsettled tags."""
        left = [t for t in self._order if t not in self._done and -t not in self._done]
        self._order.clear()
        self._done.clear()
        self._singles.clear()
        self._since = 0
        return left
