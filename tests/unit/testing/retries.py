"""The retry ladders the harness and scripted-broker tests give their handlers' queues."""

from __future__ import annotations

from rabbitry.policies.retry import Backoff, RetryPolicy
from rabbitry.topology.patterns.retries import QueueRetry


def queue_retry(
    queue: str = "work", *tiers_ms: int, attempts: int = 3, never_retry: tuple[str, ...] = ()
) -> QueueRetry:
    """``queue`` retried ``attempts`` times through a tier queue a delay (``work.retry.1s``
    for 1000 ms, default 1 s and 5 s), parked in ``<queue>.parking``."""
    tiers = tiers_ms or (1000, 5000)
    return QueueRetry(
        queue=queue,
        policy=RetryPolicy(
            attempts=attempts, backoff=Backoff(tiers_ms=tiers), never_retry=never_retry
        ),
        parking_queue=f"{queue}.parking",
        tier_queues={ms: f"{queue}.retry.{ms // 1000}s" for ms in tiers},
    )
