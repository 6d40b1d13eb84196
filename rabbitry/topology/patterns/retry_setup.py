"""The retry set-up of one queue as a worker reads it: ``QueueRetry`` (policy, tier queues or
delay levels, parking lot) and ``BrokerRetry`` (``via: broker``).

Plain values over ``policies``: a worker holds them for every queue it consumes, so this module
loads neither the spec model nor pydantic (``retries`` resolves them from the spec, and
re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rabbitry.policies.delay import DelayScheme
from rabbitry.policies.retry import Backoff, ImmediateRetry, RetryPolicy

if TYPE_CHECKING:
    from rabbitry.topology.spec.model import RetrySpec

VIA_QUEUES = "queues"
VIA_BROKER = "broker"
DELAYED_RETRY_TYPE = "failed"
"""Only failed returns (basic.reject with requeue) wait: a message returned because its
consumer went away (basic.nack, a closed channel) comes back at once and is not counted."""
BROKER_RETRY_ARGUMENTS = (
    "x-delivery-limit",
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
)
"""The queue arguments ``via: broker`` sets from ``retry``."""


def duration_label(ms: int) -> str:
    """A name-friendly duration: 250ms, 10s, 5m, 2h, 3d (tier queues, delay levels, and the
    counter label of a worker's retry)."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def backoff_of(spec: RetrySpec) -> Backoff:
    if isinstance(spec.backoff, list):
        return Backoff(tiers_ms=tuple(spec.backoff))
    b = spec.backoff
    return Backoff(initial_ms=b.initial, multiplier=b.multiplier, max_ms=b.max, jitter=b.jitter)


def retry_policy(spec: RetrySpec) -> RetryPolicy:
    immediate = spec.immediate
    return RetryPolicy(
        attempts=spec.attempts,
        backoff=backoff_of(spec),
        never_retry=tuple(spec.never_retry),
        retry_on=tuple(spec.retry_on),
        immediate=None
        if immediate is None
        else ImmediateRetry(attempts=immediate.attempts, pause_ms=immediate.pause),
    )


@dataclass(frozen=True)
class BrokerRetry:
    """The broker's delayed retry of one quorum queue (``via: broker``, RabbitMQ 4.3+)."""

    min_ms: int
    """x-delayed-retry-min: the delay before the first retry, and its step."""
    max_ms: int
    """x-delayed-retry-max: the longest delay."""
    delivery_limit: int
    """x-delivery-limit: failed deliveries after the first before the broker dead-letters."""

    @classmethod
    def of(cls, spec: RetrySpec) -> BrokerRetry:
        """The closest the broker comes to ``spec``'s back-off: its first delay as the step,
        its longest within the attempts as the cap (``linear_problem`` says when that is not
        the back-off written). Total: a delay of 0 becomes 1 ms, which the broker needs."""
        backoff = backoff_of(spec)
        retries = spec.attempts - 1
        schedule = backoff.schedule_ms(retries) or [backoff.base_delay_ms(1)]
        step = max(1, schedule[0])
        return cls(step, max(step, *schedule), retries)

    def delay_ms(self, retry: int) -> int:
        """The broker's delay before retry ``retry`` (1-based)."""
        return min(self.min_ms * retry, self.max_ms)

    def schedule_ms(self) -> list[int]:
        return [self.delay_ms(n) for n in range(1, self.delivery_limit + 1)]

    def arguments(self) -> dict[str, Any]:
        return {
            "x-delivery-limit": self.delivery_limit,
            "x-delayed-retry-type": DELAYED_RETRY_TYPE,
            "x-delayed-retry-min": self.min_ms,
            "x-delayed-retry-max": self.max_ms,
        }


@dataclass(frozen=True)
class QueueRetry:
    """Everything a worker needs to retry and park messages of one queue."""

    queue: str
    policy: RetryPolicy
    parking_queue: str
    tier_queues: dict[int, str] = field(default_factory=dict)
    """Delay in ms -> TTL queue (``via: queues``); empty when retrying through a delay."""
    delay: DelayScheme | None = None
    """The delay levels retries go through (``via: <delay>``)."""
    broker: BrokerRetry | None = None
    """The queue's own delayed retry (``via: broker``): failed messages go back to it."""
    fault_exchange: str | None = None
    """Where a fault event goes when a message is parked (``retry.faults.exchange``)."""

    def tier_queue(self, delay_ms: int) -> str:
        """The TTL queue for a scheduled delay (only exact tiers exist: no jitter via queues)."""
        return self.tier_queues[delay_ms]
