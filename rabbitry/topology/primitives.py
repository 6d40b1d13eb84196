"""The primitives a topology is made of, in the broker's own vocabulary.

Everything the spec declares (including delay, retry and sharding patterns) expands into these
objects; the broker state is read into the same objects, so the planner compares like with like.
Arguments keep the broker's names (``x-message-ttl``) and JSON values. Nothing here talks to a
broker or rejects what a broker could hold: strict checks of user input live in the spec model.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_core import PydanticUndefined

from rabbitry.topology.queue_types import QueueType as QueueType  # defined apart: see there
from rabbitry.uri import mask_value

JSON: TypeAlias = Any


class ResourceKey(tuple[str, ...]):
    """Identity of one broker object: ``(kind, vhost, *identity)``, named. Cluster-wide objects
    (users, global parameters) have vhost ''; a vhost's own key is ``("vhost", name)``.

    A tuple still: it compares, hashes and sorts as the plain tuple of its parts (plans, saved
    plan files and ownership records hold it as that list), so a plain tuple finds it in a
    dict. ``ResourceKey(parts)`` makes one from any iterable of parts; ``key.identity`` names
    the parts after the vhost as the kind's module does (``rabbitry.topology.kinds``)."""

    __slots__ = ()

    @classmethod
    def of(cls, kind: str, vhost: str, *identity: str) -> ResourceKey:
        return cls((kind, vhost, *identity))

    if TYPE_CHECKING:

        @property
        def kind(self) -> str: ...

        @property
        def vhost(self) -> str:
            """The vhost the object lives in ('' for cluster-wide; a vhost's own name)."""

    else:  # read at every object of a plan: a getter in C
        kind = property(itemgetter(0), doc="The kind's name (``Primitive.kind``).")
        vhost = property(
            itemgetter(1),
            doc="The vhost the object lives in ('' for cluster-wide; a vhost's own name).",
        )

    @property
    def identity(self) -> tuple[str, ...]:
        """What names the object within its vhost (``Primitive.identity``)."""
        return tuple(self[2:])

    @property
    def name(self) -> str:
        """The first part of its identity: the name of a queue, exchange, policy, user or
        global parameter, a binding's source, a parameter's component, a permission's user;
        a vhost's own name."""
        return self[2] if len(self) > 2 else self[1]


class ExchangeType(enum.StrEnum):
    """Exchange types rabbitry can declare (the last two need their plugins)."""

    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"
    CONSISTENT_HASH = "x-consistent-hash"
    MODULUS_HASH = "x-modulus-hash"


AnyExchangeType: TypeAlias = Annotated[ExchangeType | str, Field(union_mode="left_to_right")]
"""A known exchange type as its ``ExchangeType``; a type rabbitry does not know (a plugin's,
such as ``x-local-random``) as its name, declared and compared as it is."""


class DestinationType(enum.StrEnum):
    """What a binding delivers to."""

    QUEUE = "queue"
    EXCHANGE = "exchange"


class ApplyTo(enum.StrEnum):
    """Which objects a policy applies to (3.10 knows the first three only)."""

    ALL = "all"
    QUEUES = "queues"
    EXCHANGES = "exchanges"
    CLASSIC_QUEUES = "classic_queues"
    QUORUM_QUEUES = "quorum_queues"
    STREAMS = "streams"


def canonical_json(value: JSON) -> str:
    """One text per JSON value: keys sorted, integral floats as ints, so equal values match."""
    return json.dumps(_normalize(value), sort_keys=True, separators=(",", ":"))


def _normalize(value: JSON) -> JSON:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def same_json(a: JSON, b: JSON) -> bool:
    """JSON equality that ignores key order and 1 vs 1.0."""
    return canonical_json(a) == canonical_json(b)


