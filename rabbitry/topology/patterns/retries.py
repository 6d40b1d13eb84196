"""Retries (``queues[].retry``): tier queues, parking lots and dead-lettering of a work queue.

The worker decides (``rabbitry.policies.retry``) and republishes with confirms, then acks.
``via: queues`` declares one TTL queue per distinct tier for this queue,
``<queue>.retry.<delay>``, dead-lettering back into the queue through the default exchange: per
queue rather than shared per vhost, so a backlog of one queue's retries never delays another
queue's, and deleting a queue's spec removes its tiers with it. ``via: <delay>`` sends retries
through that delay's levels instead (exact per-message delays, jitter included). Exhausted and
never-retried messages go to the parking lot ``<queue>.parking``; what the broker dead-letters
(rejects, the quorum delivery limit) goes there too unless ``dead_letter`` says otherwise.
``retry.faults`` declares the topic exchange a worker announces each parked message on.

``via: broker`` declares no tier queue: a quorum queue of RabbitMQ 4.3+ holds a message the
worker returns as failed (basic.reject with requeue) for x-delayed-retry-min x its failed
deliveries, at most x-delayed-retry-max, and dead-letters it to the parking lot past
x-delivery-limit. That limit counts failed deliveries after the first, so it is
``attempts - 1``. The broker's delay is linear, so the back-off is mapped onto it
(``BrokerRetry.of``): fixed tiers only when they are such a ramp (the checks refuse others),
an exponential by its first delay and its longest one within the attempts.
"""

from __future__ import annotations

from rabbitry.errors import SpecError
from rabbitry.policies.retry import distinct_tiers
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.draft import VhostDraft
from rabbitry.topology.patterns.queues import holding_queue, ttl_queue_arguments
from rabbitry.topology.patterns.retry_setup import (
    BROKER_RETRY_ARGUMENTS,
    DELAYED_RETRY_TYPE,
    VIA_BROKER,
    VIA_QUEUES,
    BrokerRetry,
    QueueRetry,
    backoff_of,
    duration_label,
    retry_policy,
)
from rabbitry.topology.primitives import JSON, Exchange, ExchangeType, Queue, QueueType
from rabbitry.topology.spec.model import QueueSpec, RetrySpec, VhostSpec

__all__ = [
    "BROKER_RETRY_ARGUMENTS",
    "DELAYED_RETRY_TYPE",
    "VIA_BROKER",
    "VIA_QUEUES",
    "BrokerRetry",
    "QueueRetry",
    "backoff_of",
    "dead_letter_queue_of",
    "declare_fault_exchange",
    "declare_retries",
    "linear_problem",
    "parking_queue_of",
    "queue_retry",
    "retry_policy",
    "tier_delays",
]


def linear_problem(spec: RetrySpec) -> str | None:
    """How the broker's delays differ from ``spec``'s back-off (None: they are the same)."""
    broker = BrokerRetry.of(spec)
    wanted = backoff_of(spec).schedule_ms(spec.attempts - 1)
    got = broker.schedule_ms()
    if wanted == got:
        return None
    shown = ", ".join(duration_label(d) for d in got)
    return (
        f"the broker waits x-delayed-retry-min x the failed deliveries, up to"
        f" x-delayed-retry-max: retries would wait {shown}, not"
        f" {', '.join(duration_label(d) for d in wanted)}"
    )


def parking_queue_of(queue: QueueSpec) -> str | None:
    if queue.parking is False:
        return None
    if isinstance(queue.parking, str):
        return queue.parking
    if queue.parking is True or queue.retry is not None:
        return f"{queue.name}.parking"
    return None


def dead_letter_queue_of(queue: QueueSpec) -> str | None:
    """The queue the broker dead-letters into, by the ``dead_letter`` rules."""
    choice = queue.dead_letter
    if choice is False:
        return None
    if choice is None or choice == "parking":
        parking = parking_queue_of(queue)
        if choice == "parking" or parking is not None:
            return parking
        return None
    if choice is True:
        return f"{queue.name}.dead"
    return str(choice)


def tier_delays(spec: RetrySpec) -> list[int]:
    return distinct_tiers(backoff_of(spec).schedule_ms(max(0, spec.attempts - 1)))


def queue_retry(vhost: VhostSpec, queue: QueueSpec) -> QueueRetry | None:
    """The resolved retry set-up of ``queue`` (None when it does not retry)."""
    if queue.retry is None:
        return None
    parking = parking_queue_of(queue) or f"{queue.name}.parking"
    policy = retry_policy(queue.retry)
    faults = queue.retry.faults.exchange if queue.retry.faults is not None else None
    if queue.retry.via == VIA_QUEUES:
        tiers = {
            delay: f"{queue.name}.retry.{duration_label(delay)}"
            for delay in tier_delays(queue.retry)
        }
        return QueueRetry(queue.name, policy, parking, tiers, fault_exchange=faults)
    if queue.retry.via == VIA_BROKER:
        return QueueRetry(
            queue.name, policy, parking, broker=BrokerRetry.of(queue.retry), fault_exchange=faults
        )
    delay = next((d for d in vhost.delays if d.name == queue.retry.via), None)
    if delay is None:
        raise SpecError(
            f"queue {queue.name!r} retries via {queue.retry.via!r}, which is not a delay of"
            f" vhost {vhost.name!r}"
        )
    return QueueRetry(queue.name, policy, parking, delay=delay_scheme(delay), fault_exchange=faults)


def declare_retries(draft: VhostDraft) -> None:
    by_name = {q.name: i for i, q in enumerate(draft.queues)}
    # one set for the whole vhost, kept up to date: building it per queue was quadratic
    declared = {q.name for q in draft.queues}
    for spec in draft.spec.queues:
        index = by_name.get(spec.name)
        if index is None:
            continue
        work = draft.queues[index]
        extra: dict[str, JSON] = {}
        dead = dead_letter_queue_of(spec)
        if dead is not None:
            extra["x-dead-letter-exchange"] = ""  # the default exchange routes by queue name
            extra["x-dead-letter-routing-key"] = dead
            if work.type is QueueType.QUORUM:
                extra["x-dead-letter-strategy"] = "at-least-once"
                extra["x-overflow"] = "reject-publish"
        if spec.delivery_limit is not None:
            extra["x-delivery-limit"] = spec.delivery_limit
        if spec.retry is not None and spec.retry.via == VIA_BROKER:
            extra.update(BrokerRetry.of(spec.retry).arguments())
            draft.retried_by_broker.append(spec.name)
        if extra:
            draft.queues[index] = work.model_copy(update={"arguments": {**work.arguments, **extra}})

        for name in (parking_queue_of(spec), dead):
            if name is not None and name not in declared:
                draft.queues.append(holding_queue(name, work.type))
                declared.add(name)

        retry = queue_retry(draft.spec, spec)
        if retry is None:
            continue
        declare_fault_exchange(draft, retry.fault_exchange)
        for delay_ms, tier in retry.tier_queues.items():
            declared.add(tier)
            draft.queues.append(
                Queue(
                    name=tier,
                    type=work.type,
                    arguments=ttl_queue_arguments(work.type.value, delay_ms, "", spec.name),
                )
            )


def declare_fault_exchange(draft: VhostDraft, name: str | None) -> None:
    """The topic exchange fault events go to (``retry.faults``), once per vhost; one the spec
    declares itself is left as declared."""
    if name is None or any(e.name == name for e in draft.exchanges):
        return
    draft.exchanges.append(Exchange(name=name, type=ExchangeType.TOPIC))
