"""The queues both patterns declare: TTL queues that dead-letter onward, and holding queues.

A delay level and a retry tier are the same thing to the broker: a queue whose per-queue TTL
dead-letters every message, in arrival order, to the next hop. Parking lots and dead-letter
queues hold what nothing will consume automatically, however often it is inspected.
"""

from __future__ import annotations

from rabbitry.topology.primitives import JSON, Queue, QueueType

PARKING_DELIVERY_LIMIT = 1_000_000
"""Quorum parking lots and dead-letter queues: deliveries before the broker drops a message.

Looking at a parking lot (``rabbitry dlq show``) returns what it read, and from RabbitMQ 4.0 a
quorum queue without a limit gets 20, counting returns until 4.3: a parking lot looked at 20
times would drop messages. A limit no inspection reaches, valid on 3.10 too (-1 is 4.0+)."""


def holding_queue(name: str, queue_type: QueueType) -> Queue:
    """A parking lot or dead-letter queue: keeps messages however often they are inspected."""
    arguments: dict[str, JSON] = {}
    if queue_type is QueueType.QUORUM:
        arguments["x-delivery-limit"] = PARKING_DELIVERY_LIMIT
    return Queue(name=name, type=queue_type, arguments=arguments)


def ttl_queue_arguments(
    queue_type: str, ttl_ms: int, dlx: str, dl_key: str | None = None
) -> dict[str, JSON]:
    """Arguments of a queue that holds each message ``ttl_ms``, then dead-letters it to ``dlx``."""
    arguments: dict[str, JSON] = {"x-message-ttl": ttl_ms, "x-dead-letter-exchange": dlx}
    if dl_key is not None:
        arguments["x-dead-letter-routing-key"] = dl_key
    if queue_type == QueueType.QUORUM.value:
        # At-least-once dead-lettering keeps a message in the source queue until the target
        # confirms it; it needs reject-publish overflow (else the broker silently falls back).
        arguments["x-dead-letter-strategy"] = "at-least-once"
        arguments["x-overflow"] = "reject-publish"
    return arguments
