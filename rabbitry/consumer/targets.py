"""What a handler may name in one vhost of a spec: every queue the spec declares there.

A worker reads the same declaration as the provisioner, so a handler may bind to any queue the
spec makes, not only the ``queues`` entries: the shard queues of a ``sharded_exchanges`` entry
(with the retry tiers and parking lot the template expands per shard), the partitions of a
``super_streams`` entry, and the queues the sharding plugin declares for a ``modulus_sharding``
exchange. A group (``shards=``) is every queue behind one sharded exchange or super stream.

Pure: a ``VhostSpec`` in, ``Target`` values out. ``retry_of`` resolves a target's retry set-up
the way the provisioner expands it; ``known`` lists what a vhost offers, for error messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rabbitry.errors import TargetError

if TYPE_CHECKING:  # imported by the functions that use them: see WorkerView
    from rabbitry.topology.patterns.retry_setup import QueueRetry
    from rabbitry.topology.spec.model import QueueSpec, VhostSpec

__all__ = ["Target", "TargetError", "group_of", "known", "retry_of", "target_of"]


@dataclass(frozen=True)
class Target:
    """One queue a handler consumes, as the spec declares it."""

    queue: str
    """The queue's name (for a modulus-sharded exchange: the exchange's, which the plugin
    hands to the shard with the fewest consumers)."""
    declared_by: str
    """Which part of the spec declares it: ``queues``, ``sharded_exchanges 'orders'``, ..."""
    spec: QueueSpec | None = None
    """Its declaration (arguments, retry, parking); None for the plugin's shard queues."""
    stream: bool = False
    consumers: int = 1
    """Consumers to open on ``queue`` (one per plugin shard for a modulus-sharded exchange)."""
    sharded_exchange: bool = False
    """``queue`` names a modulus-sharded exchange, not a queue: the plugin picks the shard."""


def _is_stream(vhost: VhostSpec, spec: QueueSpec) -> bool:
    # QueueType is a StrEnum: compared by value, without importing it once per queue
    return (spec.type or vhost.default_queue_type) == "stream"


def declared_queues(vhost: VhostSpec) -> dict[str, Target]:
    """Every queue of the vhost a handler may name, by name (work queues, shard queues,
    super stream partitions)."""
    from rabbitry.topology.patterns.sharding import shard_queue_specs

    found: dict[str, Target] = {}
    for spec in vhost.queues:
        found[spec.name] = Target(spec.name, "queues", spec, _is_stream(vhost, spec))
    for sharded in vhost.sharded_exchanges:
        origin = f"sharded_exchanges {sharded.name!r}"
        for spec in shard_queue_specs(sharded):
            found.setdefault(spec.name, Target(spec.name, origin, spec, _is_stream(vhost, spec)))
    for stream in vhost.super_streams:
        origin = f"super_streams {stream.name!r}"
        for key in stream.keys():  # noqa: SIM118 (a method of the spec, not a dict)
            name = f"{stream.name}-{key}"
            found.setdefault(name, Target(name, origin, stream=True))
    return found


def _plugin_shard(vhost: VhostSpec, queue: str) -> Target | None:
    """A queue named as the sharding plugin names the shards of a declared exchange
    (``sharding: <exchange> - <node> - <n>``, n below ``shards_per_node``)."""
    from rabbitry.topology.patterns.sharding import PLUGIN_SHARD_QUEUE_PREFIX

    if not queue.startswith(PLUGIN_SHARD_QUEUE_PREFIX):
        return None
    rest = queue[len(PLUGIN_SHARD_QUEUE_PREFIX) :]
    exchange, _, tail = rest.partition(" - ")
    _node, _, index = tail.rpartition(" - ")
    for modulus in vhost.modulus_sharding:
        if modulus.name == exchange and index.isdigit() and int(index) < modulus.shards_per_node:
            return Target(queue, f"modulus_sharding {exchange!r}")
    return None


def known(vhost: VhostSpec) -> str:
    """What handlers may name in the vhost, for an error message."""
    queues = ", ".join(declared_queues(vhost)) or "none"
    groups = [s.name for s in vhost.sharded_exchanges]
    groups += [s.name for s in vhost.super_streams]
    groups += [s.name for s in vhost.modulus_sharding]
    text = f"queues: {queues}"
    if groups:
        text += f"; shards= groups: {', '.join(groups)}"
    return text


def target_of(vhost: VhostSpec, queue: str) -> Target:
    """The declared queue ``queue`` of the vhost; ``TargetError`` listing what is declared."""
    found = declared_queues(vhost).get(queue) or _plugin_shard(vhost, queue)
    if found is not None:
        return found
    hint = ""
    sharded = [s.name for s in vhost.sharded_exchanges] + [s.name for s in vhost.modulus_sharding]
    if queue in sharded:
        hint = f"; {queue!r} is a sharded exchange: consume its shards with shards={queue!r}"
    elif any(s.name == queue for s in vhost.super_streams):
        hint = f"; {queue!r} is a super stream: consume its partitions with shards={queue!r}"
    raise TargetError(
        f"queue {queue!r} is not declared in vhost {vhost.name!r} ({known(vhost)}){hint}"
    )


def group_of(vhost: VhostSpec, name: str, *, nodes: int = 1) -> list[Target]:
    """Every queue behind the sharded exchange or super stream ``name``, in shard order.

    A modulus-sharded exchange gives one target, the exchange's name, with one consumer per
    shard the plugin declares (``shards_per_node`` on each of ``nodes`` nodes): the plugin
    hands each new consumer the shard that has the fewest."""
    from rabbitry.topology.patterns.sharding import shard_queue_specs

    for sharded in vhost.sharded_exchanges:
        if sharded.name == name:
            origin = f"sharded_exchanges {name!r}"
            return [
                Target(spec.name, origin, spec, _is_stream(vhost, spec))
                for spec in shard_queue_specs(sharded)
            ]
    for stream in vhost.super_streams:
        if stream.name == name:
            origin = f"super_streams {name!r}"
            keys = stream.keys()
            return [Target(f"{name}-{key}", origin, stream=True) for key in keys]
    for modulus in vhost.modulus_sharding:
        if modulus.name == name:
            consumers = modulus.shards_per_node * max(1, nodes)
            origin = f"modulus_sharding {name!r}"
            return [Target(name, origin, consumers=consumers, sharded_exchange=True)]
    groups = [
        *(s.name for s in vhost.sharded_exchanges),
        *(s.name for s in vhost.super_streams),
        *(s.name for s in vhost.modulus_sharding),
    ]
    raise TargetError(
        f"shards={name!r}: vhost {vhost.name!r} declares no sharded exchange or super stream"
        f" of that name (sharded exchanges and super streams: {', '.join(groups) or 'none'})"
    )


def retry_of(vhost: VhostSpec, target: Target) -> QueueRetry | None:
    """The retry set-up the spec declares for the target's queue (None: it does not retry)."""
    from rabbitry.topology.patterns.retries import queue_retry

    if target.spec is None:
        return None
    return queue_retry(vhost, target.spec)
