"""Super streams from ``vhosts[].super_streams``: what ``rabbitmq-streams add_super_stream``
makes, as primitives (a direct exchange with ``x-super-stream: true``, one stream per partition
named ``<name>-<key>``, each bound with its key and ``x-stream-partition-order``), and the way
back: ``super_streams_in`` finds them among a vhost's objects, so an export writes one entry.
``partitions_in_order`` reads a super stream's partitions off its exchange's bindings, however
it was made (a spec, ``rabbitmq-streams add_super_stream --binding-keys``, the stream protocol's
create, whose partition names need not be ``<name>-<key>``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rabbitry.topology.patterns.draft import VhostDraft
from rabbitry.topology.primitives import (
    JSON,
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Queue,
    QueueType,
    Vhost,
)

__all__ = [
    "MARK",
    "ORDER",
    "FoundSuperStream",
    "Partition",
    "declare_super_streams",
    "partitions_in_order",
    "super_streams_in",
]

MARK = "x-super-stream"
"""The exchange argument that makes a direct exchange a super stream."""
ORDER = "x-stream-partition-order"
"""The binding argument that orders the partitions."""


def declare_super_streams(draft: VhostDraft) -> None:
    for spec in draft.spec.super_streams:
        draft.exchanges.append(
            Exchange(name=spec.name, type=ExchangeType.DIRECT, arguments={MARK: True})
        )
        arguments = spec.arguments.as_broker_dict()
        for order, key in enumerate(spec.keys()):
            partition = f"{spec.name}-{key}"
            draft.queues.append(Queue(name=partition, type=QueueType.STREAM, arguments=arguments))
            draft.bindings.append(
                Binding(
                    source=spec.name,
                    destination=partition,
                    routing_key=key,
                    arguments={ORDER: order},
                )
            )


@dataclass(frozen=True)
class FoundSuperStream:
    """A super stream among a vhost's objects, and the objects it stands for."""

    name: str
    keys: list[str]
    """The partitions' routing keys, in partition order."""
    arguments: dict[str, JSON]
    """The stream arguments every partition has."""
    exchange: Exchange
    queues: list[Queue]
    bindings: list[Binding]

    @property
    def numbered(self) -> bool:
        """Keys 0, 1, ...: written as ``partitions: N``."""
        return self.keys == [str(i) for i in range(len(self.keys))]


def super_streams_in(vhost: Vhost) -> list[FoundSuperStream]:
    """The super streams of ``vhost`` that one spec entry declares exactly: a marked direct
    exchange whose bindings are ordered 0..N-1, each to a stream ``<name>-<key>``, all with the
    same arguments and nothing else bound. Anything else stays as separate objects."""
    queues = {q.name: q for q in vhost.queues}
    found = []
    for exchange in vhost.exchanges:
        if exchange.arguments != {MARK: True} or exchange.type is not ExchangeType.DIRECT:
            continue
        bound = [b for b in vhost.bindings if b.source == exchange.name]
        try:
            bound.sort(key=lambda b: int(b.arguments[ORDER]))
        except (KeyError, TypeError, ValueError):
            continue
        partitions = [queues.get(b.destination) for b in bound]
        if not bound or any(
            b.destination_type is not DestinationType.QUEUE
            or b.arguments != {ORDER: i}
            or b.destination != f"{exchange.name}-{b.routing_key}"
            for i, b in enumerate(bound)
        ):
            continue
        if any(q is None or q.type is not QueueType.STREAM for q in partitions):
            continue
        streams = [q for q in partitions if q is not None]
        if any(q.arguments != streams[0].arguments or not q.durable for q in streams):
            continue
        keys = [b.routing_key for b in bound]
        arguments = dict(streams[0].arguments)
        found.append(FoundSuperStream(exchange.name, keys, arguments, exchange, streams, bound))
    return found


@dataclass(frozen=True)
class Partition:
    """One partition of a super stream: the stream it is and the binding key that routes to it."""

    stream: str
    key: str


def partitions_in_order(bindings: Iterable[Mapping[str, Any]]) -> list[Partition]:
    """The partitions of a super stream from its exchange's bindings (as the management API
    lists them: ``destination``, ``destination_type``, ``routing_key``, ``arguments``), in
    ``x-stream-partition-order`` order, as the broker orders them for stream clients. Bindings
    to exchanges and bindings without a whole-number order are not partitions; a stream bound
    under several keys is one partition, at its lowest order."""
    ordered: list[tuple[int, str, str]] = []
    for binding in bindings:
        if binding.get("destination_type", "queue") != "queue":
            continue
        order = (binding.get("arguments") or {}).get(ORDER)
        if isinstance(order, bool) or not isinstance(order, int):
            continue
        ordered.append((order, str(binding["destination"]), str(binding.get("routing_key", ""))))
    seen: set[str] = set()
    out: list[Partition] = []
    for _, stream, key in sorted(ordered):
        if stream not in seen:
            seen.add(stream)
            out.append(Partition(stream, key))
    return out
