"""Sharding: one declaration read by the provisioner, the publisher and the worker alike.

Consistent hash (``vhosts[].sharded_exchanges``): an ``x-consistent-hash`` exchange and N shard
queues declared from one queue template, each bound with its weight as the binding key. The
broker hashes the routing key (or ``hash-header`` / ``hash-property``) onto buckets, a shard of
weight w owning w of them, so a key always reaches one shard while the shards stay the same.
Each shard queue is a full queue of the spec: retry tiers, parking lots and dead-lettering
expand per shard exactly as for ``queues`` entries.

Modulus (``vhosts[].modulus_sharding``): an ``x-modulus-hash`` exchange plus the sharding
plugin's policy; the plugin declares the shard queues itself, on every node, named
``sharding: <exchange> - <node> - <n>``. Those queues belong to the plugin: the provisioner
reads past them (``plugin_objects``) and never plans, records or prunes them.

The broker's choice of shard is ``erlang:phash2`` over jump consistent hashing, which Python
does not reproduce bit for bit; ``rabbitry shards check`` measures the spread on the broker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rabbitry.errors import SpecError
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.draft import VhostDraft
from rabbitry.topology.patterns.retries import VIA_BROKER, VIA_QUEUES, declare_retries
from rabbitry.topology.primitives import (
    JSON,
    ApplyTo,
    Binding,
    Exchange,
    ExchangeType,
    Policy,
    Queue,
)
from rabbitry.topology.spec.model import (
    ModulusShardingSpec,
    QueueSpec,
    ShardedExchangeSpec,
    Spec,
    VhostSpec,
)

__all__ = [
    "PLUGIN_SHARD_QUEUE_PREFIX",
    "HashSource",
    "ShardRoute",
    "Sharding",
    "declare_modulus_sharding",
    "declare_sharded_exchanges",
    "is_plugin_shard_queue",
    "modulus_policy_name",
    "plugin_shard_queue",
    "shard_queue_specs",
    "sharding_of",
    "shardings",
]

PLUGIN_SHARD_QUEUE_PREFIX = "sharding: "
"""How the rabbitmq_sharding plugin starts the names of the queues it declares."""


def plugin_shard_queue(exchange: str, node: str, index: int) -> str:
    """The name the sharding plugin gives shard ``index`` of ``exchange`` on ``node``."""
    return f"{PLUGIN_SHARD_QUEUE_PREFIX}{exchange} - {node} - {index}"


def is_plugin_shard_queue(name: str) -> bool:
    """Whether the sharding plugin declared this queue (rabbitry leaves those alone)."""
    return name.startswith(PLUGIN_SHARD_QUEUE_PREFIX)


def modulus_policy_name(spec: ModulusShardingSpec) -> str:
    return spec.policy or f"{spec.name}.sharding"


class HashSource(enum.StrEnum):
    """What the consistent-hash exchange hashes."""

    ROUTING_KEY = "routing_key"
    HEADER = "header"
    PROPERTY = "property"


@dataclass(frozen=True)
class ShardRoute:
    """How to publish a message so that the exchange hashes ``key``."""

    exchange: str
    routing_key: str
    headers: dict[str, str]
    properties: dict[str, str]
    """Message properties by pika's names (message_id, correlation_id)."""


@dataclass(frozen=True)
class Sharding:
    """A resolved consistent-hash sharding: where to publish, what is hashed, which queues."""

    exchange: str
    queues: tuple[str, ...]
    """Shard queues in index order: what a worker consumes to consume "all shards"."""
    weights: tuple[int, ...]
    source: HashSource = HashSource.ROUTING_KEY
    field: str | None = None
    """The header or property name for HEADER / PROPERTY sources."""

    @property
    def shares(self) -> dict[str, Fraction]:
        """The share of keys each shard is expected to get (its weight over the total)."""
        total = sum(self.weights)
        return {q: Fraction(w, total) for q, w in zip(self.queues, self.weights, strict=True)}

    def route(self, key: str) -> ShardRoute:
        """Publish arguments that make the exchange hash ``key`` (the publisher's shard key)."""
        if self.source is HashSource.HEADER:
            assert self.field is not None
            return ShardRoute(self.exchange, "", {self.field: key}, {})
        if self.source is HashSource.PROPERTY:
            assert self.field is not None
            return ShardRoute(self.exchange, "", {}, {self.field: key})
        return ShardRoute(self.exchange, key, {}, {})


def _weights(spec: ShardedExchangeSpec) -> tuple[int, ...]:
    if spec.weights is not None:
        return tuple(spec.weights)
    return (1,) * (spec.shards or 0)


def shard_queue_name(spec: ShardedExchangeSpec, index: int) -> str:
    return spec.queue_name.format(exchange=spec.name, index=index)


def resolve(spec: ShardedExchangeSpec) -> Sharding:
    """The resolved sharding of one ``sharded_exchanges`` entry."""
    weights = _weights(spec)
    queues = tuple(shard_queue_name(spec, i) for i in range(len(weights)))
    if spec.hash_header is not None:
        return Sharding(spec.name, queues, weights, HashSource.HEADER, spec.hash_header)
    if spec.hash_property is not None:
        return Sharding(spec.name, queues, weights, HashSource.PROPERTY, spec.hash_property)
    return Sharding(spec.name, queues, weights)


