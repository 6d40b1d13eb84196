"""Where a worker remembers message ids: handled ones (idempotency) and cancelled jobs.

Both are small protocols so that several workers can share one store (a database, Redis);
the defaults are in-memory and per process, bounded by an LRU.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol, runtime_checkable


@runtime_checkable
class IdempotencyStore(Protocol):
    """Message ids whose handler already succeeded."""

    def seen(self, message_id: str) -> bool:
        """True when ``message_id`` was handled before."""
        ...

    def remember(self, message_id: str) -> None:
        """Record a successful handling of ``message_id``."""
        ...


@runtime_checkable
class CancelStore(Protocol):
    """Job ids that were withdrawn before they arrived."""

    def cancel(self, message_id: str) -> None: ...

    def take(self, message_id: str) -> bool:
        """True (once) when ``message_id`` was cancelled: the worker drops the job."""
        ...


class _RecentIds:
    """At most ``capacity`` ids, in the order they were last added: the oldest go first."""

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def _add(self, message_id: str) -> None:
        self._ids[message_id] = None
        self._ids.move_to_end(message_id)
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)


class MemoryIdempotencyStore(_RecentIds):
    """The last ``capacity`` handled ids of this process (least recently seen evicted)."""

    def seen(self, message_id: str) -> bool:
        if message_id in self._ids:
            self._ids.move_to_end(message_id)
            return True
        return False

    def remember(self, message_id: str) -> None:
        self._add(message_id)


class MemoryCancelStore(_RecentIds):
    """Cancelled ids known to this process, at most ``capacity`` (oldest forgotten)."""

    def cancel(self, message_id: str) -> None:
        self._add(message_id)

    def take(self, message_id: str) -> bool:
        return self._ids.pop(message_id, 0) is None
