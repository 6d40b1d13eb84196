"""Broker state: what the management API says exists, read into the same primitives as the spec.

``read_state`` makes one definitions read per vhost of interest (plus permissions and queue
statistics) and a few cluster-wide reads; ``observed_vhost`` is the pure conversion, unit-tested
on recorded API answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient, ObjectNotFound, q
from rabbitry.provisioner.ownership import (
    OwnershipRecord,
    RecordUnreadable,
    owners_by_key,
    records_from,
)
from rabbitry.topology.plugin_objects import BROKER_EXCHANGE_WHY, plugin_exchange, plugin_queue
from rabbitry.topology.primitives import (
    GLOBAL,
    ApplyTo,
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    GlobalParameter,
    OperatorPolicy,
    Parameter,
    Permission,
    Policy,
    Queue,
    QueueType,
    ResourceKey,
    TopicPermission,
    Topology,
    User,
    Vhost,
)
from rabbitry.uri import mask_text

JSONDict = dict[str, Any]


@dataclass(frozen=True)
class QueueStats:
    """A queue's message and consumer counts, and where they come from: ``amqp`` (exact, asked
    of the queue) or ``statistics`` (the management API's, a few seconds stale)."""

    messages: int | None
    consumers: int | None
    source: str = "statistics"
    note: str = ""
    """Why the counts are not exact, when they are not."""


Counter = Callable[[str, str], tuple[int, int]]
"""``(vhost, queue) -> (messages, consumers)``, exact (``AmqpQueueCounter``)."""


class QueueStatsReader(Mapping[ResourceKey, QueueStats]):
    """Queue counts read one queue at a time, when the planner asks for them: exact from
    ``counter`` when it can reach the broker, from the management statistics otherwise.

    The planner needs counts only for queues it would replace or delete; reading the
    statistics of every queue of a vhost cost the broker seconds at tens of thousands of
    queues."""

    def __init__(self, client: ManagementClient, counter: Counter | None = None) -> None:
        self.client = client
        self.counter = counter
        self.counter_failed = ""
        self.read: dict[ResourceKey, QueueStats | None] = {}

    def _exact(self, vhost: str, name: str, stats: QueueStats) -> QueueStats:
        if self.counter is None:
            return stats
        if self.counter_failed:
            return replace(stats, note=self.counter_failed)
        try:
            messages, consumers = self.counter(vhost, name)
        except BrokerError as exc:
            # one failure says it for every queue: the AMQP side is unreachable
            self.counter_failed = f"AMQP unreachable: {mask_text(str(exc))}"
            return replace(stats, note=self.counter_failed)
        return QueueStats(messages, consumers, source="amqp")

    def __getitem__(self, key: ResourceKey) -> QueueStats:
        key = ResourceKey(key)  # a plain tuple of its parts finds it too
        if key.kind != "queue" or len(key.identity) != 1:
            raise KeyError(key)  # only queues have statistics
        if key not in self.read:
            vhost, name = key.vhost, key.name
            item = self.client.get_optional(f"/queues/{q(vhost)}/{q(name)}")
            self.read[key] = (
                None
                if item is None
                else self._exact(
                    vhost,
                    name,
                    QueueStats(messages=item.get("messages"), consumers=item.get("consumers")),
                )
            )
        found = self.read[key]
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[ResourceKey]:
        return (k for k, v in self.read.items() if v is not None)

    def __len__(self) -> int:
        return sum(1 for v in self.read.values() if v is not None)


@dataclass(frozen=True)
class BrokerState:
    """What exists on the broker in the vhosts a plan looks at, and what this stack owns."""

    topology: Topology
    record: OwnershipRecord
    queue_stats: Mapping[ResourceKey, QueueStats] = field(default_factory=dict)
    password_hashes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """user name -> (password_hash, hashing_algorithm), to check passwords without sending them."""
    broker_version: str = ""
    node_count: int | None = None
    """Nodes in the cluster (None when not read): quorum queues need enough of them."""
    other_owners: Mapping[ResourceKey, tuple[str, ...]] = field(default_factory=dict)
    """Key -> the other stacks whose ownership records list it."""
    unreadable: Mapping[str, RecordUnreadable] = field(default_factory=dict)
    """Other stacks whose records cannot be read (what they own is unknown), by stack name."""

    def resources(self) -> dict[ResourceKey, Any]:
        return self.topology.resources()


def _enum_or_none(enum_type: Any, value: Any) -> Any:
    """The member of ``enum_type`` whose value is ``value`` (or which is ``value``), or None;
    a dictionary lookup rather than the enum's call, once per object of a large vhost."""
    try:
        return enum_type._value2member_map_.get(value)
    except TypeError:  # a value that cannot be hashed is no member's
        return None


def _taken(definitions: JSONDict, kind: str) -> Iterator[JSONDict]:
    """The answers of one kind, in order, each let go as soon as it is converted: the answers
    about a vhost of 50,000 objects and their primitives are never all held at once. A kind
    still being read is a function that waits for it (``ManagementClient.vhost_objects``)."""
    found = definitions.pop(kind, None)
    items: list[JSONDict] = (found() if callable(found) else found) or []
    items.reverse()
    while items:
        yield items.pop()


def _read_vhosts(
    client: ManagementClient,
    wanted: set[str],
    existing: Mapping[str, JSONDict],
    limits: Mapping[str, Any],
    vanished: list[str] | None,
    left_out: list[str] | None,
) -> list[Vhost]:
    """The wanted vhosts that exist, each read whole (``read_state``: ``vanished``)."""
    observed_vhosts: list[Vhost] = []
    for name in sorted(wanted):
        meta = existing.get(name)
        if meta is None:
            continue
        its_left_out: list[str] = []
        try:
            observed = observed_vhost(
                name,
                meta,
                client.vhost_objects(name),
                client.permissions(name),
                client.topic_permissions(name),
                limits.get(name),
                left_out=its_left_out,
            )
        except ObjectNotFound:
            if vanished is None or client.vhost_exists(name):
                raise
            vanished.append(name)
            continue
        if vanished is not None and not client.vhost_exists(name):
            # deleted after some of its reads: what was read may be half of it
            vanished.append(name)
            continue
        if left_out is not None:
            left_out.extend(its_left_out)
        observed_vhosts.append(observed)

    return observed_vhosts


def _read_users(
    client: ManagementClient, wanted: set[str], limits: Mapping[str, Any]
) -> tuple[list[User], dict[str, tuple[str, str]]]:
    """The wanted users, and each one's password hash and its algorithm (for the plan to
    tell whether the spec's password is the one the broker holds)."""
    observed_users: list[User] = []
    hashes: dict[str, tuple[str, str]] = {}
    if wanted:
        for item in client.users():
            if item["name"] in wanted:
                tags = tags_of(item.get("tags"))
                observed_users.append(
                    User(
                        name=item["name"],
                        tags=tuple(tags),
                        limits=limits_of(limits.get(item["name"])),
                    )
                )
                hashes[item["name"]] = (
                    item.get("password_hash", ""),
                    item.get("hashing_algorithm", ""),
                )
    return observed_users, hashes


def observed_vhost(
    name: str,
    meta: JSONDict,
    definitions: JSONDict,
    permissions: Iterable[JSONDict] = (),
    topic_permissions: Iterable[JSONDict] = (),
    limits: Mapping[str, Any] | None = None,
    *,
    left_out: list[str] | None = None,
) -> Vhost:
    """Convert one vhost's management answers into a ``Vhost`` primitive; the lists are taken
    out of ``definitions`` as they are read. What the broker made for its plugins (their
    internal queues and exchanges, told by ``plugin_objects``, and the bindings to or from
    them) is left out, one line each in ``left_out``; exchanges of types rabbitry does not know
    are kept as they are."""
    left = left_out if left_out is not None else []
    exchanges, gone_exchanges = _observed_exchanges(name, definitions, left)
    queues, gone_queues = _observed_queues(name, definitions, left)
    bindings = _observed_bindings(name, definitions, left, gone_exchanges, gone_queues)
    policies = [
        Policy(
            name=item["name"],
            pattern=item["pattern"],
            apply_to=_enum_or_none(ApplyTo, item.get("apply-to")) or ApplyTo.ALL,
            priority=int(item.get("priority", 0)),
            definition=dict(item.get("definition") or {}),
        )
        for item in _taken(definitions, "policies")
    ]
    operator_policies, parameters = _observed_parameters(definitions)
    default_type = _enum_or_none(QueueType, meta.get("default_queue_type"))
    metadata = meta.get("metadata") or {}
    tags = tags_of(meta.get("tags", metadata.get("tags", [])))
    # 4.0.6 on say it (false too, at the top of the vhost); an older broker keeps no such thing
    protected = meta.get("protected_from_deletion", metadata.get("protected_from_deletion"))
    return Vhost(
        name=name,
        description=str(meta.get("description", metadata.get("description", "")) or ""),
        tags=tuple(tags),
        default_queue_type=default_type,
        protected_from_deletion=None if protected is None else protected is True,
        limits=limits_of(limits),
        exchanges=tuple(exchanges),
        queues=tuple(queues),
        bindings=tuple(bindings),
        policies=tuple(policies),
        operator_policies=tuple(operator_policies),
        parameters=tuple(parameters),
        permissions=tuple(
            Permission(user=p["user"], configure=p["configure"], write=p["write"], read=p["read"])
            for p in permissions
        ),
        topic_permissions=tuple(
            TopicPermission(
                user=p["user"], exchange=p["exchange"], write=p["write"], read=p["read"]
            )
            for p in topic_permissions
        ),
    )


def _observed_exchanges(
    name: str, definitions: JSONDict, left: list[str]
) -> tuple[list[Exchange], set[str]]:
    """The vhost's exchanges, and the names of those left out for a plugin (bindings to or
    from them go too)."""
    exchanges: list[Exchange] = []
    gone_exchanges: set[str] = set()
    for item in _taken(definitions, "exchanges"):
        # a type rabbitry does not know (a plugin's) is kept as its name: it round-trips
        exchange_type = _enum_or_none(ExchangeType, item.get("type")) or str(item.get("type"))
        arguments = item.get("arguments") or {}
        why = plugin_exchange(arguments, item["name"])
        if why:
            if why is not BROKER_EXCHANGE_WHY:  # bindings from the broker's own stay
                gone_exchanges.add(item["name"])
            left.append(f"exchange {name}/{item['name']}: {why}")
            continue
        exchanges.append(
            Exchange.trusted(
                name=item["name"],
                type=exchange_type,
                durable=bool(item.get("durable", True)),
                auto_delete=bool(item.get("auto_delete", False)),
                internal=bool(item.get("internal", False)),
                arguments=dict(arguments),
            )
        )
    return exchanges, gone_exchanges


def _observed_queues(
    name: str, definitions: JSONDict, left: list[str]
) -> tuple[list[Queue], set[str]]:
    """The vhost's queues, and the names of those left out for a plugin."""
    queues: list[Queue] = []
    gone_queues: set[str] = set()
    for item in _taken(definitions, "queues"):
        arguments = dict(item.get("arguments") or {})
        why = plugin_queue(item["name"], arguments, str(item.get("type") or ""))
        if why:
            # federation links, shard queues, MQTT and STOMP subscriptions: never rabbitry's
            gone_queues.add(item["name"])
            left.append(f"queue {name}/{item['name']}: {why}")
            continue
        queue_type = arguments.pop("x-queue-type", None) or item.get("type") or "classic"
        queues.append(
            Queue.trusted(
                name=item["name"],
                type=_enum_or_none(QueueType, queue_type) or QueueType.CLASSIC,
                durable=bool(item.get("durable", True)),
                auto_delete=bool(item.get("auto_delete", False)),
                arguments=arguments,
            )
        )
    return queues, gone_queues


def _observed_bindings(
    name: str,
    definitions: JSONDict,
    left: list[str],
    gone_exchanges: set[str],
    gone_queues: set[str],
) -> list[Binding]:
    """The vhost's bindings, but those of the default exchange and those to or from what
    was left out."""
    bindings: list[Binding] = []
    for item in _taken(definitions, "bindings"):
        source = item.get("source")
        if not source:
            continue  # the default exchange's implicit bindings are not declared
        to_queue = item.get("destination_type", "queue") == "queue"
        destination = item["destination"]
        if source in gone_exchanges or destination in (gone_queues if to_queue else gone_exchanges):
            left.append(f"binding {name}/{source} -> {destination}: to or from an object left out")
            continue
        bindings.append(
            Binding.trusted(
                source=source,
                destination=destination,
                destination_type=DestinationType(item.get("destination_type", "queue")),
                routing_key=item.get("routing_key", ""),
                arguments=dict(item.get("arguments") or {}),
            )
        )
    return bindings


def _observed_parameters(definitions: JSONDict) -> tuple[list[OperatorPolicy], list[Parameter]]:
    """The vhost's operator policies and runtime parameters (its limits are read apart)."""
    operator_policies: list[OperatorPolicy] = []
    parameters: list[Parameter] = []
    for item in _taken(definitions, "parameters"):
        if item.get("component") == "operator_policy":
            value = item.get("value") or {}
            operator_policies.append(
                OperatorPolicy(
                    name=item["name"],
                    pattern=value.get("pattern", ""),
                    apply_to=_enum_or_none(ApplyTo, value.get("apply-to")) or ApplyTo.QUEUES,
                    priority=int(value.get("priority", 0)),
                    definition=dict(value.get("definition") or {}),
                )
            )
        elif item.get("component") != "vhost-limits":
            # a vhost's limits are a parameter to the broker too: read once, as its limits
            parameters.append(
                Parameter(component=item["component"], name=item["name"], value=item.get("value"))
            )
    return operator_policies, parameters


def limits_of(value: Any) -> dict[str, int]:
    """Limits as the API and definitions files write them: an object, a list of objects, or
    [] for none; anything else is no limit."""
    out: dict[str, int] = {}
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, Mapping):
            out.update({str(k): int(v) for k, v in item.items() if isinstance(v, int | float)})
    return out


