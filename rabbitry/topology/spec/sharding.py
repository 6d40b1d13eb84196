"""Partitioning as the spec writes it: consistent-hash sharded exchanges, the sharding
plugin's x-modulus-hash exchanges, and super streams."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.arguments import QueueArguments
from rabbitry.topology.spec.base import NO_QUEUE_ARGUMENTS, Name, SpecModel
from rabbitry.topology.spec.retry import RetrySpec


class ShardQueueTemplateSpec(SpecModel):
    """What every shard queue of a sharded exchange is: the fields of a queue, without a name."""

    type: QueueType | None = None
    """classic, quorum or stream (default: the vhost's default_queue_type, else classic)."""
    durable: bool = True
    """Survive a broker restart (quorum queues and streams are always durable)."""
    arguments: QueueArguments = Field(default_factory=lambda: NO_QUEUE_ARGUMENTS)
    """Checked queue arguments, the same for every shard (x-quorum-initial-group-size: 3, ...)."""
    unchecked_arguments: dict[str, Any] = Field(default_factory=dict)
    """Plugin arguments rabbitry does not know, passed through as they are."""
    retry: RetrySpec | None = None
    """Retry ladder of each shard (tier queues and parking lot per shard: `<shard>.retry.5s`)."""
    parking: bool | Name | None = None
    """Parking lot: true (`<shard>.parking` per shard, the default with `retry`), one queue name
    shared by all shards, or false."""
    dead_letter: bool | Literal["parking"] | Name | None = None
    """Where the broker dead-letters each shard's messages: as `queues[].dead_letter`."""
    delivery_limit: int | None = Field(None, ge=1)
    """Quorum queues: deliveries before the broker dead-letters a message."""


class ShardedExchangeSpec(SpecModel):
    """Consistent-hash sharding: an x-consistent-hash exchange spreading messages over shard
    queues by a hash of the routing key, a header or a property; one key always reaches one
    shard (while the shards stay the same)."""

    name: Name
    """The x-consistent-hash exchange publishers send to."""
    shards: int | None = Field(None, ge=1, le=1024)
    """Number of shard queues, all of weight 1 (or give `weights`)."""
    weights: list[Annotated[int, Field(ge=1, le=1000)]] | None = Field(
        None, min_length=1, max_length=1024
    )
    """One weight per shard (the binding key): a shard of weight 2 gets twice the keys."""
    queue_name: str = "{exchange}.{index}"
    """Name of shard queue `index` (0-based); `{exchange}` is `name`: orders.0, orders.1, ..."""
    hash_header: str | None = None
    """Hash this header's value instead of the routing key."""
    hash_property: Literal["message_id", "correlation_id", "timestamp"] | None = None
    """Hash this message property instead of the routing key."""
    queue: ShardQueueTemplateSpec = Field(default_factory=ShardQueueTemplateSpec)
    """The template every shard queue is declared from (type, arguments, retry, dead-letter)."""


class SuperStreamSpec(SpecModel):
    """A super stream: a partitioned stream, as `rabbitmq-streams add_super_stream` makes it (a
    direct exchange marked `x-super-stream`, one stream per partition named `<name>-<key>`,
    bound with its key and its `x-stream-partition-order`)."""

    name: Name
    """The super stream (its exchange)."""
    partitions: int | None = Field(None, ge=1, le=1024)
    """Number of partitions, keyed 0, 1, ... (or give `routing_keys`)."""
    routing_keys: list[Name] | None = Field(None, min_length=1, max_length=1024)
    """One partition per key, named `<name>-<key>`: a message goes to the partition of its
    routing key."""
    arguments: QueueArguments = Field(default_factory=lambda: NO_QUEUE_ARGUMENTS)
    """Stream arguments of every partition: x-max-age, x-max-length-bytes,
    x-stream-max-segment-size-bytes, x-initial-cluster-size, x-stream-filter-size-bytes."""

    @model_validator(mode="after")
    def _one_way_to_partition(self) -> SuperStreamSpec:
        if (self.partitions is None) == (self.routing_keys is None):
            raise ValueError(
                f"super stream {self.name!r}: give `partitions: N` or `routing_keys: [...]`,"
                " one of them"
            )
        keys = self.routing_keys or []
        if len(set(keys)) != len(keys):
            raise ValueError(f"super stream {self.name!r}: a routing key is listed twice")
        return self

    def keys(self) -> list[str]:
        """The partitions' routing keys, in partition order."""
        return list(self.routing_keys or [str(i) for i in range(self.partitions or 0)])


class ModulusShardingSpec(SpecModel):
    """Sharding by the rabbitmq_sharding plugin: an x-modulus-hash exchange and the policy that
    makes the plugin declare `shards_per_node` queues on every node (named
    `sharding: <exchange> - <node> - <n>`; the plugin owns them, rabbitry never touches them)."""

    name: Name
    """The x-modulus-hash exchange publishers send to (and consumers consume from by name)."""
    shards_per_node: int = Field(1, ge=1, le=1024)
    """Shard queues the plugin declares on each node of the cluster."""
    routing_key: str | None = None
    """Binding key of the shard queues (the plugin's `routing-key`; irrelevant for modulus)."""
    policy: Name | None = None
    """Name of the sharding policy (default `<name>.sharding`)."""
    priority: int = 0
    """Policy priority: only the highest-priority matching policy applies to the exchange."""


__all__ = [
    "ModulusShardingSpec",
    "ShardQueueTemplateSpec",
    "ShardedExchangeSpec",
    "SuperStreamSpec",
]
