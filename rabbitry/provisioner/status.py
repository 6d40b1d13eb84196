"""What the broker is doing with a spec's distributed parts: federation links and shard spread.

``link_states`` is pure: the links the spec implies (``expected_links``) against the broker's
``/api/federation-links/{vhost}`` answer. ``measure_distribution`` publishes sample keys through
a scratch copy of a sharded exchange (same type, hash source and weights, bound in the same
order to exclusive queues), so it measures the broker's own hashing without touching the real
shard queues, and then reads back where every key went.
"""

from __future__ import annotations

import enum
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from rabbitry.amqp.channel import Channel
from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient, q
from rabbitry.topology.patterns.federation import FederatedObject, expected_links
from rabbitry.topology.patterns.sharding import HashSource, Sharding
from rabbitry.topology.primitives import Topology
from rabbitry.topology.spec.model import Spec
from rabbitry.uri import mask_text

__all__ = [
    "DistributionReport",
    "LinkState",
    "LinkStatus",
    "ShovelState",
    "federation_status",
    "link_states",
    "measure_distribution",
    "shovel_states",
    "shovel_status",
]


class LinkStatus(enum.StrEnum):
    """A federation link's state as the broker reports it, plus ``missing``."""

    RUNNING = "running"
    STARTING = "starting"
    ERROR = "error"
    SHUTDOWN = "shutdown"
    MISSING = "missing"
    """The spec implies the link but the broker runs none (policy not applied, plugin off)."""
    OTHER = "other"


@dataclass(frozen=True)
class LinkState:
    """One federation link: which object, from which upstream, in what state and why."""

    vhost: str
    type: str
    """What the link federates: ``exchange`` or ``queue`` (``name`` names it)."""
    name: str
    upstream: str
    """The upstream the link reads from."""
    status: LinkStatus
    reason: str = ""
    """The broker's error for links in ``error`` (credentials masked)."""
    declared: bool = True
    """Implied by the spec (False: a link the broker runs that the spec does not declare)."""

    @property
    def running(self) -> bool:
        return self.status is LinkStatus.RUNNING

    def to_json(self) -> dict[str, Any]:
        return _fields_json(self)


def _fields_json(state: LinkState | ShovelState) -> dict[str, Any]:
    """A state's fields in their order, an enum as its value: what ``--json`` prints."""
    out: dict[str, Any] = {}
    for item in fields(state):
        value = getattr(state, item.name)
        out[item.name] = value.value if isinstance(value, enum.Enum) else value
    return out


# A status listing's path under /api -> what it tells of, and the plugin that serves it.
_STATUS_APIS = {
    "federation-links": ("federation", "rabbitmq_federation_management"),
    "shovels": ("shovel", "rabbitmq_shovel_management"),
}


def _status_listing(client: ManagementClient, path: str, vhost: str) -> Any:
    """The broker's ``/api/{path}/{vhost}`` answer, which a broker without its plugin lacks."""
    response = client.request("GET", f"/{path}/{q(vhost)}", allow=(404,))
    if response.status_code == 404:
        what, plugin = _STATUS_APIS[path]
        raise BrokerError(
            f"the broker has no {what} status API: enable {plugin}"
            f" (`rabbitmq-plugins enable {plugin}`)"
        )
    return response.json()


def _status(text: str) -> LinkStatus:
    try:
        return LinkStatus(text)
    except ValueError:
        return LinkStatus.OTHER


def link_states(
    vhost: str, expected: Iterable[FederatedObject], observed: Iterable[dict[str, Any]]
) -> list[LinkState]:
    """Every expected link with its observed state, then links the spec does not declare."""
    seen: dict[FederatedObject, dict[str, Any]] = {}
    for item in observed:
        link_type = str(item.get("type", ""))
        name = item.get(link_type) or item.get("exchange") or item.get("queue") or ""
        seen[FederatedObject(link_type, str(name), str(item.get("upstream", "")))] = item

    def state(link: FederatedObject, item: dict[str, Any], declared: bool) -> LinkState:
        return LinkState(
            vhost,
            link.type,
            link.name,
            link.upstream,
            _status(str(item.get("status", ""))),
            mask_text(str(item.get("error") or "")),
            declared=declared,
        )

    out: list[LinkState] = []
    wanted = list(expected)
    for link in wanted:
        found = seen.get(link)
        if found is None:
            out.append(LinkState(vhost, link.type, link.name, link.upstream, LinkStatus.MISSING))
        else:
            out.append(state(link, found, declared=True))
    out += [state(link, item, False) for link, item in sorted(seen.items()) if link not in wanted]
    return out


def federation_status(client: ManagementClient, spec: Spec, topology: Topology) -> list[LinkState]:
    """The state of every federation link of the spec's vhosts (and undeclared ones there)."""
    out: list[LinkState] = []
    for vhost_spec in spec.vhosts:
        if vhost_spec.federation is None:
            continue
        vhost = topology.vhost(vhost_spec.name)
        if vhost is None:
            continue
        observed = _status_listing(client, "federation-links", vhost.name)
        out.extend(link_states(vhost.name, expected_links(vhost_spec.federation, vhost), observed))
    return out


@dataclass(frozen=True)
class ShovelState:
    """One dynamic shovel: its state as the broker reports it (``missing``: declared, not
    running; ``done``: declared with ``delete_after`` and gone, as it should be once done)."""

    vhost: str
    name: str
    status: str
    """``missing``, ``done``, or the state the broker reports (``running``, ...)."""
    reason: str = ""
    """The broker's error for a shovel that is not running (credentials masked)."""
    declared: bool = True
    """In the spec (False: a dynamic shovel the broker runs that the spec does not declare)."""

    @property
    def healthy(self) -> bool:
        return self.status in ("running", "done")

    def to_json(self) -> dict[str, Any]:
        return _fields_json(self)


