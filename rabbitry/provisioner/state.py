"""Broker state: what the management API says exists, read into the same primitives as the spec.

``read_state`` makes one definitions read per vhost of interest (plus permissions and queue
statistics) and a few cluster-wide reads; ``observed_vhost`` is the pure conversion, unit-tested
on recorded API answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rabbitry.errors import BrokerError, ObjectNotFound, RecordUnreadable
from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.ownership import OwnershipRecord, owners_by_key, records_from
from rabbitry.topology.kinds import in_vhosts, kind_of
from rabbitry.topology.kinds.kind import Reading
from rabbitry.topology.kinds.user import user_of
from rabbitry.topology.kinds.vhost import VhostKind
from rabbitry.topology.primitives import (
    GLOBAL,
    GlobalParameter,
    Primitive,
    ResourceKey,
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
            objects = client.vhost_objects(name)
            for kind in in_vhosts():  # the kinds the definitions do not hold: read apart
                if kind.listing is not None and kind.section is not None:
                    objects[kind.section] = client.get(kind.listing.format(vhost=q(name)))
            observed = observed_vhost(
                name, meta, objects, limits=limits.get(name), left_out=its_left_out
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
                observed_users.append(user_of(item, limits.get(item["name"])))
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
    """Convert one vhost's management answers into a ``Vhost`` primitive, kind after kind in
    creation order, each by its module; the lists are taken out of ``definitions`` as they are
    read. What the broker made for its plugins (their internal queues and exchanges, told by
    ``plugin_objects``, and the bindings to or from them) is left out, one line each in
    ``left_out``; exchanges of types rabbitry does not know are kept as they are."""
    reading = Reading(name, left_out if left_out is not None else [])
    apart = {"permissions": permissions, "topic_permissions": topic_permissions}
    apart = {section: items for section, items in apart.items() if items}
    shared: dict[str, list[JSONDict]] = {}
    members: dict[str, tuple[Primitive, ...]] = {}
    for kind in in_vhosts():
        section = kind.section or ""
        items: Iterable[JSONDict]
        if section in apart:  # read from their own API paths
            items = apart[section]
        elif sum(other.section == section for other in in_vhosts()) > 1:
            # a small list of more than one kind (parameters: operator policies and others)
            if section not in shared:
                shared[section] = list(_taken(definitions, section))
            items = [item for item in shared[section] if kind.reads(item)]
        else:
            items = _taken(definitions, section)
        members[kind.vhost_field or ""] = tuple(kind.observed(items, reading))
    vhosts = kind_of("vhost")
    assert isinstance(vhosts, VhostKind)
    return vhosts.observed_vhost(name, meta, limits, members)


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
