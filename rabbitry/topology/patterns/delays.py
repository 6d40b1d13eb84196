"""Delays (``vhosts[].delays``), plugin-free: a few spec lines, expanded into TTL levels.

- binary: level k is a topic exchange and a queue ``<name>.<kk>`` whose TTL is ``unit * 2**k``
  (with ``lanes`` L > 1, L queues ``<name>.<kk>.<lane>``, each bound with its lane word);
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
- a marker exchange ``<name>.layout.<fingerprint>``: its name says which layout the levels
  have, so a publisher or worker can check over AMQP alone that its spec's routing keys fit the
  broker's levels, and the planner can tell a relayout. A binary delay's messages enter through
  it (a topic exchange bound to each level's exchange by "highest set bit" and to the delivery
  exchange by "no bit set"): deleted by a relayout, it turns a publish keyed for the old layout
  into a NOT_FOUND error. A fixed delay's mark is a fanout nothing is bound to (its keys name a
  level by index, which no relayout strands).
"""

from __future__ import annotations

from rabbitry.policies.delay import (
    CLASSIC_FIXED_LEVELS_MS,
    BinaryDelays,
    DelayScheme,
    FixedDelays,
    levels_for,
)
from rabbitry.topology.patterns.draft import VhostDraft
from rabbitry.topology.patterns.queues import holding_queue, ttl_queue_arguments
from rabbitry.topology.primitives import (
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Queue,
    QueueType,
)
from rabbitry.topology.spec.model import DelaySpec, VhostSpec

DEFAULT_BINARY_LEVELS = 28


def delay_scheme(spec: DelaySpec) -> DelayScheme:
    """The encoder for one ``delays`` entry."""
    if spec.levels == "binary":
        if spec.count is not None:
            count = spec.count
        elif spec.max is not None:
            count = levels_for(spec.max, spec.unit)
        else:
            count = DEFAULT_BINARY_LEVELS
        return BinaryDelays(
            spec.name, unit_ms=spec.unit, levels=count, max_ms=spec.max, lanes=spec.lanes
        )
    levels = CLASSIC_FIXED_LEVELS_MS if spec.levels == "fixed" else tuple(spec.levels)
    return FixedDelays(spec.name, levels, round_up=spec.round == "up")


def _targets(vhost: VhostSpec, delay: DelaySpec) -> list[tuple[str, str | None, str]]:
    """(address, exchange or None for a queue, routing key) of every target, the queues
    retrying or carrying periodic jobs through it included."""
    out: dict[str, tuple[str, str | None, str]] = {}
    for target in delay.targets:
        out[target.address] = (target.address, target.exchange, target.routing_key)
    for queue in vhost.queues:
        if (queue.retry is not None and queue.retry.via == delay.name) or (
            queue.periodic == delay.name
        ):
            out.setdefault(queue.name, (queue.name, None, ""))
    return list(out.values())


def delay_addresses(vhost: VhostSpec, delay: DelaySpec) -> list[str]:
    """The addresses ``delay`` delivers to: its targets and the queues retrying via it."""
    return [address for address, _, _ in _targets(vhost, delay)]


def declare_delays(draft: VhostDraft) -> None:
    for spec in draft.spec.delays:
        scheme = delay_scheme(spec)
        qtype = QueueType(spec.queue_type)
        _declare_delivery(draft, spec, scheme, qtype)
        if isinstance(scheme, BinaryDelays):
            _declare_binary_levels(draft, scheme, qtype)
        else:
            _declare_fixed_levels(draft, scheme, qtype)
        _declare_targets(draft, spec, scheme, qtype)


