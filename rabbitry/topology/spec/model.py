"""The spec document as users write it: strict, so a typo is an error instead of a silent no-op.

Every model forbids unknown keys and documents its fields with attribute docstrings, which become
the descriptions of the JSON Schema editors use for completion and hover help. Checks that need
more than one field or object (references, duplicates, queue-type compatibility) live in
``rabbitry.topology.checks`` so that all of them are reported at once, with their locations.

This module holds the document (``Spec``, ``VhostSpec``) and the plain objects (broker, users,
exchanges, queues, bindings, policies, permissions, parameters); the kinds with more to say have
a module each beside it (``retry``, ``delays``, ``sharding``, ``federation``, ``shovels``), over
``base``. Every model is importable from here, as it always was.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    SecretStr,
    WithJsonSchema,
    model_validator,
)

from rabbitry.topology.primitives import ApplyTo, DestinationType, ExchangeType, QueueType
from rabbitry.topology.spec.arguments import (
    ExchangeArguments,
    OperatorPolicyDefinition,
    PolicyDefinition,
    QueueArguments,
)
from rabbitry.topology.spec.base import (
    NO_EXCHANGE_ARGUMENTS,
    NO_QUEUE_ARGUMENTS,
    PLUGIN_EXCHANGE_TYPE,
    Name,
    OnRemove,
    SpecExchangeType,
    SpecModel,
    VhostName,
    on_remove_field,
    protect_field,
)
from rabbitry.topology.spec.delays import DelaySpec, DelayTargetSpec
from rabbitry.topology.spec.federation import (
    FederationAckMode,
    FederationPolicySpec,
    FederationSpec,
    FederationUpstreamSpec,
    UpstreamSetMemberSpec,
    UpstreamSetSpec,
)
from rabbitry.topology.spec.retry import (
    ExceptionName,
    ExponentialBackoffSpec,
    FaultsSpec,
    ImmediateRetrySpec,
    RetrySpec,
)
from rabbitry.topology.spec.sharding import (
    ModulusShardingSpec,
    ShardedExchangeSpec,
    ShardQueueTemplateSpec,
    SuperStreamSpec,
)
from rabbitry.topology.spec.shovels import ShovelEndpointSpec, ShovelSpec
from rabbitry.topology.spec.source_map import SourceMap

SCHEMA_VERSION = 1

StackName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]

ParameterComponent = Literal["federation-upstream", "federation-upstream-set", "shovel"]
HashingAlgorithm = Literal[
    "rabbit_password_hashing_sha256",
    "rabbit_password_hashing_sha512",
    "rabbit_password_hashing_md5",
]


def _urls(value: object) -> str | list[str]:
    """One URL, or a non-empty list of them; the value itself is never echoed (passwords)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    if isinstance(value, list) and not value:
        raise ValueError("an empty list of URLs: give one URL or more, or leave the key out")
    kind = "a list holding other things than strings" if isinstance(value, list) else "a mapping"
    if not isinstance(value, list | dict):
        kind = type(value).__name__
    raise ValueError(f"expected a URL or a list of URLs (one per node), got {kind}")


BrokerUrls = Annotated[
    str | list[str],
    PlainValidator(_urls),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ]
        }
    ),
]


class BrokerSpec(SpecModel):
    """Where the broker is; flags and RABBITRY_URL / RABBITRY_MANAGEMENT_URL take precedence."""

    url: BrokerUrls | None = None
    """AMQP URI, e.g. amqp://user:{{ env.RABBIT_PASSWORD }}@localhost:5672/ (never printed); a
    list of URIs (or one comma-separated string) names the nodes of a cluster, which clients
    fail over between. The URIs of a list differ only in host and port."""
    management_url: BrokerUrls | None = None
    """Management HTTP API base URL, e.g. http://user:pass@localhost:15672 (never printed); a
    list names every node's API, and a call that cannot reach one node goes to the next.
    Derived from `url` (per node) when left out."""
    version: str | None = Field(None, pattern=r"^\d+\.\d+(\.\d+)?$")
    """RabbitMQ version the spec is written for, e.g. '4.0' or '3.13.7' (quote it: YAML
    reads 4.10 as 4.1): `rabbitry validate` refuses what that version refuses or lacks and
    warns of what it ignores. `rabbitry plan` checks against the live broker's version."""
    node_order: Literal["shuffle", "in-order"] | None = None
    """The order in which clients try the nodes of `url`: shuffle (the default: each client
    draws its own order, so clients spread over the cluster) or in-order (the first is
    preferred, the others are fallbacks)."""

    @property
    def urls(self) -> str | None:
        """`url` as one value, the URLs of a list comma-separated (how clients take it)."""
        return ",".join(self.url) if isinstance(self.url, list) else self.url


