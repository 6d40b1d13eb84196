"""Where a worker's stream consumer resumes after its connection drops.

A stream keeps its messages and AMQP 0-9-1 keeps no position for a consumer: a consumer that
subscribes again at its first ``x-stream-offset`` (``first``, a time) would be handed
everything again. ``StreamPosition`` follows the offsets delivered and the ones handled, and
names the offset to subscribe at next: the lowest offset delivered and not yet handled (those
messages come again: at least once, as for queues), else the one after the highest delivered.
The broker starts a consumer at the chunk that holds the offset, so deliveries below it are
copies to skip (``take``).

Pure: offsets in, an offset out; no clock, no I/O.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamPosition"]


class StreamPosition:
    """The read position of one stream consumer of a worker."""

    __slots__ = ("_floor", "_next", "_open", "start")

    def __init__(self, start: Any) -> None:
        self.start = start
        """What the consumer subscribes at before anything was delivered (the handler's
        ``offset``: a name, an offset or a time)."""
        self._open: set[int] = set()
        self._next: int | None = None
        self._floor = start if isinstance(start, int) and not isinstance(start, bool) else 0
        """Deliveries below this offset are copies from the start of a chunk."""

    def take(self, offset: int) -> bool:
        """Note a delivery; False for one below the position subscribed at (skip it)."""
        if offset < self._floor:
            return False
        self._open.add(offset)
        if self._next is None or offset >= self._next:
            self._next = offset + 1
        return True

    def handled(self, offset: int) -> None:
        """The delivery at ``offset`` is settled (acked, skipped): it does not come again."""
        self._open.discard(offset)

    def committed(self) -> int | None:
        """The offset a new process should start at to miss nothing: the lowest offset
        delivered and not yet handled, else the one after the highest delivered; None before
        anything was delivered (the position is still ``start``). What ``tracking`` stores."""
        if self._open:
            return min(self._open)
        return self._next

    def resume(self) -> Any:
        """The ``x-stream-offset`` of the next subscription; deliveries not yet handled are
        forgotten (the broker sends them again from there)."""
        if self._open:
            at: int | None = min(self._open)
        else:
            at = self._next
        self._open.clear()
        if at is None:
            return self.start
        self._floor = at
        return at
