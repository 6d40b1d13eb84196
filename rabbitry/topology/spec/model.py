"""The spec document as users write it: strict, so a typo is an error instead of a silent no-op.

Every model forbids unknown keys and documents its fields with attribute docstrings, which become
the descriptions of the JSON Schema editors use for completion and hover help. Checks that need
more than one field or object (references, duplicates, queue-type compatibility) live in
``rabbitry.topology.checks`` so that all of them are reported at once, with their locations.

One file of about 500 lines on purpose: ``VhostSpec`` and ``Spec`` hold every other model, most
of the length is the field documentation users read as hover help, and one file read top to
bottom is the whole document's shape.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
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
from rabbitry.topology.spec.field_docs import describe
from rabbitry.topology.spec.quantities import Milliseconds
from rabbitry.topology.spec.source_map import SourceMap
from rabbitry.uri import mask_value

# One shared "no arguments" value: the models are frozen, and a fresh one per queue (21 fields,
# all None) was a third of a 50,000-object spec's memory.
NO_QUEUE_ARGUMENTS = QueueArguments()
NO_EXCHANGE_ARGUMENTS = ExchangeArguments()

SCHEMA_VERSION = 1

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _amqp_name(name: str) -> str:
    if name.isascii() and name.isprintable():  # the usual name: no control character, and
        return name  # at most 255 bytes (max_length counts characters: one byte each here)
    size = len(name.encode("utf-8"))
    if size > 255:
        raise ValueError(
            f"a name is at most 255 bytes in UTF-8 (AMQP sends it as a short string), this one"
            f" is {size}: shorten it"
        )
    found = _CONTROL.search(name)
    if found:
        raise ValueError(
            f"control character U+{ord(found[0]):04X} at position {found.start()} of the name:"
            " names are printable text (clients, logs and the management UI cannot show it)"
        )
    return name


def _vhost_name(name: str) -> str:
    if not name.isascii():
        raise ValueError(
            "a vhost name must be ASCII: the management API fails (HTTP 500) to export the"
            " definitions of a vhost named otherwise, so it could not be planned; objects"
            " inside it may have any name"
        )
    return name


Name = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_amqp_name)]
"""An AMQP object name: at most 255 bytes in UTF-8 (a short string on the wire), printable."""

VhostName = Annotated[Name, AfterValidator(_vhost_name)]
"""A vhost name: an AMQP name in ASCII (what the management API can export)."""

PLUGIN_EXCHANGE_TYPE = re.compile(r"x-[A-Za-z0-9][A-Za-z0-9._-]*")
"""How plugins name their exchange types (x-local-random, x-recent-history, x-jms-topic)."""


def _exchange_type(value: object) -> ExchangeType | str:
    if isinstance(value, ExchangeType):
        return value
    if isinstance(value, str):
        member = ExchangeType._value2member_map_.get(value)  # the enum's call, minus its cost
        if member is not None:
            return cast(ExchangeType, member)
        if PLUGIN_EXCHANGE_TYPE.fullmatch(value):
            return value  # a plugin's type rabbitry does not know: passed through, unchecked
    known = ", ".join(repr(t.value) for t in ExchangeType)
    close = difflib.get_close_matches(str(value), [t.value for t in ExchangeType], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"expected {known}, or a plugin's exchange type (x-...), got {value!r}{hint}")


SpecExchangeType = Annotated[
    ExchangeType | str,
    PlainValidator(_exchange_type),
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": [t.value for t in ExchangeType]},
                {"type": "string", "pattern": f"^{PLUGIN_EXCHANGE_TYPE.pattern}$"},
            ]
        }
    ),
]
"""A type rabbitry knows, or a plugin's ``x-`` type it passes through unchecked."""

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
        json_schema_extra=describe,  # field docstrings, read when a schema is made
        coerce_numbers_to_str=True,
        defer_build=True,
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # passwords in URIs and password-like keys never reach a repr, a log or a traceback
        for name, value in super().__repr_args__():
            secret = name is not None and "password" in name and isinstance(value, str)
            yield name, "***" if secret else mask_value(value)


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
    protect: bool = False
    """Never delete or replace this exchange on the broker, whatever apply's flags (`--prune`,
    `--force`, `--allow-replace`): apply refuses such a change and says why. Kept in the
    stack's ownership record, so it still holds once the exchange has left the spec; to delete
    it, apply it with `protect: false` first."""
    on_remove: Literal["delete", "retain"] = "delete"
    """What leaving the spec does: `delete` (with `--prune`), or `retain`: the exchange stays on
    the broker as it is (messages and all) and leaves the stack's ownership record, so no
    later apply of this stack touches it. Kept in the record, like `protect`."""


