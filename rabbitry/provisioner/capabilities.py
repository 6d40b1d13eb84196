"""What a topology needs from the broker (plugins, feature flags, version), checked before apply.

``requirements`` is pure (topology -> needs); ``missing`` compares needs with a
``BrokerCapabilities`` read from the management API and says, for each gap, how to close it.
A plan with gaps is refused before the first change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from rabbitry.provisioner.management import ManagementClient
from rabbitry.topology.primitives import ApplyTo, ExchangeType, QueueType, Topology


@dataclass(frozen=True)
class Need:
    """One thing the broker must offer, and which object needs it."""

    what: str
    kind: str
    """``plugin``, ``feature_flag``, ``version`` or ``exchange_type``."""
    because: str
    minimum_version: tuple[int, ...] = ()


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

    @property
    def version_text(self) -> str:
        return ".".join(str(p) for p in self.version)


def parse_version(text: str) -> tuple[int, ...]:
    """``3.10.8`` -> (3, 10, 8); a pre-release suffix (``4.1.0-beta.2``) is ignored."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(p) for p in match.group().split(".")) if match else ()


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
NEW_APPLY_TO = {ApplyTo.CLASSIC_QUEUES, ApplyTo.QUORUM_QUEUES, ApplyTo.STREAMS}


def requirements(topology: Topology) -> list[Need]:
    """Everything the topology needs, one entry per distinct need (first object named)."""
    needs: dict[tuple[str, str], Need] = {}

    def need(what: str, kind: str, because: str, minimum: tuple[int, ...] = ()) -> None:
        needs.setdefault((kind, what), Need(what, kind, because, minimum))

    for vhost in topology.vhosts:
        where = f"vhost {vhost.name}"
        for exchange in vhost.exchanges:
            plugin = PLUGIN_OF_EXCHANGE.get(exchange.type)
            if plugin:
                need(plugin, "plugin", f"exchange {exchange.name} ({where}) is {exchange.type}")
            elif not isinstance(exchange.type, ExchangeType):
                # a type rabbitry does not know: the broker lists the types it has
                because = f"exchange {exchange.name} ({where}) is {exchange.type}"
                need(exchange.type, "exchange_type", because)
        for queue in vhost.queues:
            label = f"queue {queue.name} ({where})"
            if queue.type is QueueType.QUORUM:
                need("quorum_queue", "feature_flag", f"{label} is a quorum queue", (3, 8))
            if queue.type is QueueType.STREAM:
                need("stream_queue", "feature_flag", f"{label} is a stream", (3, 9))
            if queue.arguments.get("x-dead-letter-strategy") == "at-least-once":
                # At-least-once dead-lettering is built on stream_queue internals (3.10+).
                need("stream_queue", "feature_flag", f"{label} dead-letters at-least-once", (3, 10))
        for policy in (*vhost.policies, *vhost.operator_policies):
            label = f"policy {policy.name} ({where})"
            if policy.apply_to in NEW_APPLY_TO:
                need("3.12", "version", f"{label} applies to {policy.apply_to}", (3, 12))
            if FEDERATION_POLICY_KEYS & set(policy.definition):
                need("rabbitmq_federation", "plugin", f"{label} federates")
            if SHARDING_POLICY_KEYS & set(policy.definition):
                need("rabbitmq_sharding", "plugin", f"{label} configures sharding")
            if policy.definition.get("dead-letter-strategy") == "at-least-once":
                need("stream_queue", "feature_flag", f"{label} dead-letters at-least-once", (3, 10))
        for parameter in vhost.parameters:
            plugin = PLUGIN_OF_COMPONENT.get(parameter.component)
            if plugin:
                need(plugin, "plugin", f"{parameter.component} {parameter.name} ({where})")
    return list(needs.values())


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


def missing(needs: Iterable[Need], broker: BrokerCapabilities) -> list[str]:
    """One message per unmet need, naming the object and how to fix the broker."""
    problems: list[str] = []
    for item in needs:
        if item.minimum_version and broker.version and broker.version < item.minimum_version:
            wanted = ".".join(str(p) for p in item.minimum_version)
            problems.append(
                f"{item.because}: needs RabbitMQ {wanted} or newer, the broker runs"
                f" {broker.version_text}"
            )
            continue
        if item.kind == "plugin" and not _has_plugin(broker, item.what):
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


def _lacks(offered: frozenset[str], listed: bool, what: str) -> bool:
    """Whether the broker is known to lack ``what``: a list it did not give proves nothing."""
    return listed and what not in offered


EXCHANGE_TYPE_OF_PLUGIN = {plugin: str(kind) for kind, plugin in PLUGIN_OF_EXCHANGE.items()}


def _has_plugin(broker: BrokerCapabilities, plugin: str) -> bool:
    if broker.plugins_known:
        return plugin in broker.plugins
    exchange_type = EXCHANGE_TYPE_OF_PLUGIN.get(plugin)
    if exchange_type is not None:
        return exchange_type in broker.exchange_types
    return True  # unknown: let the broker answer rather than refuse on a guess


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
    return BrokerCapabilities(
        version=parse_version(str(overview.get("rabbitmq_version", ""))),
        plugins=frozenset(plugins),
        feature_flags=frozenset(flags),
        exchange_types=frozenset(t["name"] for t in overview.get("exchange_types", [])),
        flags_known=flags_known,
        plugins_known=plugins_known,
    )


@dataclass(frozen=True)
class CapabilityReport:
    """Needs and gaps, for ``plan`` to show and ``apply`` to refuse on."""

    broker: BrokerCapabilities
    needs: list[Need] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check(client: ManagementClient, topology: Topology) -> CapabilityReport:
    broker = read_capabilities(client)
    needs = requirements(topology)
    return CapabilityReport(broker, needs, missing(needs, broker))