Limit = Annotated[int, Field(ge=-1)]


class UserLimitsSpec(SpecModel):
    """Per-user limits (`rabbitmqctl set_user_limits`); -1 means no limit, and so does a limit
    left out (one removed from the spec is lifted on the broker)."""

    max_connections: Limit | None = Field(None, alias="max-connections")
    """Connections the user may hold open at once (0: none)."""
    max_channels: Limit | None = Field(None, alias="max-channels")
    """Channels the user may hold open at once, over all its connections."""


class VhostLimitsSpec(SpecModel):
    """Vhost limits (`rabbitmqctl set_vhost_limits`); -1 means no limit, and so does a limit
    left out (one removed from the spec is lifted on the broker)."""

    max_connections: Limit | None = Field(None, alias="max-connections")
    """Client connections into the vhost at once (0: none)."""
    max_queues: Limit | None = Field(None, alias="max-queues")
    """Queues the vhost may hold."""


class UserSpec(SpecModel):
    """A broker user. Give `password` (from the environment) or `password_hash`, not both."""

    name: Name
    """The user name."""
    password: SecretStr | None = None
    """Plain password, usually templated: '{{ env.APP_PASSWORD }}'. Never printed."""
    password_hash: str | None = None
    """Salted hash as the broker exports it (base64); use instead of `password`."""
    hashing_algorithm: HashingAlgorithm | None = None
    """Algorithm of `password_hash` (default rabbit_password_hashing_sha256)."""
    tags: list[str] = Field(default_factory=list)
    """Management tags: administrator, monitoring, policymaker, management, impersonator."""
    limits: UserLimitsSpec | None = None
    """Connection and channel limits of this user."""

    @model_validator(mode="after")
    def _one_credential(self) -> UserSpec:
        if self.password is not None and self.password_hash is not None:
            raise ValueError(
                f"user {self.name!r} has both `password` and `password_hash`: keep one "
                "(password_hash is what `rabbitry export` writes; password is for new users)"
            )
        return self


class GlobalParameterSpec(SpecModel):
    """A cluster-wide runtime parameter (e.g. cluster_name)."""

    name: Name
    """Parameter name."""
    value: Any
    """Any JSON value."""


class ExchangeSpec(SpecModel):
    """An exchange."""

    name: Name
    """Exchange name (not '' and not amq.*: those are built in)."""
    type: SpecExchangeType = ExchangeType.DIRECT
    """direct, fanout, topic, headers, x-consistent-hash or x-modulus-hash (plugins); another
    plugin's type (x-local-random, x-recent-history, ...) is declared as written, unchecked,
    with a warning."""
    durable: bool = True
    """Survive a broker restart."""
    auto_delete: bool = False
    """Delete when the last binding from it is removed."""
    internal: bool = False
    """Only other exchanges may publish to it."""
    alternate_exchange: str | None = None
    """Exchange that receives messages this one cannot route."""
    arguments: ExchangeArguments = Field(default_factory=lambda: NO_EXCHANGE_ARGUMENTS)
    """Checked exchange arguments (hash-header / hash-property for x-consistent-hash)."""
    unchecked_arguments: dict[str, Any] = Field(default_factory=dict)
    """Plugin arguments rabbitry does not know, passed through as they are."""
    protect: bool = protect_field("exchange")
    on_remove: OnRemove = on_remove_field("exchange")


