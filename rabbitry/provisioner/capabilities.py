"""What a topology needs from the broker (plugins, feature flags, version), checked before apply.

``requirements`` is pure (topology -> needs); ``missing`` compares needs with a
``BrokerCapabilities`` read from the management API and says, for each gap, how to close it.
A plan with gaps is refused before the first change. What each version accepts is not decided
here: a need of kind ``version`` carries what an object uses, judged by the table of
``rabbitry.topology.versions``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from rabbitry.diagnostics import Address, Diagnostic
from rabbitry.management.client import ManagementClient
from rabbitry.topology import versions
from rabbitry.topology.primitives import (
    ExchangeType,
    Primitive,
    Queue,
    QueueType,
    ResourceKey,
    Topology,
)
from rabbitry.topology.versions import NO_DEPRECATIONS, Use, Verdict, Version, judge, parse_version

__all__ = [
    "BrokerCapabilities",
    "CapabilityReport",
    "Need",
    "check",
    "migration_requirements",
    "missing",
    "notices",
    "parse_version",
    "read_capabilities",
    "requirements",
]


@dataclass(frozen=True)
class Need:
    """One thing the broker must offer, and which object needs it."""

    what: str
    kind: str
    """``plugin``, ``feature_flag``, ``version`` or ``exchange_type``."""
    because: str
    uses: tuple[Use, ...] = ()
    """For ``version``: what the object uses, judged against the broker's version."""
    key: ResourceKey | None = None
    """For ``version``: the object, so that one the broker already holds as it is (declared
    before an upgrade) is not refused for what a new declaration would be."""


@dataclass(frozen=True)
class BrokerCapabilities:
    """The parts of the broker's self-description that decide what can be applied."""

    version: tuple[int, ...]
    plugins: frozenset[str] = frozenset()
    feature_flags: frozenset[str] = frozenset()
    """Enabled feature flags (empty when the user may not read them)."""
    exchange_types: frozenset[str] = frozenset()
    flags_known: bool = True
    plugins_known: bool = True
    """False when a node did not list its plugins (3.10 omits them for a few seconds after
    start): then only what the exchange types prove is checked."""
    deprecated: Mapping[str, bool] = field(default_factory=dict, compare=False)
    """The broker's deprecated features, each True when permitted (the ``state`` of ``GET
    /api/deprecated-features``; empty where the broker gives none, or when the user may not
    read them): they decide over the version's defaults (``versions.Fact.deprecated_feature``)."""

    @property
    def version_text(self) -> str:
        return versions.format_version(self.version)


PLUGIN_OF_EXCHANGE: dict[str, str] = {
    ExchangeType.CONSISTENT_HASH: "rabbitmq_consistent_hash_exchange",
    ExchangeType.MODULUS_HASH: "rabbitmq_sharding",
}
PLUGIN_OF_COMPONENT = {
    "federation-upstream": "rabbitmq_federation",
    "federation-upstream-set": "rabbitmq_federation",
    "shovel": "rabbitmq_shovel",
}
FEDERATION_POLICY_KEYS = {"federation-upstream", "federation-upstream-set"}
SHARDING_POLICY_KEYS = {"shards-per-node", "routing-key"}


