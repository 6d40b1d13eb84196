"""The retry ladder of queue ``work`` that the worker, harness and decision tests share."""

from __future__ import annotations

from rabbitry.policies.retry import Backoff, RetryPolicy
from rabbitry.topology.patterns.retries import QueueRetry


def work_retry(*tiers_ms: int, never_retry: tuple[str, ...] = ()) -> QueueRetry:
    """Three attempts of queue ``work`` through one retry queue per tier
    (``work.retry.<seconds>s``), then its parking lot ``work.parking``."""
    return QueueRetry(
        queue="work",
        policy=RetryPolicy(attempts=3, backoff=Backoff(tiers_ms=tiers_ms), never_retry=never_retry),
        parking_queue="work.parking",
        tier_queues={ms: f"work.retry.{ms // 1000}s" for ms in tiers_ms},
    )