def _declare_delivery(
    draft: VhostDraft, spec: DelaySpec, scheme: DelayScheme, qtype: QueueType
) -> None:
    """The delivery exchange, its parking lot for what no target takes, and the layout mark
    (a binary delay's way in: "no bit set" goes straight to delivery)."""
    deliver = scheme.delivery_exchange
    unroutable, parking = f"{spec.name}.unroutable", f"{spec.name}.parking"
    draft.exchanges.append(
        Exchange(
            name=deliver, type=ExchangeType.TOPIC, arguments={"alternate-exchange": unroutable}
        )
    )
    draft.exchanges.append(Exchange(name=unroutable, type=ExchangeType.FANOUT))
    mark = scheme.layout_exchange
    if isinstance(scheme, BinaryDelays):
        draft.exchanges.append(Exchange(name=mark, type=ExchangeType.TOPIC))
        draft.bindings.append(_exchange_binding(mark, deliver, scheme.no_delay_pattern))
    else:
        draft.exchanges.append(Exchange(name=mark, type=ExchangeType.FANOUT, internal=True))
    draft.queues.append(holding_queue(parking, qtype))
    draft.bindings.append(Binding(source=unroutable, destination=parking))


def _declare_binary_levels(draft: VhostDraft, scheme: BinaryDelays, qtype: QueueType) -> None:
    """Level k: an exchange and a queue of TTL ``unit * 2**k`` per lane, dead-lettering one
    level down (level 0 into delivery); "bit k set" waits in its lane's queue, "bit k clear"
    skips the level."""
    for level in range(scheme.levels):
        name = scheme.level_exchange(level)
        below = scheme.level_exchange(level - 1) if level else scheme.delivery_exchange
        arguments = ttl_queue_arguments(qtype.value, scheme.level_ttl_ms(level), below)
        draft.exchanges.append(Exchange(name=name, type=ExchangeType.TOPIC))
        for lane, queue in enumerate(scheme.level_queues(level)):
            draft.queues.append(Queue(name=queue, type=qtype, arguments=arguments))
            pattern = scheme.queue_pattern(level, lane)
            draft.bindings.append(Binding(source=name, destination=queue, routing_key=pattern))
        draft.bindings.append(_exchange_binding(name, below, scheme.skip_pattern(level)))
        entry = scheme.entry_pattern(level)
        draft.bindings.append(_exchange_binding(scheme.layout_exchange, name, entry))


def _declare_fixed_levels(draft: VhostDraft, scheme: FixedDelays, qtype: QueueType) -> None:
    """One TTL queue per level behind the entry exchange, each dead-lettering into delivery."""
    draft.exchanges.append(Exchange(name=scheme.entry_exchange, type=ExchangeType.TOPIC))
    for index, ttl in enumerate(scheme.levels_ms):
        queue = scheme.level_queue(index)
        arguments = ttl_queue_arguments(qtype.value, ttl, scheme.delivery_exchange)
        draft.queues.append(Queue(name=queue, type=qtype, arguments=arguments))
        draft.bindings.append(
            Binding(
                source=scheme.entry_exchange,
                destination=queue,
                routing_key=scheme.queue_pattern(index),
            )
        )


def _declare_targets(
    draft: VhostDraft, spec: DelaySpec, scheme: DelayScheme, qtype: QueueType
) -> None:
    """Each target bound on delivery by its address: a queue directly, an exchange through a
    landing queue."""
    deliver = scheme.delivery_exchange
    for address, exchange, routing_key in _targets(draft.spec, spec):
        pattern = scheme.delivery_pattern(address)
        if exchange is None:
            draft.bindings.append(Binding(source=deliver, destination=address, routing_key=pattern))
            continue
        # A routing key cannot be rewritten in flight except by dead-lettering: land the
        # message in a TTL-0 queue that dead-letters to the exchange with the target's key.
        landing = f"{spec.name}.to.{address}"
        arguments = ttl_queue_arguments(qtype.value, 0, exchange, routing_key)
        draft.queues.append(Queue(name=landing, type=qtype, arguments=arguments))
        draft.bindings.append(Binding(source=deliver, destination=landing, routing_key=pattern))


def _exchange_binding(source: str, destination: str, routing_key: str) -> Binding:
    return Binding(
        source=source,
        destination=destination,
        destination_type=DestinationType.EXCHANGE,
        routing_key=routing_key,
    )