class QueueSpec(SpecModel):
    """A queue. Prefer policies for settings that may change: arguments are fixed at declare."""

    name: Name
    """Queue name (amq.* is reserved)."""
    type: QueueType | None = None
    """classic, quorum or stream (default: the vhost's default_queue_type, else classic)."""
    durable: bool = True
    """Survive a broker restart (quorum queues and streams are always durable)."""
    auto_delete: bool = False
    """Delete when the last consumer unsubscribes (classic queues only)."""
    exclusive: bool = Field(False, json_schema_extra={"const": False})
    """Never valid here: an exclusive queue belongs to one connection, so clients declare it."""
    arguments: QueueArguments = Field(default_factory=lambda: NO_QUEUE_ARGUMENTS)
    """Checked queue arguments (x-message-ttl: 30s, x-dead-letter-exchange: dlx, ...)."""
    unchecked_arguments: dict[str, Any] = Field(default_factory=dict)
    """Plugin arguments rabbitry does not know, passed through as they are."""
    retry: RetrySpec | None = None
    """Retry ladder for messages whose handler fails (declares tier queues and a parking lot)."""
    parking: bool | Name | None = None
    """Parking lot for messages that exhausted their retries: true (`<queue>.parking`, the
    default when `retry` is set), a queue name, or false."""
    dead_letter: bool | Literal["parking"] | Name | None = None
    """Where the broker dead-letters this queue's messages (rejected, expired, over the
    delivery limit): `parking` (default with a parking lot), true (`<queue>.dead`), a queue
    name, or false. Sets x-dead-letter-exchange/-routing-key."""
    delivery_limit: int | None = Field(None, ge=1)
    """Quorum queues: deliveries before the broker dead-letters a message (guards against
    poison messages that crash consumers before they ack). Set it explicitly: the broker's
    default changed to 20 in 4.0."""
    periodic: Name | None = None
    """Carry the occurrences of periodic jobs (`@app.periodic`), scheduled through the named
    `delays` entry of this vhost: the queue becomes a target of that delay and is consumed by
    one worker at a time (x-single-active-consumer)."""
    protect: bool = protect_field("queue")
    on_remove: OnRemove = on_remove_field("queue")


class BindingSpec(SpecModel):
    """A binding from an exchange to a queue or to another exchange."""

    source: str
    """Source exchange (declared in this vhost, or a built-in amq.* exchange)."""
    destination: str
    """Destination queue or exchange."""
    destination_type: DestinationType = DestinationType.QUEUE
    """queue or exchange."""
    routing_key: str = ""
    """Binding key (topic patterns for topic exchanges, a weight for x-consistent-hash)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Binding arguments (headers exchanges: x-match plus the headers to match)."""


class OperatorPolicySpec(SpecModel):
    """An operator policy: caps that apply on top of users' policies."""

    name: Name
    """Policy name."""
    pattern: str
    """Regular expression matched against object names (unanchored: use ^...$)."""
    apply_to: ApplyTo = ApplyTo.QUEUES
    """Usually queues."""
    priority: int = 0
    """Only the matching policy with the highest priority applies to an object."""
    definition: OperatorPolicyDefinition = Field(default_factory=OperatorPolicyDefinition)
    """Checked operator policy keys (message-ttl, expires, max-length, ...)."""
    unchecked_definition: dict[str, Any] = Field(default_factory=dict)
    """Plugin policy keys rabbitry does not know, passed through as they are."""


class PolicySpec(OperatorPolicySpec):
    """A policy: settings the broker applies to matching queues/exchanges and can change live."""

    # an operator policy's fields, with any apply-to and every policy key

    apply_to: ApplyTo = ApplyTo.ALL
    """all, queues or exchanges (3.12+: classic_queues, quorum_queues, streams)."""
    definition: PolicyDefinition = Field(default_factory=PolicyDefinition)
    """Checked policy keys (message-ttl: 30s, dead-letter-exchange: dlx, ...)."""


class PermissionSpec(SpecModel):
    """A user's permissions in this vhost, as regular expressions over object names."""

    user: Name
    """User name (declared in `users`, or existing on the broker)."""
    configure: str = ".*"
    """Objects the user may declare and delete ('' for none)."""
    write: str = ".*"
    """Objects the user may publish to or bind from."""
    read: str = ".*"
    """Objects the user may consume from or bind to."""


class TopicPermissionSpec(SpecModel):
    """A user's permissions on the routing keys of one topic exchange."""

    user: Name
    """User name."""
    exchange: str
    """Topic exchange the permission applies to."""
    write: str = ".*"
    """Routing keys the user may publish with (regex; {username} and {vhost} expand)."""
    read: str = ".*"
    """Routing keys the user may bind with."""


class ParameterSpec(SpecModel):
    """A vhost runtime parameter: federation upstreams and upstream sets, shovels."""

    component: ParameterComponent
    """federation-upstream, federation-upstream-set or shovel."""
    name: Name
    """Parameter name (what policies refer to)."""
    value: Any
    """The component's JSON value (e.g. {uri: ..., expires: ...} for an upstream)."""