def requirements(topology: Topology) -> list[Need]:
    """Everything the topology needs, one entry per distinct need (first object named)."""
    needs: dict[tuple[str, str], Need] = {}

    def need(what: str, kind: str, because: str) -> None:
        needs.setdefault((kind, what), Need(what, kind, because))

    def version(label: str, uses: Iterable[Use], of: Primitive, vhost: str) -> None:
        item = Need(label, "version", label, tuple(uses), of.key(vhost))
        needs.setdefault(("version", label), item)

    seen: dict[object, tuple[Use, ...]] = {}
    by_type: dict[str, tuple[Use, ...]] = {}  # the exchanges of one type share their uses
    for vhost in topology.vhosts:
        where = f"vhost {vhost.name}"
        if vhost.protected_from_deletion:
            version(where, versions.uses_of_vhost(vhost.protected_from_deletion), vhost, vhost.name)
        for exchange in vhost.exchanges:
            label = f"exchange {exchange.name} ({where})"
            uses = by_type.get(exchange.type)
            if uses is None:
                uses = by_type[exchange.type] = tuple(versions.uses_of_exchange(exchange.type))
            version(label, uses, exchange, vhost.name)
            plugin = PLUGIN_OF_EXCHANGE.get(exchange.type)
            if plugin:
                need(plugin, "plugin", f"exchange {exchange.name} ({where}) is {exchange.type}")
            elif not isinstance(exchange.type, ExchangeType):
                # a type rabbitry does not know: the broker lists the types it has
                because = f"exchange {exchange.name} ({where}) is {exchange.type}"
                need(exchange.type, "exchange_type", because)
        by_broker = frozenset(vhost.retried_by_broker)
        for queue in vhost.queues:
            label = f"queue {queue.name} ({where})"
            judged = _queue_uses(queue, queue.name in by_broker, seen)
            version(label, judged, queue, vhost.name)
            if queue.type is QueueType.QUORUM:
                need("quorum_queue", "feature_flag", f"{label} is a quorum queue")
            if queue.type is QueueType.STREAM:
                need("stream_queue", "feature_flag", f"{label} is a stream")
            if queue.arguments.get("x-dead-letter-strategy") == "at-least-once":
                # At-least-once dead-lettering is built on stream_queue internals.
                need("stream_queue", "feature_flag", f"{label} dead-letters at-least-once")
        for policy in vhost.policies:
            label = f"policy {policy.name} ({where})"
            version(
                label,
                versions.uses_of_policy(policy.apply_to, policy.definition),
                policy,
                vhost.name,
            )
        for policy in vhost.operator_policies:
            label = f"operator policy {policy.name} ({where})"
            capped = versions.uses_of_policy(policy.apply_to, policy.definition, operator=True)
            version(label, capped, policy, vhost.name)
        for policy in (*vhost.policies, *vhost.operator_policies):
            label = f"policy {policy.name} ({where})"
            if FEDERATION_POLICY_KEYS & set(policy.definition):
                need("rabbitmq_federation", "plugin", f"{label} federates")
            if SHARDING_POLICY_KEYS & set(policy.definition):
                need("rabbitmq_sharding", "plugin", f"{label} configures sharding")
            if policy.definition.get("dead-letter-strategy") == "at-least-once":
                need("stream_queue", "feature_flag", f"{label} dead-letters at-least-once")
        for parameter in vhost.parameters:
            plugin = PLUGIN_OF_COMPONENT.get(parameter.component)
            if plugin:
                need(plugin, "plugin", f"{parameter.component} {parameter.name} ({where})")
    return list(needs.values())


def _queue_uses(
    queue: Queue, by_broker: bool, seen: dict[object, tuple[Use, ...]]
) -> tuple[Use, ...]:
    """What a queue uses, shared by the queues that use the same (most of a large spec's
    queues do): one tuple, judged once. ``by_broker``: its retries rely on the broker."""
    try:
        shape = (queue.type, queue.durable, by_broker, tuple(queue.arguments.items()))
        known = seen.get(shape)
    except TypeError:  # an argument whose value cannot be hashed
        return tuple(versions.uses_of_queue(queue.type, queue.durable, queue.arguments, by_broker))
    if known is None:
        uses = versions.uses_of_queue(queue.type, queue.durable, queue.arguments, by_broker)
        known = seen[shape] = tuple(uses)
    return known


def migration_requirements(queues: Iterable[str]) -> list[Need]:
    """Queues that must be replaced are migrated through the shovel plugin."""
    return [
        Need(
            "rabbitmq_shovel",
            "plugin",
            f"{queue} must be migrated (its settings cannot change in place)",
        )
        for queue in queues
    ][:1]