def shardings(vhost: VhostSpec) -> list[Sharding]:
    """Every consistent-hash sharding of a vhost."""
    return [resolve(s) for s in vhost.sharded_exchanges]


def sharding_of(spec: Spec, exchange: str, vhost: str | None = None) -> Sharding:
    """The sharding behind ``exchange`` (in ``vhost``, or the only vhost that has it)."""
    found = [
        (v.name, s)
        for v in spec.vhosts
        if vhost is None or v.name == vhost
        for s in v.sharded_exchanges
        if s.name == exchange
    ]
    if not found:
        raise SpecError(f"no sharded exchange {exchange!r} in the spec")
    if len(found) > 1:
        raise SpecError(f"sharded exchange {exchange!r} is in several vhosts: name the vhost")
    return resolve(found[0][1])


def shard_queue_specs(spec: ShardedExchangeSpec) -> list[QueueSpec]:
    """Each shard as a ``queues`` entry: what retry resolution (``queue_retry``) reads."""
    template: dict[str, Any] = {
        name: getattr(spec.queue, name) for name in spec.queue.model_fields_set
    }
    return [
        QueueSpec.model_validate({**template, "name": shard_queue_name(spec, index)})
        for index in range(len(_weights(spec)))
    ]


def _exchange_arguments(spec: ShardedExchangeSpec) -> dict[str, JSON]:
    if spec.hash_header is not None:
        return {"hash-header": spec.hash_header}
    if spec.hash_property is not None:
        return {"hash-property": spec.hash_property}
    return {}


def declare_sharded_exchanges(draft: VhostDraft) -> None:
    """The exchange, the weighted bindings and each shard queue with its retry set-up."""
    for spec in draft.spec.sharded_exchanges:
        sharding = resolve(spec)
        draft.exchanges.append(
            Exchange(
                name=spec.name,
                type=ExchangeType.CONSISTENT_HASH,
                arguments=_exchange_arguments(spec),
            )
        )
        queue_specs = shard_queue_specs(spec)
        # The shards go through the same retry/dead-letter step as declared queues, on a
        # draft of their own so the vhost's queues are not expanded twice.
        shard_draft = VhostDraft(
            stack=draft.stack, spec=draft.spec.model_copy(update={"queues": queue_specs})
        )
        for queue_spec in queue_specs:
            shard_draft.queues.append(
                Queue(
                    name=queue_spec.name,
                    type=queue_spec.type or draft.default_queue_type,
                    durable=queue_spec.durable,
                    arguments={
                        **queue_spec.arguments.as_broker_dict(),
                        **queue_spec.unchecked_arguments,
                    },
                )
            )
        declare_retries(shard_draft)
        draft.retried_by_broker.extend(shard_draft.retried_by_broker)
        present = {q.name for q in draft.queues}
        for queue in shard_draft.queues:
            if queue.name not in present:  # a parking lot shared by every shard, once
                draft.queues.append(queue)
                present.add(queue.name)
        for shard, weight in zip(sharding.queues, sharding.weights, strict=True):
            draft.bindings.append(
                Binding(source=spec.name, destination=shard, routing_key=str(weight))
            )
        retry = spec.queue.retry
        if retry is not None and retry.via not in (VIA_QUEUES, VIA_BROKER):
            delay = next((d for d in draft.spec.delays if d.name == retry.via), None)
            if delay is None:
                raise SpecError(
                    f"sharded exchange {spec.name!r} retries via {retry.via!r}, which is not a"
                    f" delay of vhost {draft.spec.name!r}"
                )
            scheme = delay_scheme(delay)
            for shard in sharding.queues:
                draft.bindings.append(
                    Binding(
                        source=scheme.delivery_exchange,
                        destination=shard,
                        routing_key=scheme.delivery_pattern(shard),
                    )
                )


def declare_modulus_sharding(draft: VhostDraft) -> None:
    """The x-modulus-hash exchange and the policy; the plugin declares the queues."""
    for spec in draft.spec.modulus_sharding:
        draft.exchanges.append(Exchange(name=spec.name, type=ExchangeType.MODULUS_HASH))
        definition: dict[str, JSON] = {"shards-per-node": spec.shards_per_node}
        if spec.routing_key is not None:
            definition["routing-key"] = spec.routing_key
        draft.policies.append(
            Policy(
                name=modulus_policy_name(spec),
                pattern=f"^{_regex_escape(spec.name)}$",
                apply_to=ApplyTo.EXCHANGES,
                priority=spec.priority,
                definition=definition,
            )
        )


def _regex_escape(name: str) -> str:
    # The broker's regexes are PCRE: escape metacharacters only (re.escape also escapes '-').
    return "".join(f"\\{c}" if c in r".^$*+?()[]{}|\/" else c for c in name)
