"""The spec document as users write it: strict, so a typo is an error instead of a silent no-op.

Every model forbids unknown keys and documents its fields with attribute docstrings, which become
the descriptions of the JSON Schema editors use for completion and hover help. Checks that need
more than one field or object (references, duplicates, queue-type compatibility) live in
``validate.py`` so that all of them are reported at once, with their locations.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_validator

from rabbitry.topology.arguments import (
    ExchangeArguments,
    OperatorPolicyDefinition,
    PolicyDefinition,
    QueueArguments,
)
from rabbitry.topology.primitives import ApplyTo, DestinationType, ExchangeType, QueueType
from rabbitry.topology.source_map import SourceMap

SCHEMA_VERSION = 1

Name = Annotated[str, Field(min_length=1, max_length=255)]
"""An AMQP object name (a short string on the wire, so at most 255 characters)."""

StackName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]

ParameterComponent = Literal["federation-upstream", "federation-upstream-set", "shovel"]
HashingAlgorithm = Literal[
    "rabbit_password_hashing_sha256",
    "rabbit_password_hashing_sha512",
    "rabbit_password_hashing_md5",
]


class SpecModel(BaseModel):
    """Base of the document models: unknown keys are errors, numbers are accepted as names."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        coerce_numbers_to_str=True,
    )


class BrokerSpec(SpecModel):
    """Where the broker is; flags and RABBITRY_URL / RABBITRY_MANAGEMENT_URL take precedence."""

    url: str | None = None
    """AMQP URI, e.g. amqp://user:{{ env.RABBIT_PASSWORD }}@localhost:5672/ (never printed)."""
    management_url: str | None = None
    """Management HTTP API base URL, e.g. http://user:pass@localhost:15672 (never printed)."""


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
    type: ExchangeType = ExchangeType.DIRECT
    """direct, fanout, topic, headers, x-consistent-hash or x-modulus-hash (plugins)."""
    durable: bool = True
    """Survive a broker restart."""
    auto_delete: bool = False
    """Delete when the last binding from it is removed."""
    internal: bool = False
    """Only other exchanges may publish to it."""
    alternate_exchange: str | None = None
    """Exchange that receives messages this one cannot route."""
    arguments: ExchangeArguments = Field(default_factory=ExchangeArguments)
    """Checked exchange arguments (hash-header / hash-property for x-consistent-hash)."""
    unchecked_arguments: dict[str, Any] = Field(default_factory=dict)
    """Plugin arguments rabbitry does not know, passed through as they are."""


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
    arguments: QueueArguments = Field(default_factory=QueueArguments)
    """Checked queue arguments (x-message-ttl: 30s, x-dead-letter-exchange: dlx, ...)."""
    unchecked_arguments: dict[str, Any] = Field(default_factory=dict)
    """Plugin arguments rabbitry does not know, passed through as they are."""


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


class PolicySpec(SpecModel):
    """A policy: settings the broker applies to matching queues/exchanges and can change live."""

    name: Name
    """Policy name."""
    pattern: str
    """Regular expression matched against object names (unanchored: use ^...$)."""
    apply_to: ApplyTo = ApplyTo.ALL
    """all, queues or exchanges (3.12+: classic_queues, quorum_queues, streams)."""
    priority: int = 0
    """Only the matching policy with the highest priority applies to an object."""
    definition: PolicyDefinition = Field(default_factory=PolicyDefinition)
    """Checked policy keys (message-ttl: 30s, dead-letter-exchange: dlx, ...)."""
    unchecked_definition: dict[str, Any] = Field(default_factory=dict)
    """Plugin policy keys rabbitry does not know, passed through as they are."""


class OperatorPolicySpec(SpecModel):
    """An operator policy: caps that apply on top of users' policies."""

    name: Name
    """Operator policy name."""
    pattern: str
    """Regular expression matched against queue names."""
    apply_to: ApplyTo = ApplyTo.QUEUES
    """Usually queues."""
    priority: int = 0
    """Only the matching operator policy with the highest priority applies."""
    definition: OperatorPolicyDefinition = Field(default_factory=OperatorPolicyDefinition)
    """Checked operator policy keys (message-ttl, expires, max-length, ...)."""
    unchecked_definition: dict[str, Any] = Field(default_factory=dict)
    """Keys rabbitry does not know, passed through as they are."""


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

    name: Name
    """Vhost name."""
    description: str = ""
    """Free text shown in the management UI."""
    tags: list[str] = Field(default_factory=list)
    """Vhost tags."""
    default_queue_type: QueueType | None = None
    """Type of queues declared without x-queue-type (3.11+)."""
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

    @property
    def source(self) -> SourceMap | None:
        """Where the spec's keys came from (file, lines), or None for a spec built in code."""
        return self._source