class Primitive(BaseModel):
    """Base of every primitive: immutable, no unknown fields.

    Every instance counts all its fields as set (``model_fields_set``): pydantic's own record
    of which were given is a set per instance, up to 472 bytes, more than the rest of a
    primitive, and nothing reads it for values that cannot change."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False, defer_build=True)

    kind: ClassVar[str]
    _every_field: ClassVar[set[str]] = set()
    _defaults: ClassVar[dict[str, Any]] = {}
    _factories: ClassVar[dict[str, Callable[[], Any]]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._every_field = set(cls.model_fields)
        cls._defaults = {
            name: field.default
            for name, field in cls.model_fields.items()
            if field.default is not PydanticUndefined
        }
        cls._factories = {
            name: field.default_factory  # type: ignore[misc]
            for name, field in cls.model_fields.items()
            if field.default_factory is not None
        }

    @classmethod
    def trusted(cls, **values: Any) -> Self:
        """An instance made of ``values`` that already have their fields' types, unvalidated:
        what the spec's models checked, or what the broker's answers were converted into
        field by field. A large plan makes 100,000 primitives, and pydantic's validation of
        each is the larger part of making it. A field that is unknown or missing is a bug and
        raises TypeError; a value of the wrong type is not looked for (tests compare these
        instances with validated ones)."""
        given = values.keys()
        if not given <= cls._every_field:
            raise TypeError(f"{cls.__name__} has no field {sorted(given - cls._every_field)}")
        fields = {**cls._defaults, **values}
        for name, factory in cls._factories.items():
            if name not in values:
                fields[name] = factory()
        if len(fields) != len(cls._every_field):
            raise TypeError(f"{cls.__name__} needs {sorted(cls._every_field - fields.keys())}")
        # what pydantic's model_construct sets, without its general loop over the fields
        made = cls.__new__(cls)
        object.__setattr__(made, "__dict__", fields)
        object.__setattr__(made, "__pydantic_fields_set__", cls._every_field)
        object.__setattr__(made, "__pydantic_extra__", None)
        object.__setattr__(made, "__pydantic_private__", None)
        return made

    def model_post_init(self, context: Any, /) -> None:
        # one shared set per class (frozen models never add to it; copies get their own)
        object.__setattr__(self, "__pydantic_fields_set__", self._every_field)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # passwords in URIs and password-like keys never reach a repr, a log or a traceback
        for name, value in super().__repr_args__():
            secret = name is not None and "password" in name and isinstance(value, str)
            yield name, "***" if secret else mask_value(value)

    def identity(self) -> tuple[str, ...]:
        """The fields that name this object within its vhost."""
        raise NotImplementedError

    def key(self, vhost: str) -> ResourceKey:
        return ResourceKey((self.kind, vhost, *self.identity()))

    def settings(self) -> JSON:
        """What is compared to decide whether the broker's object matches the desired one."""
        return self.model_dump(mode="json")


class Declared(Primitive):
    """What AMQP declares (exchanges, queues): named in its vhost, of a type each kind says,
    durable or not, deleted with its last user or not. The fields keep this order in every
    kind (a kind's own ``type`` takes its place): plans and saved plans write them so."""

    name: str
    type: Any
    durable: bool = True
    auto_delete: bool = False

    def identity(self) -> tuple[str, ...]:
        return (self.name,)


class Exchange(Declared):
    """An exchange; ``arguments`` carries ``alternate-exchange`` and plugin arguments."""

    kind: ClassVar[str] = "exchange"
    type: AnyExchangeType = ExchangeType.DIRECT
    internal: bool = False
    arguments: dict[str, JSON] = Field(default_factory=dict)


class Queue(Declared):
    """A queue; ``type`` is kept out of ``arguments`` (it is ``x-queue-type`` on the wire)."""

    kind: ClassVar[str] = "queue"
    type: QueueType = QueueType.CLASSIC
    arguments: dict[str, JSON] = Field(default_factory=dict)

    def wire_arguments(self) -> dict[str, JSON]:
        """Arguments as declared on the broker, ``x-queue-type`` included."""
        return {**self.arguments, "x-queue-type": self.type.value}


class Binding(Primitive):
    """A binding; its identity is all of it, so a changed binding is a delete plus a create."""

    kind: ClassVar[str] = "binding"
    source: str
    destination: str
    destination_type: DestinationType = DestinationType.QUEUE
    routing_key: str = ""
    arguments: dict[str, JSON] = Field(default_factory=dict)

    def identity(self) -> tuple[str, ...]:
        return (
            self.source,
            self.destination_type.value,
            self.destination,
            self.routing_key,
            canonical_json(self.arguments) if self.arguments else "{}",
        )


class Policy(Primitive):
    """A user policy: changed in place by the broker."""

    kind: ClassVar[str] = "policy"
    name: str
    pattern: str
    apply_to: ApplyTo = ApplyTo.ALL
    priority: int = 0
    definition: dict[str, JSON]

    def identity(self) -> tuple[str, ...]:
        return (self.name,)


class OperatorPolicy(Policy):
    """An operator policy: caps that users' policies cannot override."""

    kind: ClassVar[str] = "operator_policy"
    apply_to: ApplyTo = ApplyTo.QUEUES


class Parameter(Primitive):
    """A vhost-scoped runtime parameter (federation upstreams and upstream sets, shovels)."""

    kind: ClassVar[str] = "parameter"
    component: str
    name: str
    value: JSON

    def identity(self) -> tuple[str, ...]:
        return (self.component, self.name)


class Permission(Primitive):
    """A user's configure/write/read regexes in one vhost."""

    kind: ClassVar[str] = "permission"
    user: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def identity(self) -> tuple[str, ...]:
        return (self.user,)


class TopicPermission(Primitive):
    """A user's write/read patterns on the routing keys of one topic exchange."""

    kind: ClassVar[str] = "topic_permission"
    user: str
    exchange: str
    write: str = ".*"
    read: str = ".*"

    def identity(self) -> tuple[str, ...]:
        return (self.user, self.exchange)


