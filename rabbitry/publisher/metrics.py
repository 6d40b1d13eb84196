"""Publisher counters that outlive their publisher: what ``rabbitry.metrics`` sums at a scrape.

A publisher counts on its own confirm tracker; a scrape sums every live publisher. Prometheus
counters must never go down, so a publisher that is garbage-collected hands its counts to
``RETIRED`` as it goes, and the scrape adds those. ``LivePublishers`` is the set of live
publishers that arranges it: each one it takes gets a ``_Retirement`` companion whose
finalizer reads the publisher's counters while both are still intact (PEP 442 finalizes every
object of an unreachable cycle before clearing any), so a publisher whose tracker refers back
to it (the asyncio one) is still collected.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from rabbitry.amqp.confirms import CONFIRM_BUCKETS

if TYPE_CHECKING:
    from rabbitry.publisher.base import PublisherBase

__all__ = ["RETIRED", "LivePublishers", "RetiredPublishers"]


class RetiredPublishers:
    """The summed counters of the publishers of this process that are gone."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.nacked = 0
        self.returned = 0
        self.failed = 0
        self.republished = 0
        self.reconnects = 0
        self.buckets = [0] * (len(CONFIRM_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0
        self._lock = threading.Lock()  # finalizers run on whichever thread collects

    def absorb(self, publisher: PublisherBase) -> None:
        """Add the counts of ``publisher``, which is going away."""
        tracker = publisher.tracker
        latency = tracker.latency
        with self._lock:
            self.confirmed += tracker.confirmed
            self.nacked += tracker.nacked
            self.returned += tracker.returned
            self.failed += tracker.failed
            self.republished += tracker.republished
            self.reconnects += publisher.reconnects
            self.buckets = [a + b for a, b in zip(self.buckets, latency.buckets, strict=True)]
            self.latency_sum += latency.sum
            self.latency_count += latency.count


RETIRED = RetiredPublishers()


class _Retirement:
    """Kept by a publisher; hands its counts to ``RETIRED`` when both are collected."""

    __slots__ = ("publisher",)

    def __init__(self, publisher: PublisherBase) -> None:
        self.publisher = publisher

    def __del__(self) -> None:
        RETIRED.absorb(self.publisher)


class LivePublishers(weakref.WeakSet["PublisherBase"]):
    """Every publisher alive in this process; those collected count on in ``RETIRED``."""

    def add(self, item: PublisherBase) -> None:
        super().add(item)
        item.__dict__["_retirement"] = _Retirement(item)
