"""Where a stream handler's position outlives its process: a small stream on the broker.

AMQP 0-9-1 keeps no position for a stream consumer, and ``positions.StreamPosition`` keeps one
only in memory: a worker killed and started again subscribes at its ``offset=`` once more and
skips (``next``) or reads again (``first``) everything in between. A handler given a
``track=`` name keeps its position in a stream of its own on the same broker,
``tracking_stream(queue, name)``: each record is the offset a new process should start at
(``StreamPosition.committed``: every offset below it was handled). So any host that can reach
the broker resumes there, and the stream is replicated as the broker replicates streams.

- Reading (``stored_positions``) happens once, when the worker first connects: the last record
  of each tracking stream (``StreamReader.latest``, exact). None: nothing stored yet, the
  handler starts at its ``offset=``.
- Writing (``RecordSchedule``) follows the acks: a record when the position moved by the ack
  batch, when it moved and ``RECORD_EVERY_S`` passed, when the worker is idle or stops. A record
  is published with confirms like the worker's retries; one that fails is written again.
  A process killed between two records reads again at most what came after the last one: the
  deliveries in flight (the prefetch) and the handled ones not yet recorded (an ack batch).
- Retention keeps the tracking stream small (``TRACKING_ARGUMENTS``): only its last record
  matters.

``RecordSchedule`` and the record format are pure; ``stored_positions`` does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.message import IncomingMessage

__all__ = [
    "RECORD_EVERY_S",
    "TRACKING_ARGUMENTS",
    "TRACKING_PREFIX",
    "RecordSchedule",
    "record_body",
    "record_offset",
    "stored_positions",
    "tracking_stream",
]

TRACKING_PREFIX = "rabbitry.position."
TRACKING_ARGUMENTS: Mapping[str, Any] = {
    "x-queue-type": "stream",
    "x-max-length-bytes": 1_000_000,
    "x-stream-max-segment-size-bytes": 100_000,
}
"""A stream whose retention drops old segments of 100 kB past 1 MB: tens of thousands of
records, of which only the last is read."""
RECORD_EVERY_S = 1.0
"""A position that moved is recorded at least this often while messages flow."""
_RECORD_FORMAT = 1


def tracking_stream(queue: str, name: str) -> str:
    """The stream that keeps the position of the reader ``name`` in stream ``queue``."""
    return f"{TRACKING_PREFIX}{name}.{queue}"


def record_body(offset: int) -> bytes:
    """A record: the offset to start at."""
    return json.dumps({"format": _RECORD_FORMAT, "offset": offset}).encode()


def record_offset(message: IncomingMessage) -> int | None:
    """The offset a record holds; None for anything else in the stream (a reader's marker)."""
    try:
        value = json.loads(message.body)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    offset = value.get("offset")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        return None
    return offset


class RecordSchedule:
    """When a stream consumer's position is worth a record (pure: offsets and times in)."""

    __slots__ = ("_at", "_retry", "_written", "batch", "every_s")

    def __init__(self, *, batch: int, every_s: float = RECORD_EVERY_S) -> None:
        self.batch = batch
        self.every_s = every_s
        self._written: dict[int, int] = {}
        self._at: dict[int, float] = {}
        self._retry: dict[int, float] = {}

    def known(self, index: int, offset: int) -> None:
        """``offset`` is what the broker holds already for consumer ``index`` (read at start)."""
        self._written[index] = offset

    def due(self, index: int, offset: int | None, now: float, *, force: bool) -> bool:
        """True when consumer ``index`` at position ``offset`` should write a record now;
        ``force``: the worker is idle or stopping (any move is written)."""
        if offset is None or now < self._retry.get(index, 0.0):
            return False
        written = self._written.get(index)
        if written == offset:
            return False
        if not (
            force
            or written is None
            or offset - written >= self.batch
            or now - self._at.get(index, 0.0) >= self.every_s
        ):
            return False
        self._written[index] = offset
        self._at[index] = now
        return True

    def failed(self, index: int, now: float) -> None:
        """A record of ``index`` was not stored: the position is written again, once
        ``every_s`` passed (a stream that refuses records is not hammered)."""
        self._written.pop(index, None)
        self._retry[index] = now + self.every_s


def stored_positions(
    settings: ConnectionSettings, streams: Mapping[int, str]
) -> dict[int, int | None]:
    """The stored position of each consumer index's tracking stream (declared when missing),
    over one short connection; None where nothing was recorded yet.

    Raises ``StreamError`` (``StreamUnreachable`` when the broker cannot be reached)."""
    from rabbitry.consumer.streams import StreamReader

    found: dict[int, int | None] = {}
    with StreamReader(settings, prefetch=500, connection_name="rabbitry worker positions") as r:
        for index, stream in streams.items():
            r.declare_stream(stream, TRACKING_ARGUMENTS)
            last = r.latest(stream, lambda m: record_offset(m) is not None)
            found[index] = None if last is None else record_offset(last[1])
    return found