def missing(
    needs: Iterable[Need],
    broker: BrokerCapabilities,
    declared: Callable[[ResourceKey], bool] = lambda _key: True,
) -> list[str]:
    """One message per unmet need, naming the object and how to fix the broker (or the spec).
    ``declared`` says whether the plan declares an object (creates, updates or replaces it):
    the version is held only against those; by default, against every object."""
    problems: list[str] = []
    for item in needs:
        if item.kind == "version" and broker.version:
            if item.key is None or declared(item.key):
                judged = judge(item.uses, broker.version, deprecated=broker.deprecated)
                problems.extend(v.message(item.because) for v in judged if v.refused)
        elif item.kind == "plugin" and not _has_plugin(broker, item.what):
            problems.append(
                f"{item.because}: the {item.what} plugin is not enabled; run"
                f" `rabbitmq-plugins enable {item.what}` on every node"
            )
        elif item.kind == "exchange_type" and _lacks(
            broker.exchange_types, bool(broker.exchange_types), item.what
        ):
            problems.append(
                f"{item.because}: the broker has no exchange type {item.what} (it has"
                f" {', '.join(sorted(broker.exchange_types))}); enable the plugin that provides"
                " it on every node (`rabbitmq-plugins enable ...`), or change the type"
            )
        elif item.kind == "feature_flag" and _lacks(
            broker.feature_flags, broker.flags_known, item.what
        ):
            problems.append(
                f"{item.because}: feature flag {item.what} is not enabled; run"
                f" `rabbitmqctl enable_feature_flag {item.what}`"
            )
    return problems


def notices(
    needs: Iterable[Need],
    version: Version,
    upgrading_from: Version | None = None,
    runs: str = "the broker runs",
) -> tuple[list[str], list[str]]:
    """What ``version`` refuses and what it accepts without effect (or with a new default),
    one message each; ``upgrading_from`` is the version the broker runs, for an upgrade, and
    ``runs`` says where ``version`` comes from."""
    refused: list[str] = []
    noted: list[str] = []
    for item in needs:
        if item.kind == "version":
            for v in judge(item.uses, version, upgrading_from):
                (refused if v.refused else noted).append(v.message(item.because, runs))
    return refused, noted


def _lacks(offered: frozenset[str], listed: bool, what: str) -> bool:
    """Whether the broker is known to lack ``what``: a list it did not give proves nothing."""
    return listed and what not in offered


EXCHANGE_TYPE_OF_PLUGIN = {plugin: str(kind) for kind, plugin in PLUGIN_OF_EXCHANGE.items()}


def _has_plugin(broker: BrokerCapabilities, plugin: str) -> bool:
    exchange_type = EXCHANGE_TYPE_OF_PLUGIN.get(plugin)
    # a listed type is proof enough: x-modulus-hash is core from 4.3, plugin or not
    if exchange_type is not None and exchange_type in broker.exchange_types:
        return True
    if broker.plugins_known:
        return plugin in broker.plugins
    # not listed: a plugin of an exchange type is missing when its type is; of anything else,
    # unknown, and the broker answers rather than be refused on a guess
    return exchange_type is None


def read_capabilities(client: ManagementClient) -> BrokerCapabilities:
    overview = client.overview()
    plugins: set[str] = set()
    nodes = client.get("/nodes")
    plugins_known = bool(nodes) and all("enabled_plugins" in node for node in nodes)
    for node in nodes:
        plugins.update(node.get("enabled_plugins") or [])
    response = client.request("GET", "/feature-flags", allow=(401, 403, 404))
    flags_known = response.status_code == 200
    flags = (
        {f["name"] for f in response.json() if f.get("state") == "enabled"}
        if flags_known
        else set()
    )
    # what this broker permits, whatever its version's default (Debian's 4.3 permits
    # transient queues): its `state` of each feature (4.0.5 gives only the phase, which
    # rabbitmq.conf may override: no word then); a broker before 3.13 has no such list
    answer = client.request("GET", "/deprecated-features", allow=(401, 403, 404))
    listed = answer.json() if answer.status_code == 200 else []
    deprecated = {
        str(f["name"]): f["state"] == "permitted"
        for f in listed
        if isinstance(f, dict) and "name" in f and f.get("state") in ("permitted", "denied")
    }
    return BrokerCapabilities(
        version=parse_version(str(overview.get("rabbitmq_version", ""))),
        plugins=frozenset(plugins),
        feature_flags=frozenset(flags),
        exchange_types=frozenset(t["name"] for t in overview.get("exchange_types", [])),
        flags_known=flags_known,
        plugins_known=plugins_known,
        deprecated=deprecated,
    )