def tags_of(value: Any) -> tuple[str, ...]:
    """Tags as a list, or as one comma-separated string (older brokers)."""
    if isinstance(value, str):
        return tuple(t for t in value.split(",") if t)
    return tuple(str(t) for t in value or ())


def read_state(
    client: ManagementClient,
    stack: str,
    vhosts: Iterable[str],
    users: Iterable[str] = (),
    global_parameters: Iterable[str] = (),
    with_stats: bool = True,
    counter: Counter | None = None,
    left_out: list[str] | None = None,
    vanished: list[str] | None = None,
) -> BrokerState:
    """Read the vhosts of interest (the spec's and the stack's recorded ones) from the broker;
    queue counts, read when asked for, come exact from ``counter`` where it reaches the queue.
    With ``vanished``, a vhost deleted while it is read (a read of it answers 404, or it is gone
    once its reads are done) is left out whole, never in part, and named there; without it,
    that 404 is an error."""
    # one read gives every stack's record (and the global parameters the spec declares)
    parameters = client.global_parameters()
    unreadable: dict[str, RecordUnreadable] = {}
    records = records_from(parameters, unreadable)
    if stack in unreadable:  # what this stack owns must be known to plan it
        raise unreadable.pop(stack)
    record = records.get(stack) or OwnershipRecord(stack)
    wanted_vhosts = set(vhosts) | record.vhosts()
    wanted_users = set(users) | {k.name for k in record.keys if k.kind == "user"}
    wanted_params = set(global_parameters) | {
        k.name for k in record.keys if k.kind == "global_parameter"
    }

    existing = {v["name"]: v for v in client.vhosts()}
    vhost_limits = {item.get("vhost"): item.get("value") for item in client.get("/vhost-limits")}
    user_limits = {item.get("user"): item.get("value") for item in client.get("/user-limits")}
    observed_vhosts = _read_vhosts(
        client, wanted_vhosts, existing, vhost_limits, vanished, left_out
    )
    observed_users, hashes = _read_users(client, wanted_users, user_limits)
    observed_params = []
    if wanted_params:
        for item in parameters:
            if item["name"] in wanted_params:
                observed_params.append(GlobalParameter(name=item["name"], value=item.get("value")))

    topology = Topology(
        name=stack,
        vhosts=tuple(observed_vhosts),
        users=tuple(observed_users),
        global_parameters=tuple(observed_params),
    )
    return BrokerState(
        topology=topology,
        record=record,
        queue_stats=QueueStatsReader(client, counter) if with_stats else {},
        password_hashes=hashes,
        node_count=len(client.get("/nodes", params={"columns": "name"})),
        other_owners=owners_by_key(records, but=stack),
        unreadable=unreadable,
    )


def read_records(
    client: ManagementClient, unreadable: dict[str, RecordUnreadable] | None = None
) -> dict[str, OwnershipRecord]:
    """Every stack's ownership record on the broker, by stack name (one read); with
    ``unreadable``, those that cannot be read go there (``records_from``)."""
    return records_from(client.global_parameters(), unreadable)


__all__ = ["GLOBAL", "BrokerState", "QueueStats", "observed_vhost", "read_records", "read_state"]