class ExponentialBackoffSpec(SpecModel):
    """Exponential back-off: initial * multiplier^(n-1), capped at max, +- jitter."""

    initial: Milliseconds = 1000
    """Delay before the first retry (e.g. 1s)."""
    multiplier: float = Field(2.0, ge=1)
    """Growth per retry."""
    max: Milliseconds = 3_600_000
    """Longest delay (e.g. 10m)."""
    jitter: float = Field(0.0, ge=0, lt=1)
    """Random spread as a fraction (0.1 = +-10%); needs `via: <delay name>` (exact per message)."""


def _exception_name(value: str) -> str:
    if not _EXCEPTION_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an exception class name: give a class name (ValueError) or its"
            " dotted path (myapp.errors.Invalid)"
        )
    return value


_EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
ExceptionName = Annotated[str, Field(max_length=255), AfterValidator(_exception_name)]


class ImmediateRetrySpec(SpecModel):
    """Calls of the handler in process before a failure goes to the retry ladder."""

    attempts: int = Field(3, ge=1, le=100)
    """Calls of the handler for one delivery, the first included (3: two more after a failure)."""
    pause: Milliseconds = Field(50, le=60_000)
    """Pause between two calls (e.g. 50ms); the worker's handler slot stays taken meanwhile."""


class FaultsSpec(SpecModel):
    """Where a worker announces the messages it parks."""

    exchange: Name
    """Topic exchange the fault events go to, with the work queue's name as routing key;
    declared by rabbitry unless the spec declares it (then any type but headers works)."""


class RetrySpec(SpecModel):
    """Retry failed messages with back-off, then park them. Attempts are counted in
    rabbitry's own headers (x-rabbitry-attempt), never in x-death."""

    attempts: int = Field(5, ge=1, le=1000)
    """Deliveries to the handler in all, the first included; then the message is parked."""
    backoff: list[Milliseconds] | ExponentialBackoffSpec = Field(
        default_factory=ExponentialBackoffSpec
    )
    """Fixed tiers ([1s, 10s, 1m]; the last repeats) or exponential ({initial, multiplier, ...})."""
    via: str = "queues"
    """`queues`: one TTL queue per distinct tier for this queue (no jitter); the name of a
    binary `delays` entry of this vhost: exact delays, jitter allowed; or `broker`: the quorum
    queue's own delayed retry (RabbitMQ 4.3+), no tier queues: the delay before retry n is
    x-delayed-retry-min x n, up to x-delayed-retry-max, so back-off tiers must be such a
    ramp ([1s, 2s, 3s]), an exponential back-off grows linearly, and jitter is refused."""
    never_retry: list[ExceptionName] = Field(default_factory=list)
    """Exception class names that park at once (ValueError, myapp.errors.Invalid), matched on
    the failure and along its cause chain (`raise ... from`, or raised while handling); it wins
    over `retry_on`."""
    retry_on: list[ExceptionName] = Field(default_factory=list)
    """When given, only failures that are, or were caused by, one of these exception classes
    retry; any other parks at once (an allow-list: ConnectionError, myapp.errors.Transient)."""
    immediate: ImmediateRetrySpec | None = None
    """Calls of the handler in process, a short pause apart, before a retryable failure goes
    to the ladder: `{attempts: 3, pause: 50ms}`. They do not count toward `attempts`, which
    counts deliveries."""
    faults: FaultsSpec | None = None
    """Publish a fault event for every message parked: `{exchange: orders.faults}`."""

    @model_validator(mode="after")
    def _one_list_per_name(self) -> RetrySpec:
        both = sorted(set(self.retry_on) & set(self.never_retry))
        if both:
            raise ValueError(
                f"{', '.join(both)} is in both `retry_on` and `never_retry`: keep it in one"
                " (never_retry wins, so in retry_on it would never retry)"
            )
        return self


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
    protect: bool = False
    """Never delete or replace this queue on the broker, whatever apply's flags (`--prune`,
    `--force`, `--allow-replace`): apply refuses such a change and says why. Kept in the
    stack's ownership record, so it still holds once the queue has left the spec; to delete
    it, apply it with `protect: false` first."""
    on_remove: Literal["delete", "retain"] = "delete"
    """What leaving the spec does: `delete` (with `--prune`), or `retain`: the queue stays on
    the broker as it is (messages and all) and leaves the stack's ownership record, so no
    later apply of this stack touches it. Kept in the record, like `protect`."""


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