def shovel_states(
    vhost: str, declared: Iterable[tuple[str, bool]], observed: Iterable[dict[str, Any]]
) -> list[ShovelState]:
    """Each declared shovel (name, deletes itself when done) with its state, then the dynamic
    shovels running in the vhost that the spec does not declare."""
    seen = {str(i.get("name")): i for i in observed if i.get("type", "dynamic") == "dynamic"}
    out = []
    names = set()
    for name, self_deleting in declared:
        names.add(name)
        item = seen.get(name)
        if item is None:
            out.append(ShovelState(vhost, name, "done" if self_deleting else "missing"))
        else:
            reason = mask_text(str(item.get("reason") or item.get("error") or ""))
            out.append(ShovelState(vhost, name, str(item.get("state", "")), reason))
    out += [
        ShovelState(vhost, name, str(item.get("state", "")), declared=False)
        for name, item in sorted(seen.items())
        if name not in names
    ]
    return out


def shovel_status(client: ManagementClient, spec: Spec) -> list[ShovelState]:
    """The state of every shovel the spec's vhosts declare (and undeclared ones there)."""
    out: list[ShovelState] = []
    for vhost_spec in spec.vhosts:
        if not vhost_spec.shovels:
            continue
        observed = _status_listing(client, "shovels", vhost_spec.name)
        declared = [(s.name, s.delete_after not in (None, "never")) for s in vhost_spec.shovels]
        out.extend(shovel_states(vhost_spec.name, declared, observed))
    return out


@dataclass(frozen=True)
class DistributionReport:
    """Where sample keys went: per shard counts against the weights' shares."""

    sharding: Sharding
    sample: int
    counts: dict[str, int]
    split_keys: list[str] = field(default_factory=list)
    """Keys that reached more than one shard (must be empty: one key, one shard)."""

    def expected(self, queue: str) -> float:
        return float(self.sharding.shares[queue]) * self.sample

    def deviation(self, queue: str) -> float:
        """Relative distance of the observed count from the expected one (0.1 = 10%)."""
        expected = self.expected(queue)
        return abs(self.counts.get(queue, 0) - expected) / expected if expected else 0.0

    def worst_deviation(self) -> float:
        return max((self.deviation(queue) for queue in self.sharding.queues), default=0.0)

    def within(self, tolerance: float) -> bool:
        return not self.split_keys and self.worst_deviation() <= tolerance

    def to_json(self) -> dict[str, Any]:
        return {
            "exchange": self.sharding.exchange,
            "sample": self.sample,
            "shards": [
                {
                    "queue": queue,
                    "weight": weight,
                    "expected": round(self.expected(queue), 1),
                    "observed": self.counts.get(queue, 0),
                    "deviation": round(self.deviation(queue), 4),
                }
                for queue, weight in zip(self.sharding.queues, self.sharding.weights, strict=True)
            ],
            "split_keys": self.split_keys[:20],
        }


def sample_keys(count: int) -> list[str]:
    """Random keys like the ones applications shard by (ids)."""
    return [f"key-{secrets.token_hex(8)}" for _ in range(count)]


def measure_distribution(
    amqp_url: str,
    sharding: Sharding,
    keys: Sequence[str],
    *,
    repeats: int = 2,
    timeout: float = 120.0,
) -> DistributionReport:
    """Publish every key ``repeats`` times through a scratch copy of the sharded exchange."""
    with Channel(amqp_url) as channel:
        scratch = f"rabbitry.shards-check.{secrets.token_hex(4)}"
        arguments: dict[str, Any] = {}
        if sharding.source is HashSource.HEADER:
            arguments["hash-header"] = sharding.field
        elif sharding.source is HashSource.PROPERTY:
            arguments["hash-property"] = sharding.field
        channel.exchange_declare(
            scratch, "x-consistent-hash", durable=False, auto_delete=True, arguments=arguments
        )
        try:
            shard_of_queue: dict[str, str] = {}
            for shard, weight in zip(sharding.queues, sharding.weights, strict=True):
                declared = channel.queue_declare("", exclusive=True, auto_delete=True)
                name = declared.queue or ""
                channel.queue_bind(name, scratch, routing_key=str(weight))
                shard_of_queue[name] = shard
            for _ in range(repeats):
                for key in keys:
                    route = sharding.route(key)
                    channel.publish(
                        key.encode(),
                        exchange=scratch,
                        routing_key=route.routing_key,
                        headers=route.headers or None,
                        **route.properties,
                    )
            channel.flush()
            shard_of_consumer = {
                channel.consume(name, no_ack=True): shard for name, shard in shard_of_queue.items()
            }
            shards_of_key: dict[str, set[str]] = defaultdict(set)
            received = 0
            total = len(keys) * repeats
            deadline = time.monotonic() + timeout
            while received < total:
                left = deadline - time.monotonic()
                delivered = channel.next_delivery(left) if left > 0 else None
                if delivered is None:
                    raise BrokerError(
                        f"only {received} of {total} sample messages came back within"
                        f" {timeout:.0f} s"
                    )
                received += 1
                shards_of_key[delivered.body.decode()].add(
                    shard_of_consumer[delivered.consumer_tag]
                )
        finally:
            if channel.is_open:
                channel.exchange_delete(scratch)
    counts = Counter(next(iter(shards)) for shards in shards_of_key.values() if len(shards) == 1)
    split = sorted(key for key, shards in shards_of_key.items() if len(shards) > 1)
    return DistributionReport(sharding, len(keys), dict(counts), split)