@dataclass(frozen=True)
class CapabilityReport:
    """Needs and gaps, for ``plan`` to show and ``apply`` to refuse on."""

    broker: BrokerCapabilities
    needs: list[Need] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """What the broker lacks (plugins, feature flags, exchange types): refused at once."""
    notes: list[str] = field(default_factory=list)
    """What the broker's version accepts without effect: warnings, not refusals."""
    judged: list[tuple[Need, list[str]]] | None = None
    """The version needs the broker's version refuses, each with its messages (``check``
    judges every need once; None: judged when first asked)."""

    @cached_property
    def _refused(self) -> list[tuple[Need, list[str]]]:
        if self.judged is not None:
            return self.judged
        return _judged(self.needs, self.broker.version, self.broker.deprecated)[0]

    def refusals(self, declared: Callable[[ResourceKey], bool]) -> list[str]:
        """What the broker's version refuses of the objects a plan declares."""
        return [str(d) for d in self.diagnosed(declared)]

    def diagnosed(self, declared: Callable[[ResourceKey], bool]) -> list[Diagnostic]:
        """``refusals`` as diagnostics, each addressed to the object it refuses."""
        return [
            Diagnostic(
                "the broker's version refuses it",
                message,
                address=Address.of_key(need.key) if need.key else None,
            )
            for need, messages in self._refused
            if need.key is None or declared(need.key)
            for message in messages
        ]

    def lacking(self) -> list[Diagnostic]:
        """``problems`` as diagnostics (what they are about is named in their text only)."""
        summary = "the broker lacks a plugin, feature flag or exchange type"
        return [Diagnostic(summary, problem) for problem in self.problems]

    def kept(self, declared: Callable[[ResourceKey], bool]) -> list[str]:
        """Objects the broker holds as they are, which its version would refuse to declare:
        warnings (they were declared before an upgrade, and a replace would fail)."""
        return [
            f"{message} (it exists as it is and is kept; declaring it again would fail)"
            for need, messages in self._refused
            if need.key is None or not declared(need.key)
            for message in messages
        ]


def _judged(
    needs: Iterable[Need], version: Version | None, deprecated: Mapping[str, bool] = NO_DEPRECATIONS
) -> tuple[list[tuple[Need, list[str]]], list[str]]:
    """One pass of the version table over ``needs``: the refused ones with their messages,
    and the notes (what the version accepts without effect). A plan of 50,000 objects asks
    three questions of the same judgements; judging once saves a third of a second. Objects
    of the same shape share one tuple of uses (``requirements``): it is judged once."""
    if not version:
        return [], []
    refused: list[tuple[Need, list[str]]] = []
    notes: list[str] = []
    shared: dict[int, tuple[tuple[Use, ...], list[Verdict]]] = {}  # holds the tuple: ids stay
    for item in needs:
        if item.kind != "version":
            continue
        known = shared.get(id(item.uses))
        if known is None:
            judged = judge(item.uses, version, deprecated=deprecated)
            known = shared[id(item.uses)] = (item.uses, judged)
        verdicts = known[1]
        if not verdicts:
            continue
        messages = [v.message(item.because) for v in verdicts if v.refused]
        if messages:
            refused.append((item, messages))
        notes.extend(v.message(item.because) for v in verdicts if not v.refused)
    return refused, notes


def check(client: ManagementClient, topology: Topology) -> CapabilityReport:
    broker = read_capabilities(client)
    needs = requirements(topology)
    refused, notes = _judged(needs, broker.version, broker.deprecated)
    others = [n for n in needs if n.kind != "version"]
    return CapabilityReport(broker, needs, missing(others, broker), notes, refused)