class DelayTargetSpec(SpecModel):
    """Where delayed messages may be delivered: a queue, or an exchange with a routing key."""

    queue: Name | None = None
    """Deliver into this queue (its name is the address publishers use)."""
    name: Name | None = None
    """Address of an exchange target (publishers delay "to" this name)."""
    exchange: str | None = None
    """Exchange to deliver to (with `name` and `routing_key`)."""
    routing_key: str = ""
    """Routing key the message is delivered with to `exchange`."""

    @model_validator(mode="after")
    def _one_kind(self) -> DelayTargetSpec:
        if (self.queue is None) == (self.exchange is None):
            raise ValueError("a delay target has either `queue`, or `name` + `exchange`")
        if self.exchange is not None and self.name is None:
            raise ValueError("an exchange target needs a `name`: the address publishers use")
        return self

    @property
    def address(self) -> str:
        return self.queue if self.queue is not None else str(self.name)


class DelaySpec(SpecModel):
    """Delayed delivery without plugins. `levels: binary` (default) accepts any delay up to
    `max`: level k holds unit*2^k, so nothing waits behind a longer message. A list of
    durations gives fixed levels instead (a delay is rounded up to the next one)."""

    name: Name
    """Prefix of every object this declares (<name>.00, <name>.deliver, <name>.parking, ...)."""
    levels: Literal["binary", "fixed"] | list[Milliseconds] = "binary"
    """binary; fixed (the classic 18 levels 1s 5s 10s 30s 1m..10m 20m 30m 1h 2h); or your own
    fixed levels such as [1s, 5s, 10s, 30s, 1m]."""
    unit: Milliseconds = 1000
    """binary: the precision (delays are rounded up to whole units)."""
    max: Milliseconds | None = None
    """binary: the longest delay (sets the number of levels); default 28 levels."""
    count: int | None = Field(None, ge=1, le=64)
    """binary: number of levels instead of `max` (28 x 1s is about 8.5 years)."""
    round: Literal["up", "reject"] = "up"
    """fixed: round a delay up to the next level, or reject delays that are not a level."""
    queue_type: Literal["quorum", "classic"] = "quorum"
    """quorum (at-least-once dead-lettering: survives a node failure) or classic."""
    targets: list[DelayTargetSpec] = Field(default_factory=list)
    """Where delayed messages may go; queues retrying `via` this delay are added."""


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


FederationAckMode = Literal["on-confirm", "on-publish", "no-ack"]


class FederationUpstreamSpec(SpecModel):
    """A broker to federate from (a federation-upstream parameter)."""

    name: Name
    """Upstream name (what sets and federation policies refer to)."""
    uri: str | list[str]
    """AMQP URI(s) of the upstream broker, e.g. amqp://user@dc1:5672/%2F; several = failover.
    Credentials belong in `password` or a template ({{ env.X }}); they are masked in output."""
    password: SecretStr | None = None
    """Password inserted into every `uri` (percent-encoded): '{{ env.DC1_PASSWORD }}' or
    "{% include 'secrets/dc1' %}". Never printed."""
    prefetch_count: int | None = Field(None, ge=1)
    """Unacknowledged messages in flight per link (broker default 1000)."""
    reconnect_delay: Milliseconds | None = None
    """Wait before reconnecting after a link fails (e.g. 5s; broker default 5s)."""
    ack_mode: FederationAckMode | None = None
    """on-confirm (default, no loss), on-publish, or no-ack (fastest, may lose messages)."""
    trust_user_id: bool | None = None
    """Pass the user-id property through unchanged (validated upstream)."""
    exchange: str | None = None
    """Exchange federated from (default: the same name as the federated exchange)."""
    queue: str | None = None
    """Queue federated from (default: the same name as the federated queue)."""
    max_hops: int | None = Field(None, ge=1)
    """Exchange federation: how many federation links a message may cross (default 1)."""
    expires: Annotated[Milliseconds, Field(ge=1)] | None = None
    """Exchange federation: delete the upstream's buffer queue after the link is gone this long
    (messages published meanwhile are kept until then)."""
    message_ttl: Milliseconds | None = None
    """Exchange federation: TTL of messages in the upstream's buffer queue."""
    queue_type: Literal["classic", "quorum"] | None = None
    """Exchange federation (RabbitMQ 3.13+): type of the upstream's buffer queue."""


class ShovelEndpointSpec(SpecModel):
    """One end of a shovel: a broker (URI) and a queue, an exchange, or an AMQP 1.0 address."""

    uri: str | list[str]
    """AMQP URI(s) of the broker, e.g. amqp://user@dc2:5672/%2F (several: failover);
    `amqp:///VHOST` is a vhost of this broker, no credentials needed."""
    password: SecretStr | None = None
    """Password inserted into every `uri` (percent-encoded): '{{ env.DC2_PASSWORD }}'.
    Never printed."""
    protocol: Literal["amqp091", "amqp10"] = "amqp091"
    """amqp091 (queues and exchanges) or amqp10 (addresses)."""
    queue: str | None = None
    """AMQP 0-9-1: the queue to consume from (source) or to publish to (destination)."""
    exchange: str | None = None
    """AMQP 0-9-1: the exchange to bind a temporary queue to (source) or to publish to."""
    routing_key: str | None = None
    """AMQP 0-9-1, with `exchange`: the binding key (source) or the routing key messages get
    (destination; default: their own)."""
    address: str | None = None
    """AMQP 1.0: the address to consume from or to send to."""


