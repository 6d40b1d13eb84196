"""The optional arguments and policy keys rabbitry knows, with their types and where they apply.

The broker accepts any ``x-`` key and ignores the ones it does not know, so a typo such as
``x-message-tll`` silently does nothing. Each known key is a field here (its alias is the broker's
name), which gives type checks, unknown-key errors with suggestions and editor help from the
JSON Schema in one place. Plugin arguments rabbitry does not know go through
``unchecked_arguments`` / ``unchecked_definition`` instead.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.field_docs import SPEC_MODEL_CONFIG
from rabbitry.topology.spec.quantities import Bytes, MaxAge, Milliseconds

Overflow = Literal["drop-head", "reject-publish", "reject-publish-dlx"]
DeadLetterStrategy = Literal["at-most-once", "at-least-once"]
QueueMode = Literal["default", "lazy"]
QueueVersion = Literal[1, 2]
LeaderLocator = Literal["client-local", "balanced", "random", "least-leaders"]
DelayedRetryType = Literal["disabled", "all", "failed", "returned"]
MasterLocator = Literal["client-local", "min-masters", "random"]
HaMode = Literal["all", "exactly", "nodes"]
HaSyncMode = Literal["manual", "automatic"]
HaPromote = Literal["when-synced", "always"]

NonNegative = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]


def _ha_params(value: object) -> int | list[str]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(
        f"expected a replica count (ha-mode exactly) or a list of node names (ha-mode nodes), "
        f"got {value!r}"
    )


HaParams = Annotated[
    int | list[str],
    BeforeValidator(_ha_params),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
            "description": "Replica count for ha-mode exactly, node names for ha-mode nodes.",
        }
    ),
]


class KnownKeys(BaseModel):
    """A mapping of broker keys: every field is optional and named by its alias."""

    model_config = ConfigDict(**SPEC_MODEL_CONFIG, frozen=True)

    misplaced: ClassVar[dict[str, str]] = {}
    """Keys that belong somewhere else in the spec, with what to write instead."""

    def as_broker_dict(self) -> dict[str, Any]:
        """The keys that are set, by their broker names, with JSON values (a copy: the checks,
        the expansion and the planner each ask, five times an object in a large spec)."""
        return dict(self._broker_dict)

    @cached_property
    def _broker_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class QueueArguments(KnownKeys):
    """Optional queue arguments (``x-`` keys). Durations take units (30s), sizes too (10MB)."""

    misplaced: ClassVar[dict[str, str]] = {
        "x-queue-type": (
            "the queue type is set with `type: classic|quorum|stream` next to `arguments`"
        ),
    }

    message_ttl: Milliseconds | None = Field(None, alias="x-message-ttl")
    """How long a message may stay in the queue before it expires (and is dead-lettered)."""
    expires: Annotated[Milliseconds, Field(ge=1)] | None = Field(None, alias="x-expires")
    """Delete the queue after it has been unused (no consumers, no gets) this long."""
    max_length: NonNegative | None = Field(None, alias="x-max-length")
    """Maximum number of ready messages; see x-overflow for what happens beyond it."""
    max_length_bytes: Bytes | None = Field(None, alias="x-max-length-bytes")
    """Maximum total size of ready message bodies."""
    overflow: Overflow | None = Field(None, alias="x-overflow")
    """What happens when the queue is full (reject-publish-dlx: classic queues only)."""
    dead_letter_exchange: str | None = Field(None, alias="x-dead-letter-exchange")
    """Exchange that expired, rejected and dropped messages are republished to ('' = default)."""
    dead_letter_routing_key: str | None = Field(None, alias="x-dead-letter-routing-key")
    """Routing key for dead-lettered messages (default: the message's own); needs a DLX."""
    dead_letter_strategy: DeadLetterStrategy | None = Field(None, alias="x-dead-letter-strategy")
    """Quorum queues: at-least-once needs x-overflow reject-publish."""
    max_priority: Annotated[int, Field(ge=1, le=255)] | None = Field(None, alias="x-max-priority")
    """Classic queues: number of message priorities the queue supports (1-255; keep it small).
    Quorum queues (4.0+) order by message priority without it, and refuse it."""
    single_active_consumer: bool | None = Field(None, alias="x-single-active-consumer")
    """Deliver to one consumer at a time, failing over to the next (keeps ordering)."""
    delivery_limit: Annotated[int, Field(ge=-1)] | None = Field(None, alias="x-delivery-limit")
    """Quorum queues: redeliveries before a message is dead-lettered (-1: unlimited, 4.0+)."""
    quorum_initial_group_size: Positive | None = Field(None, alias="x-quorum-initial-group-size")
    """Quorum queues: number of replicas at declaration."""
    queue_mode: QueueMode | None = Field(None, alias="x-queue-mode")
    """Classic queues (before 3.12): lazy keeps messages on disk."""
    queue_version: QueueVersion | None = Field(None, alias="x-queue-version")
    """Classic queues: storage implementation version (2 is the default from 3.13)."""
    queue_leader_locator: LeaderLocator | None = Field(None, alias="x-queue-leader-locator")
    """Quorum queues and streams (classic queues from 4.0): where the leader is placed."""
    queue_master_locator: MasterLocator | None = Field(None, alias="x-queue-master-locator")
    """Classic queues (deprecated in 4.0, refused by default from 4.3): where the queue's
    master is placed; use x-queue-leader-locator."""
    max_age: MaxAge | None = Field(None, alias="x-max-age")
    """Streams: retention by age (7D, 12h; M = months, m = minutes)."""
    stream_max_segment_size_bytes: Annotated[Bytes, Field(le=3_000_000_000)] | None = Field(
        None, alias="x-stream-max-segment-size-bytes"
    )
    """Streams: size of one segment file on disk (retention works per segment)."""
    initial_cluster_size: Positive | None = Field(None, alias="x-initial-cluster-size")
    """Streams: number of replicas at declaration."""
    stream_filter_size_bytes: Annotated[int, Field(ge=16, le=255)] | None = Field(
        None, alias="x-stream-filter-size-bytes"
    )
    """Streams (3.13+): size of the Bloom filter used for stream filtering."""
    consumer_timeout: Annotated[Milliseconds, Field(ge=1)] | None = Field(
        None, alias="x-consumer-timeout"
    )
    """Classic and quorum queues (3.12+): how long a delivery may stay unacknowledged."""
    delayed_retry_type: DelayedRetryType | None = Field(None, alias="x-delayed-retry-type")
    """Quorum queues (4.3+): which returned messages wait before redelivery (all, failed,
    returned or disabled); needs x-delayed-retry-min."""
    delayed_retry_min: Annotated[Milliseconds, Field(ge=1)] | None = Field(
        None, alias="x-delayed-retry-min"
    )
    """Quorum queues (4.3+): delay after the first delivery; it grows with the delivery count
    (min * deliveries, at most x-delayed-retry-max)."""
    delayed_retry_max: Annotated[Milliseconds, Field(ge=1)] | None = Field(
        None, alias="x-delayed-retry-max"
    )
    """Quorum queues (4.3+): longest delayed-retry delay (default: x-delayed-retry-min)."""
    consumer_disconnected_timeout: Annotated[Milliseconds, Field(ge=0)] | None = Field(
        None, alias="x-consumer-disconnected-timeout"
    )
    """Quorum queues (4.3+): how long messages of a consumer on an unreachable node wait
    before they are returned."""


QUEUE_ARGUMENT_TYPES: dict[str, frozenset[QueueType]] = {
    "x-message-ttl": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-expires": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-max-length": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-max-length-bytes": frozenset(QueueType),
    "x-overflow": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-dead-letter-exchange": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-dead-letter-routing-key": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-dead-letter-strategy": frozenset({QueueType.QUORUM}),
    "x-max-priority": frozenset({QueueType.CLASSIC}),
    "x-single-active-consumer": frozenset(QueueType),
    "x-delivery-limit": frozenset({QueueType.QUORUM}),
    "x-quorum-initial-group-size": frozenset({QueueType.QUORUM}),
    "x-queue-mode": frozenset({QueueType.CLASSIC}),
    "x-queue-version": frozenset({QueueType.CLASSIC}),
    "x-queue-leader-locator": frozenset(QueueType),
    "x-queue-master-locator": frozenset({QueueType.CLASSIC}),
    "x-max-age": frozenset({QueueType.STREAM}),
    "x-stream-max-segment-size-bytes": frozenset({QueueType.STREAM}),
    "x-initial-cluster-size": frozenset({QueueType.STREAM}),
    "x-stream-filter-size-bytes": frozenset({QueueType.STREAM}),
    "x-consumer-timeout": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "x-delayed-retry-type": frozenset({QueueType.QUORUM}),
    "x-delayed-retry-min": frozenset({QueueType.QUORUM}),
    "x-delayed-retry-max": frozenset({QueueType.QUORUM}),
    "x-consumer-disconnected-timeout": frozenset({QueueType.QUORUM}),
}
"""Which queue types each argument is valid for; the broker rejects or ignores the others."""

ARGUMENT_TYPE_HINTS: dict[tuple[str, QueueType], str] = {
    # rabbit_amqqueue.erl refuses, on every version up to 4.3, an argument another queue type
    # claims and this one does not; no quorum queue capabilities list x-max-priority
    ("x-max-priority", QueueType.QUORUM): (
        "remove it: quorum queues (RabbitMQ 4.0+) deliver by the messages' priority property"
        " without x-max-priority, and every version refuses it on a quorum queue"
    ),
}
"""What to do instead, where an argument is refused by a queue type that has the feature."""

OVERFLOW_TYPES: dict[str, frozenset[QueueType]] = {
    "drop-head": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "reject-publish": frozenset({QueueType.CLASSIC, QueueType.QUORUM}),
    "reject-publish-dlx": frozenset({QueueType.CLASSIC}),
}
"""Which queue types each x-overflow value is valid for."""


class ExchangeArguments(KnownKeys):
    """Optional exchange arguments (the alternate exchange has its own field)."""

    misplaced: ClassVar[dict[str, str]] = {
        "alternate-exchange": "set the alternate exchange with `alternate_exchange: <exchange>`",
        "x-alternate-exchange": "set the alternate exchange with `alternate_exchange: <exchange>`",
    }

    hash_header: str | None = Field(None, alias="hash-header")
    """x-consistent-hash: hash this header instead of the routing key."""
    hash_property: str | None = Field(None, alias="hash-property")
    """x-consistent-hash: hash this message property (message_id, correlation_id, timestamp)."""


class OperatorPolicyDefinition(KnownKeys):
    """Keys an operator policy may set: caps that override users' policies (the lower wins)."""

    message_ttl: Milliseconds | None = Field(None, alias="message-ttl")
    """Per-queue message TTL."""
    expires: Annotated[Milliseconds, Field(ge=1)] | None = Field(None, alias="expires")
    """Delete queues unused for this long."""
    max_length: NonNegative | None = Field(None, alias="max-length")
    """Maximum number of ready messages."""
    max_length_bytes: Bytes | None = Field(None, alias="max-length-bytes")
    """Maximum total size of ready message bodies."""
    delivery_limit: Annotated[int, Field(ge=-1)] | None = Field(None, alias="delivery-limit")
    """Quorum queues: redeliveries before dead-lettering."""
    target_group_size: Positive | None = Field(None, alias="target-group-size")
    """Quorum queues (3.13+): number of replicas the broker grows the queue to."""
    ha_mode: HaMode | None = Field(None, alias="ha-mode")
    """Classic mirroring (removed in 4.0): which nodes mirror the queue."""
    ha_params: HaParams | None = Field(None, alias="ha-params")
    """Classic mirroring: replica count or node names, depending on ha-mode."""
    ha_sync_mode: HaSyncMode | None = Field(None, alias="ha-sync-mode")
    """Classic mirroring: whether new mirrors synchronise automatically."""
    delayed_retry_type: DelayedRetryType | None = Field(None, alias="delayed-retry-type")
    """Quorum queues (4.3.1+): which returned messages wait before redelivery."""
    delayed_retry_min: Annotated[Milliseconds, Field(ge=1)] | None = Field(
        None, alias="delayed-retry-min"
    )
    """Quorum queues (4.3.1+): delay after the first delivery, growing with the count."""
    delayed_retry_max: Annotated[Milliseconds, Field(ge=1)] | None = Field(
        None, alias="delayed-retry-max"
    )
    """Quorum queues (4.3.1+): longest delayed-retry delay."""


class PolicyDefinition(OperatorPolicyDefinition):
    """Keys a policy may set (every operator policy key and more). Durations take units."""

    misplaced: ClassVar[dict[str, str]] = {
        "queue-type": "a policy cannot change a queue's type; set `type:` on the queue",
        "max-priority": "priorities cannot be set by policy; use x-max-priority on the queue",
    }

    overflow: Overflow | None = Field(None, alias="overflow")
    """What happens when a queue is full."""
    dead_letter_exchange: str | None = Field(None, alias="dead-letter-exchange")
    """Exchange for expired, rejected and dropped messages."""
    dead_letter_routing_key: str | None = Field(None, alias="dead-letter-routing-key")
    """Routing key for dead-lettered messages."""
    dead_letter_strategy: DeadLetterStrategy | None = Field(None, alias="dead-letter-strategy")
    """Quorum queues: at-most-once or at-least-once dead-lettering."""
    max_age: MaxAge | None = Field(None, alias="max-age")
    """Streams: retention by age."""
    stream_max_segment_size_bytes: Annotated[Bytes, Field(le=3_000_000_000)] | None = Field(
        None, alias="stream-max-segment-size-bytes"
    )
    """Streams: segment file size."""
    queue_mode: QueueMode | None = Field(None, alias="queue-mode")
    """Classic queues (before 3.12): lazy or default."""
    queue_version: QueueVersion | None = Field(None, alias="queue-version")
    """Classic queues: storage version."""
    queue_leader_locator: LeaderLocator | None = Field(None, alias="queue-leader-locator")
    """Quorum queues and streams: leader placement."""
    queue_master_locator: MasterLocator | None = Field(None, alias="queue-master-locator")
    """Classic queues (deprecated): master placement."""
    initial_cluster_size: Positive | None = Field(None, alias="initial-cluster-size")
    """Streams: replicas at declaration."""
    consumer_timeout: Annotated[Milliseconds, Field(ge=1)] | None = Field(
        None, alias="consumer-timeout"
    )
    """3.12+: consumer acknowledgement timeout."""
    consumer_disconnected_timeout: Annotated[Milliseconds, Field(ge=0)] | None = Field(
        None, alias="consumer-disconnected-timeout"
    )
    """Quorum queues (4.3+): wait before returning messages of a consumer on an unreachable
    node."""
    alternate_exchange: str | None = Field(None, alias="alternate-exchange")
    """Exchanges: where unroutable messages go."""
    federation_upstream: str | None = Field(None, alias="federation-upstream")
    """Federate matching exchanges/queues from this upstream (a federation-upstream parameter)."""
    federation_upstream_set: str | None = Field(None, alias="federation-upstream-set")
    """Federate from this set of upstreams ('all' = every upstream)."""
    ha_sync_batch_size: Positive | None = Field(None, alias="ha-sync-batch-size")
    """Classic mirroring: messages per synchronisation batch."""
    ha_promote_on_shutdown: HaPromote | None = Field(None, alias="ha-promote-on-shutdown")
    """Classic mirroring: promotion of unsynchronised mirrors on controlled shutdown."""
    ha_promote_on_failure: HaPromote | None = Field(None, alias="ha-promote-on-failure")
    """Classic mirroring: promotion of unsynchronised mirrors on failure."""


MIN_RESOLVED_KEYS = frozenset(
    {"message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit"}
)
"""Policy keys where the broker uses the smaller of the policy value and the queue argument."""

ARGUMENT_WINS_KEYS = frozenset(
    {"dead-letter-exchange", "dead-letter-routing-key", "overflow", "queue-mode", "queue-version"}
)
"""Policy keys where a queue argument silently overrides the policy."""

NAME_REFERENCE_KEYS = frozenset({"dead-letter-exchange", "alternate-exchange"})
"""Policy keys whose value names an exchange in the same vhost."""


def aliases(model: type[BaseModel]) -> list[str]:
    """The keys a model accepts in a document (aliases where set, field names otherwise)."""
    return [field.alias or name for name, field in model.model_fields.items()]


def policy_key_argument(key: str) -> str | None:
    """The queue argument a policy key corresponds to (``message-ttl`` -> ``x-message-ttl``)."""
    argument = f"x-{key}"
    return argument if argument in QUEUE_ARGUMENT_TYPES else None
