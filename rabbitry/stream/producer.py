"""A named producer on a stream-protocol connection: publish frames within a window of
unconfirmed messages, every confirm awaited, de-duplicated by the broker on publishing ids.
The socket is ``rabbitry.stream.blocking.StreamClient``'s.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rabbitry.errors import StreamRefused, StreamUnavailable
from rabbitry.stream import frames
from rabbitry.stream.session import Confirmed, Event, PublishFailed

if TYPE_CHECKING:
    from rabbitry.stream.blocking import StreamClient

__all__ = ["PUBLISH_BATCH", "PUBLISH_WINDOW", "Producer", "PublishCount", "entries_of"]

PUBLISH_WINDOW = 8192
"""Messages published and not yet confirmed, at most."""
PUBLISH_BATCH = 500
"""Messages per publish frame of ``publish`` (``Producer.send`` fills frames up to the
broker's frame size)."""
_ENTRY = struct.Struct(">QI")


@dataclass
class PublishCount:
    sent: int = 0
    """Messages sent and confirmed (the broker drops those it held already: see ``publish``)."""
    skipped: int = 0
    """Messages not sent: the broker holds their publishing id for this producer already."""


def entries_of(batch: Sequence[tuple[int, bytes]]) -> tuple[list[int], bytes]:
    """Publish entries of ``(publishing id, message)`` pairs, and where each starts and ends."""
    parts: list[bytes] = []
    offsets = [0]
    for publishing_id, message in batch:
        parts.append(_ENTRY.pack(publishing_id, len(message)) + message)
        offsets.append(offsets[-1] + len(parts[-1]))
    return offsets, b"".join(parts)


class Producer:
    """A named producer on one connection: declared on each stream it writes to (``last``),
    publish frames sent within a window of unconfirmed messages (``send``), every confirm
    awaited (``finish``), deleted on leaving.

    The broker keeps, per producer name and stream, the highest publishing id it stored, and
    drops (while confirming) a message whose id is not above it: a message published again
    under the same name and id is stored once. Callers skip the messages at or below ``last``
    (they need not even be encoded). ``StreamRefused`` when the broker refuses messages."""

    def __init__(self, client: StreamClient, reference: str, *, timeout: float = 60.0) -> None:
        self.client = client
        self.reference = reference
        self.timeout = timeout
        self.count = PublishCount()
        self._streams: dict[str, tuple[int, int]] = {}  # publisher id, last publishing id
        self._unconfirmed = 0
        self._failures: list[tuple[int, int]] = []
        tuned = client.session.tuned_frame_max
        self._frame_bytes = (tuned or client.session.frame_max) - 64  # the frame's own fields

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        session = self.client.session
        with contextlib.suppress(Exception):
            for pid, _ in self._streams.values():
                if session.ready:
                    self.client._ok(session.delete_publisher(pid), "deleting a producer")

    def last(self, stream: str) -> int:
        """The highest publishing id the broker held for this producer on ``stream`` when it
        was declared there (0: none); declares it on first use."""
        found = self._streams.get(stream)
        if found is None:
            pid = len(self._streams)
            if pid > 255:
                raise ValueError("a producer writes to 256 streams at most")
            self.client._ok(
                self.client.session.declare_publisher(pid, self.reference, stream),
                f"declaring producer {self.reference!r} on stream {stream!r}",
            )
            found = self._streams[stream] = (
                pid,
                self.client.last_publishing_id(self.reference, stream),
            )
        return found[1]

    def send(self, stream: str, offsets: Sequence[int], entries: bytes | memoryview) -> None:
        """Publish entries (``publishing id:u64, size:u32, message`` each; entry ``i`` is
        ``entries[offsets[i] - offsets[0]:offsets[i + 1] - offsets[0]]``) in frames the
        broker takes, waiting while the window of unconfirmed messages is full."""
        self.last(stream)
        pid = self._streams[stream][0]
        base, first, count = offsets[0], 0, len(offsets) - 1
        while first < count:
            end = bisect.bisect_right(offsets, offsets[first] + self._frame_bytes, first + 1) - 1
            end = max(end, first + 1)  # one message larger than a frame: the broker says so
            frame = entries[offsets[first] - base : offsets[end] - base]
            self.client.send(frames.publish_head(pid, end - first, len(frame)), frame)
            self._unconfirmed += end - first
            self.count.sent += end - first
            first = end
            self._settle(block=False)

    def finish(self) -> PublishCount:
        """What was sent and skipped, once every message sent is confirmed."""
        self._settle(block=True)
        if self._failures:
            pub_id, code = self._failures[0]
            raise StreamRefused(
                f"the broker refused {len(self._failures)} message(s) of producer"
                f" {self.reference!r} (the first, id {pub_id}: {frames.code_name(code)})",
                code,
            )
        return self.count

    def _settle(self, block: bool) -> None:
        client = self.client
        deadline = time.monotonic() + self.timeout
        while True:
            kept: list[Event] = []
            for event in client._events:
                if isinstance(event, Confirmed):
                    self._unconfirmed -= len(event.publishing_ids)
                elif isinstance(event, PublishFailed):
                    self._unconfirmed -= len(event.failures)
                    self._failures.extend(event.failures)
                else:
                    kept.append(event)
            client._events = kept
            if self._unconfirmed <= 0 or (not block and self._unconfirmed < PUBLISH_WINDOW):
                return
            if client._round(0.5):
                deadline = time.monotonic() + self.timeout
            elif time.monotonic() > deadline:
                raise StreamUnavailable(
                    f"{self._unconfirmed} message(s) of producer {self.reference!r} unconfirmed"
                    f" for {self.timeout:g} s (at {client.display})"
                )