class ShovelSpec(SpecModel):
    """A dynamic shovel: moves messages from a source to a destination, on its own broker
    connection, until deleted (a `shovel` parameter)."""

    name: Name
    """Shovel name."""
    source: ShovelEndpointSpec
    """Where messages come from."""
    destination: ShovelEndpointSpec
    """Where they go."""
    ack_mode: FederationAckMode | None = None
    """on-confirm (default: acknowledged at the source once the destination confirmed, no loss),
    on-publish, or no-ack (fastest, may lose messages)."""
    prefetch: int | None = Field(None, ge=1)
    """Unacknowledged messages in flight (broker default 1000)."""
    delete_after: Literal["never", "queue-length"] | Annotated[int, Field(ge=1)] | None = None
    """never (default), queue-length (the messages there at the start), or a number of
    messages; then the shovel deletes itself, and the next apply starts it again."""
    reconnect_delay: Milliseconds | None = None
    """Wait before reconnecting after a failure (e.g. 5s; broker default 5s)."""

    @model_validator(mode="after")
    def _ends(self) -> ShovelSpec:
        for side, end in (("source", self.source), ("destination", self.destination)):
            named = [k for k in ("queue", "exchange") if getattr(end, k) is not None]
            if end.protocol == "amqp10":
                if named or end.routing_key is not None:
                    raise ValueError(
                        f"shovel {self.name!r}: {side} speaks AMQP 1.0, which has `address`,"
                        " not queue, exchange or routing_key"
                    )
                if end.address is None:
                    raise ValueError(f"shovel {self.name!r}: {side} needs an `address`")
                continue
            if end.address is not None:
                raise ValueError(
                    f"shovel {self.name!r}: `address` is AMQP 1.0: set {side}.protocol: amqp10,"
                    " or give a queue or an exchange"
                )
            if len(named) > 1:
                raise ValueError(
                    f"shovel {self.name!r}: {side} has a queue or an exchange, not both"
                )
            if side == "source" and not named:
                raise ValueError(f"shovel {self.name!r}: the source needs a queue or an exchange")
            if end.routing_key is not None and end.exchange is None:
                raise ValueError(f"shovel {self.name!r}: {side}.routing_key goes with an exchange")
        return self


class UpstreamSetMemberSpec(SpecModel):
    """One upstream of a set, optionally with its own upstream exchange or queue."""

    upstream: Name
    """Name of a `federation.upstreams` entry."""
    exchange: str | None = None
    """Exchange to federate from on this upstream (overrides the upstream's)."""
    queue: str | None = None
    """Queue to federate from on this upstream (overrides the upstream's)."""


class UpstreamSetSpec(SpecModel):
    """A named set of upstreams (a federation-upstream-set parameter)."""

    name: Name
    """Set name (what federation policies refer to; `all` is built in)."""
    upstreams: list[Name | UpstreamSetMemberSpec] = Field(min_length=1)
    """Upstream names, or {upstream, exchange, queue} entries."""


class FederationPolicySpec(SpecModel):
    """Federate the exchanges or queues whose names match `pattern` (a policy)."""

    pattern: str
    """Regular expression over exchange or queue names (unanchored: use ^...$)."""
    upstream: Name | None = None
    """Federate from this upstream..."""
    upstream_set: Name | None = None
    """... or from this set of upstreams (`all`: every upstream of the vhost)."""
    name: Name | None = None
    """Policy name (default `federate.<exchanges|queues>.<index>`)."""
    priority: int = 0
    """Policy priority: only the highest-priority matching policy applies to an object, so a
    federated object must not match another policy of higher priority."""

    @model_validator(mode="after")
    def _one_source(self) -> FederationPolicySpec:
        if (self.upstream is None) == (self.upstream_set is None):
            raise ValueError("a federation policy names either `upstream` or `upstream_set`")
        return self


class FederationSpec(SpecModel):
    """Federation: upstream brokers, sets of them, and what is federated from them."""

    upstreams: list[FederationUpstreamSpec] = Field(default_factory=list)
    """Upstream brokers."""
    upstream_sets: list[UpstreamSetSpec] = Field(default_factory=list)
    """Named sets of upstreams."""
    exchanges: list[FederationPolicySpec] = Field(default_factory=list)
    """Federated exchanges: messages published upstream are also routed here."""
    queues: list[FederationPolicySpec] = Field(default_factory=list)
    """Federated queues: local consumers also receive upstream messages when idle upstream."""


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
