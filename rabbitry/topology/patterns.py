"""Delay and retry patterns: a few spec lines, expanded into the objects that make them work.

Delays (``vhosts[].delays``), plugin-free:
- binary: level k is a topic exchange and a queue ``<name>.<kk>`` whose TTL is ``unit * 2**k``;
  the queue is bound with "bit k set", the exchange to the next level down with "bit k clear",
  and each level queue dead-letters into the next level's exchange (level 0 into
  ``<name>.deliver``). Every message in a queue has the same TTL, so nothing waits behind a
  longer delay. See ``rabbitry.policies.delay`` for the routing keys.
- fixed: one TTL queue per level behind a topic exchange ``<name>``.
- both: targets are bound on ``<name>.deliver`` by address; a queue target directly, an exchange
  target through a landing queue (TTL 0) that dead-letters with the target's routing key. What
  reaches ``<name>.deliver`` for no target goes, through its alternate exchange
  ``<name>.unroutable``, to ``<name>.parking``: never dropped, never wedging a level queue.
  Quorum levels dead-letter at-least-once (``x-overflow: reject-publish``), so a delayed message
  survives losing a node.

Retries (``queues[].retry``): the worker decides (``rabbitry.policies.retry``) and republishes
with confirms, then acks. ``via: queues`` declares one TTL queue per distinct tier for this queue,
``<queue>.retry.<delay>``, dead-lettering back into the queue through the default exchange: per
queue rather than shared per vhost, so a backlog of one queue's retries never delays another
queue's, and deleting a queue's spec removes its tiers with it. ``via: <delay>`` sends retries
through that delay's levels instead (exact per-message delays, jitter included). Exhausted and
never-retried messages go to the parking lot ``<queue>.parking``; what the broker dead-letters
(rejects, the quorum delivery limit) goes there too unless ``dead_letter`` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rabbitry.errors import SpecError
from rabbitry.policies.delay import (
    CLASSIC_FIXED_LEVELS_MS,
    BinaryDelays,
    DelayScheme,
    FixedDelays,
    levels_for,
)
from rabbitry.policies.retry import Backoff, RetryPolicy, distinct_tiers
from rabbitry.topology.draft import VhostDraft
from rabbitry.topology.primitives import (
    JSON,
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Queue,
    QueueType,
)
from rabbitry.topology.spec import DelaySpec, QueueSpec, RetrySpec, VhostSpec

DEFAULT_BINARY_LEVELS = 28
VIA_QUEUES = "queues"


def duration_label(ms: int) -> str:
    """A name-friendly duration: 250ms, 10s, 5m, 2h, 3d."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def delay_scheme(spec: DelaySpec) -> DelayScheme:
    """The encoder for one ``delays`` entry."""
    if spec.levels == "binary":
        if spec.count is not None:
            count = spec.count
        elif spec.max is not None:
            count = levels_for(spec.max, spec.unit)
        else:
            count = DEFAULT_BINARY_LEVELS
        return BinaryDelays(spec.name, unit_ms=spec.unit, levels=count, max_ms=spec.max)
    levels = CLASSIC_FIXED_LEVELS_MS if spec.levels == "fixed" else tuple(spec.levels)
    return FixedDelays(spec.name, levels, round_up=spec.round == "up")


def backoff_of(spec: RetrySpec) -> Backoff:
    if isinstance(spec.backoff, list):
        return Backoff(tiers_ms=tuple(spec.backoff))
    b = spec.backoff
    return Backoff(initial_ms=b.initial, multiplier=b.multiplier, max_ms=b.max, jitter=b.jitter)


def retry_policy(spec: RetrySpec) -> RetryPolicy:
    return RetryPolicy(
        attempts=spec.attempts, backoff=backoff_of(spec), never_retry=tuple(spec.never_retry)
    )


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

    def tier_queue(self, delay_ms: int) -> str:
        """The TTL queue for a scheduled delay (only exact tiers exist: no jitter via queues)."""
        return self.tier_queues[delay_ms]


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
    if queue.retry.via == VIA_QUEUES:
        tiers = {
            delay: f"{queue.name}.retry.{duration_label(delay)}"
            for delay in tier_delays(queue.retry)
        }
        return QueueRetry(queue.name, policy, parking, tiers)
    delay = next((d for d in vhost.delays if d.name == queue.retry.via), None)
    if delay is None:
        raise SpecError(
            f"queue {queue.name!r} retries via {queue.retry.via!r}, which is not a delay of"
            f" vhost {vhost.name!r}"
        )
    return QueueRetry(queue.name, policy, parking, delay=delay_scheme(delay))


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


def _level_arguments(
    queue_type: str, ttl_ms: int, dlx: str, dl_key: str | None = None
) -> dict[str, JSON]:
    arguments: dict[str, JSON] = {"x-message-ttl": ttl_ms, "x-dead-letter-exchange": dlx}
    if dl_key is not None:
        arguments["x-dead-letter-routing-key"] = dl_key
    if queue_type == QueueType.QUORUM.value:
        # At-least-once dead-lettering keeps a message in the source queue until the target
        # confirms it; it needs reject-publish overflow (else the broker silently falls back).
        arguments["x-dead-letter-strategy"] = "at-least-once"
        arguments["x-overflow"] = "reject-publish"
    return arguments


