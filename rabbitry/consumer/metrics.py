"""Worker counters: plain integers per queue on the hot path, a worker's queues all of its vhost.

``rabbitry.metrics`` turns them into Prometheus metrics (through prometheus-client) when a
scrape asks for them, so counting costs an integer increment and no lock. A worker's counters
that are garbage-collected are added to ``RETIRED`` (per vhost) first, so the process's totals
never go down (Prometheus counters are monotonic).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)

LIVE: weakref.WeakSet[WorkerMetrics] = weakref.WeakSet()
"""The counters of every worker alive in this process (what a scrape reads)."""


@dataclass
class QueueCounters:
    received: int = 0
    acked: int = 0
    failed: int = 0
    parked: int = 0
    rejected: int = 0
    requeued: int = 0
    duplicates: int = 0
    cancelled: int = 0
    timeouts: int = 0
    skipped: int = 0
    """Failed deliveries of a stream, logged and acked (a stream cannot dead-letter)."""
    kill_switch_trips: int = 0
    """Times the queue's kill switch tripped (``kill_switch``)."""
    immediate_retries: int = 0
    """Handler calls made again in process after a failed call (``immediate``): calls, not
    deliveries; a delivery mended by them is counted as acked, not as failed."""
    kill_switch: str = ""
    """Its kill switch's state (``closed``, ``open``, ``half_open``); empty: it has none."""
    retried: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """By tier (``1s``, ``5s``)."""
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    latency_count: int = 0

    def add(self, other: QueueCounters) -> None:
        """Add ``other``'s counts to these."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for tier, count in list(other.retried.items()):
            self.retried[tier] += count
        self.latency_buckets = [
            a + b for a, b in zip(self.latency_buckets, other.latency_buckets, strict=True)
        ]
        self.latency_sum += other.latency_sum

    def observe(self, seconds: float) -> None:
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1


_COUNTS = tuple(f.name for f in fields(QueueCounters) if f.type == "int")
"""The plain counts of ``QueueCounters`` (``latency_count`` included), summed one by one in
``add``: a counter added to the class is summed without another list to keep."""


class WorkerMetrics:
    """Counters per queue of one worker (``rabbitry.metrics`` exposes every live one)."""

    def __init__(self, *, live: bool = True, vhost: str = "/") -> None:
        self.vhost = vhost
        """The vhost of the worker's queues: two queues of one name in two vhosts are two."""
        self.queues: dict[str, QueueCounters] = defaultdict(QueueCounters)
        self.reconnects = 0
        self.settled_only = False
        """Counters of workers that are gone (``RETIRED``): nothing of theirs is in flight."""
        if live:  # a view over other workers' counters is not counted twice
            LIVE.add(self)
            # the finalizer holds the attributes, not the object: it reads them as they end
            weakref.finalize(self, _retire, self.__dict__)

    def __getitem__(self, queue: str) -> QueueCounters:
        return self.queues[queue]

    def total(self, name: str) -> int:
        value = 0
        for counters in self.queues.values():
            item = getattr(counters, name)
            value += sum(item.values()) if isinstance(item, dict) else item
        return value

    def in_flight(self, queue: str) -> int:
        """Messages received and not yet settled (being handled, or their copy unconfirmed)."""
        if self.settled_only:
            return 0
        c = self.queues[queue]
        return max(0, c.received - c.acked - c.rejected - c.requeued)


RETIRED: dict[str, WorkerMetrics] = {}
"""The summed counters of this process's workers that were garbage-collected, by vhost."""
_retired_lock = threading.Lock()


def retired() -> list[WorkerMetrics]:
    """The retired workers' counters, one per vhost."""
    with _retired_lock:
        return list(RETIRED.values())


def _retire(attributes: Mapping[str, object]) -> None:
    queues = attributes["queues"]
    reconnects = attributes["reconnects"]
    vhost = attributes["vhost"]
    assert isinstance(queues, dict) and isinstance(reconnects, int) and isinstance(vhost, str)
    with _retired_lock:
        into = RETIRED.get(vhost)
        if into is None:
            into = RETIRED[vhost] = WorkerMetrics(live=False, vhost=vhost)
            into.settled_only = True
        into.reconnects += reconnects
        for queue, counters in list(queues.items()):
            into.queues[queue].add(counters)