class User(Primitive):
    """A broker user. The password is a secret: never printed, compared through its hash."""

    kind: ClassVar[str] = "user"
    name: str
    password: SecretStr | None = None
    password_hash: str | None = None
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: tuple[str, ...] = ()
    limits: dict[str, int] = Field(default_factory=dict)
    """``max-connections``, ``max-channels``: set ones only."""

    def identity(self) -> tuple[str, ...]:
        return (self.name,)

    def settings(self) -> JSON:
        # The password itself never leaves this object; the planner checks it against the hash.
        out: dict[str, JSON] = {"tags": sorted(self.tags)}
        if self.limits:  # only when set: a recorded digest of a user without stays the same
            out["limits"] = dict(self.limits)
        return out


class GlobalParameter(Primitive):
    """A cluster-wide runtime parameter."""

    kind: ClassVar[str] = "global_parameter"
    name: str
    value: JSON

    def identity(self) -> tuple[str, ...]:
        return (self.name,)


class Vhost(Primitive):
    """A virtual host and everything declared inside it."""

    kind: ClassVar[str] = "vhost"
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: QueueType | None = None
    protected_from_deletion: bool | None = False
    """The broker refuses to delete the vhost (RabbitMQ 4.0.6+). None: read from a broker that
    keeps no such setting (older), so there is nothing to compare."""
    limits: dict[str, int] = Field(default_factory=dict)
    """``max-connections``, ``max-queues``: set ones only."""
    exchanges: tuple[Exchange, ...] = ()
    queues: tuple[Queue, ...] = ()
    bindings: tuple[Binding, ...] = ()
    policies: tuple[Policy, ...] = ()
    operator_policies: tuple[OperatorPolicy, ...] = ()
    parameters: tuple[Parameter, ...] = ()
    permissions: tuple[Permission, ...] = ()
    topic_permissions: tuple[TopicPermission, ...] = ()
    retried_by_broker: tuple[str, ...] = ()
    """Queues whose retries rely on the broker's delayed retry (``retry: {via: broker}``):
    not a setting of the broker, but what the version table judges (RabbitMQ 4.3+)."""
    guards: tuple[tuple[str, str, str], ...] = ()
    """(kind, name, guard) of the spec's `protect: true` (guard ``protect``) and `on_remove:
    retain` (guard ``retain``) objects: not settings of the broker, but what the planner
    honours and the stack's ownership record keeps (``provisioner.protection``)."""

    def identity(self) -> tuple[str, ...]:
        return ()

    def key(self, vhost: str = "") -> ResourceKey:
        return ResourceKey(("vhost", self.name))

    def settings(self) -> JSON:
        out: dict[str, JSON] = {"description": self.description, "tags": sorted(self.tags)}
        # Unset means classic: RabbitMQ 3.x reports no type for such a vhost, 4.x reports
        # "classic"; both must compare equal or a plan never converges.
        qtype = self.default_queue_type
        if qtype is not None and qtype is not QueueType.CLASSIC:
            out["default_queue_type"] = qtype.value
        if self.protected_from_deletion:  # only when set: recorded digests stay the same
            out["protected_from_deletion"] = True
        if self.limits:  # only when set: a recorded digest of a vhost without stays the same
            out["limits"] = dict(self.limits)
        return out

    def members(self) -> Iterator[Primitive]:
        """Everything inside the vhost, in the order the broker needs them created."""
        yield from self.permissions
        yield from self.topic_permissions
        yield from self.exchanges
        yield from self.queues
        yield from self.bindings
        yield from self.policies
        yield from self.operator_policies
        yield from self.parameters


Resource: TypeAlias = Primitive
"""Any primitive, as the planner sees it."""

GLOBAL = ""
"""The vhost slot of keys for users and global parameters."""


class Topology(Primitive):
    """The whole expanded topology of one spec (``name`` names the stack that owns it)."""

    kind: ClassVar[str] = "topology"
    name: str = "default"
    vhosts: tuple[Vhost, ...] = ()
    users: tuple[User, ...] = ()
    global_parameters: tuple[GlobalParameter, ...] = ()

    def identity(self) -> tuple[str, ...]:
        return (self.name,)

    def resources(self) -> dict[ResourceKey, Primitive]:
        """Every object by key, vhosts first, in creation order."""
        out: dict[ResourceKey, Primitive] = {}
        for user in self.users:
            out[user.key(GLOBAL)] = user
        for param in self.global_parameters:
            out[param.key(GLOBAL)] = param
        for vhost in self.vhosts:
            out[vhost.key()] = vhost
            for member in vhost.members():
                out[member.key(vhost.name)] = member
        return out

    def vhost(self, name: str) -> Vhost | None:
        return next((v for v in self.vhosts if v.name == name), None)


ResourceKind = Literal[
    "vhost",
    "user",
    "permission",
    "topic_permission",
    "exchange",
    "queue",
    "binding",
    "policy",
    "operator_policy",
    "parameter",
    "global_parameter",
]
"""Every kind of broker object, in dependency order."""

KIND_ORDER: tuple[ResourceKind, ...] = get_args(ResourceKind)
"""Dependency order for creation; deletion runs it backwards."""