class VhostSpec(SpecModel):
    """A virtual host and everything declared inside it."""

    name: VhostName
    """Vhost name."""
    description: str = ""
    """Free text shown in the management UI."""
    tags: list[str] = Field(default_factory=list)
    """Vhost tags."""
    default_queue_type: QueueType | None = None
    """Type of queues declared without x-queue-type (3.11+)."""
    protected_from_deletion: bool = False
    """The broker refuses to delete this vhost while set (RabbitMQ 4.0.6+; older brokers keep
    no such setting: a warning there). A vhost the broker protects is never pruned."""
    limits: VhostLimitsSpec | None = None
    """Connection and queue limits of this vhost."""
    exchanges: list[ExchangeSpec] = Field(default_factory=list)
    """Exchanges."""
    queues: list[QueueSpec] = Field(default_factory=list)
    """Queues."""
    bindings: list[BindingSpec] = Field(default_factory=list)
    """Bindings between the exchanges and queues."""
    policies: list[PolicySpec] = Field(default_factory=list)
    """Policies."""
    operator_policies: list[OperatorPolicySpec] = Field(default_factory=list)
    """Operator policies."""
    permissions: list[PermissionSpec] = Field(default_factory=list)
    """User permissions."""
    topic_permissions: list[TopicPermissionSpec] = Field(default_factory=list)
    """Topic permissions."""
    parameters: list[ParameterSpec] = Field(default_factory=list)
    """Runtime parameters."""
    delays: list[DelaySpec] = Field(default_factory=list)
    """Delayed delivery: binary-decomposed or fixed TTL levels."""
    sharded_exchanges: list[ShardedExchangeSpec] = Field(default_factory=list)
    """Consistent-hash sharding: one exchange, N shard queues from one queue template."""
    modulus_sharding: list[ModulusShardingSpec] = Field(default_factory=list)
    """Sharding by the rabbitmq_sharding plugin (x-modulus-hash, shard queues per node)."""
    federation: FederationSpec | None = None
    """Federation upstreams, upstream sets, and federated exchanges and queues."""
    shovels: list[ShovelSpec] = Field(default_factory=list)
    """Dynamic shovels (need the rabbitmq_shovel plugin)."""
    super_streams: list[SuperStreamSpec] = Field(default_factory=list)
    """Partitioned streams (stream-protocol clients find their partitions from RabbitMQ 3.11)."""


class Spec(SpecModel):
    """A rabbitry spec: the RabbitMQ topology one stack owns."""

    model_config = ConfigDict(title="rabbitry spec")

    version: Literal[1]
    """Spec format version; always 1."""
    name: StackName = "default"
    """Stack name: which objects on the broker this spec owns."""
    broker: BrokerSpec | None = None
    """Connection settings (flags and environment variables take precedence)."""
    users: list[UserSpec] = Field(default_factory=list)
    """Broker users."""
    global_parameters: list[GlobalParameterSpec] = Field(default_factory=list)
    """Cluster-wide runtime parameters."""
    vhosts: list[VhostSpec] = Field(default_factory=list)
    """Virtual hosts."""

    _source: SourceMap | None = PrivateAttr(default=None)
    _expanded: dict[int, tuple[Any, Any]] = PrivateAttr(default_factory=dict)
    """Vhosts the checks already expanded, by ``id`` of their spec: ``expand`` takes each once
    instead of expanding it again (half of a large spec's expansion time)."""

    @property
    def source(self) -> SourceMap | None:
        """Where the spec's keys came from (file, lines), or None for a spec built in code."""
        return self._source


__all__ = [
    "NO_EXCHANGE_ARGUMENTS",
    "NO_QUEUE_ARGUMENTS",
    "PLUGIN_EXCHANGE_TYPE",
    "SCHEMA_VERSION",
    "BindingSpec",
    "BrokerSpec",
    "BrokerUrls",
    "DelaySpec",
    "DelayTargetSpec",
    "ExceptionName",
    "ExchangeSpec",
    "ExponentialBackoffSpec",
    "FaultsSpec",
    "FederationAckMode",
    "FederationPolicySpec",
    "FederationSpec",
    "FederationUpstreamSpec",
    "GlobalParameterSpec",
    "HashingAlgorithm",
    "ImmediateRetrySpec",
    "Limit",
    "ModulusShardingSpec",
    "Name",
    "OperatorPolicySpec",
    "ParameterComponent",
    "ParameterSpec",
    "PermissionSpec",
    "PolicySpec",
    "QueueSpec",
    "RetrySpec",
    "ShardQueueTemplateSpec",
    "ShardedExchangeSpec",
    "ShovelEndpointSpec",
    "ShovelSpec",
    "Spec",
    "SpecExchangeType",
    "SpecModel",
    "StackName",
    "SuperStreamSpec",
    "TopicPermissionSpec",
    "UpstreamSetMemberSpec",
    "UpstreamSetSpec",
    "UserLimitsSpec",
    "UserSpec",
    "VhostLimitsSpec",
    "VhostName",
    "VhostSpec",
]