def _targets(vhost: VhostSpec, delay: DelaySpec) -> list[tuple[str, str | None, str]]:
    """(address, exchange or None for a queue, routing key) of every target, retries included."""
    out: dict[str, tuple[str, str | None, str]] = {}
    for target in delay.targets:
        out[target.address] = (target.address, target.exchange, target.routing_key)
    for queue in vhost.queues:
        if queue.retry is not None and queue.retry.via == delay.name:
            out.setdefault(queue.name, (queue.name, None, ""))
    return list(out.values())


def delay_addresses(vhost: VhostSpec, delay: DelaySpec) -> list[str]:
    """The addresses ``delay`` delivers to: its targets and the queues retrying via it."""
    return [address for address, _, _ in _targets(vhost, delay)]


def declare_delays(draft: VhostDraft) -> None:
    for spec in draft.spec.delays:
        scheme = delay_scheme(spec)
        qtype = QueueType(spec.queue_type)
        deliver, unroutable, parking = (
            scheme.delivery_exchange,
            f"{spec.name}.unroutable",
            f"{spec.name}.parking",
        )
        draft.exchanges.append(
            Exchange(
                name=deliver, type=ExchangeType.TOPIC, arguments={"alternate-exchange": unroutable}
            )
        )
        draft.exchanges.append(Exchange(name=unroutable, type=ExchangeType.FANOUT))
        draft.queues.append(holding_queue(parking, qtype))
        draft.bindings.append(Binding(source=unroutable, destination=parking))

        if isinstance(scheme, BinaryDelays):
            for level in range(scheme.levels):
                name = scheme.level_exchange(level)
                below = scheme.level_exchange(level - 1) if level else deliver
                draft.exchanges.append(Exchange(name=name, type=ExchangeType.TOPIC))
                draft.queues.append(
                    Queue(
                        name=scheme.level_queue(level),
                        type=qtype,
                        arguments=_level_arguments(qtype.value, scheme.level_ttl_ms(level), below),
                    )
                )
                draft.bindings.append(
                    Binding(
                        source=name,
                        destination=scheme.level_queue(level),
                        routing_key=scheme.queue_pattern(level),
                    )
                )
                draft.bindings.append(
                    Binding(
                        source=name,
                        destination=below,
                        destination_type=DestinationType.EXCHANGE,
                        routing_key=scheme.skip_pattern(level),
                    )
                )
        else:
            draft.exchanges.append(Exchange(name=scheme.entry_exchange, type=ExchangeType.TOPIC))
            for index, ttl in enumerate(scheme.levels_ms):
                draft.queues.append(
                    Queue(
                        name=scheme.level_queue(index),
                        type=qtype,
                        arguments=_level_arguments(qtype.value, ttl, deliver),
                    )
                )
                draft.bindings.append(
                    Binding(
                        source=scheme.entry_exchange,
                        destination=scheme.level_queue(index),
                        routing_key=scheme.queue_pattern(index),
                    )
                )

        for address, exchange, routing_key in _targets(draft.spec, spec):
            if exchange is None:
                draft.bindings.append(
                    Binding(
                        source=deliver,
                        destination=address,
                        routing_key=scheme.delivery_pattern(address),
                    )
                )
                continue
            # A routing key cannot be rewritten in flight except by dead-lettering: land the
            # message in a TTL-0 queue that dead-letters to the exchange with the target's key.
            landing = f"{spec.name}.to.{address}"
            draft.queues.append(
                Queue(
                    name=landing,
                    type=qtype,
                    arguments=_level_arguments(qtype.value, 0, exchange, routing_key),
                )
            )
            draft.bindings.append(
                Binding(
                    source=deliver,
                    destination=landing,
                    routing_key=scheme.delivery_pattern(address),
                )
            )


def declare_retries(draft: VhostDraft) -> None:
    by_name = {q.name: i for i, q in enumerate(draft.queues)}
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
        if extra:
            draft.queues[index] = work.model_copy(update={"arguments": {**work.arguments, **extra}})

        declared = set(by_name) | {q.name for q in draft.queues}
        for name in (parking_queue_of(spec), dead):
            if name is not None and name not in declared:
                draft.queues.append(holding_queue(name, work.type))
                declared.add(name)

        retry = queue_retry(draft.spec, spec)
        if retry is None:
            continue
        for delay_ms, tier in retry.tier_queues.items():
            draft.queues.append(
                Queue(
                    name=tier,
                    type=work.type,
                    arguments=_level_arguments(work.type.value, delay_ms, "", spec.name),
                )
            )


PATTERN_STEPS = (declare_delays, declare_retries)
"""Appended to the base expansion steps: they refer to the objects declared before them."""
