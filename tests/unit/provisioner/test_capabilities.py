"""Capability checks: what a topology needs, and the message for each missing piece."""

from __future__ import annotations

from typing import Any

import httpx

from rabbitry.provisioner.capabilities import (
    BrokerCapabilities,
    CapabilityReport,
    missing,
    parse_version,
    read_capabilities,
    requirements,
)
from rabbitry.provisioner.live_plan import upgrade_warnings
from rabbitry.topology import primitives as p


def topology(**fields: object) -> p.Topology:
    return p.Topology(vhosts=(p.Vhost(name="v", **fields),))  # type: ignore[arg-type]


FULL = BrokerCapabilities(
    version=(3, 10, 8),
    plugins=frozenset({"rabbitmq_consistent_hash_exchange", "rabbitmq_federation"}),
    feature_flags=frozenset({"quorum_queue", "stream_queue"}),
)


def test_plain_topology_needs_nothing() -> None:
    assert missing(requirements(topology(queues=(p.Queue(name="q"),))), FULL) == []


def test_missing_plugin_is_named_with_the_command_to_enable_it() -> None:
    needs = requirements(
        topology(exchanges=(p.Exchange(name="m", type=p.ExchangeType.MODULUS_HASH),))
    )
    (problem,) = missing(needs, FULL)
    assert "exchange m (vhost v)" in problem
    assert "rabbitmq-plugins enable rabbitmq_sharding" in problem


def test_at_least_once_dead_lettering_needs_stream_queue_flag_and_3_10() -> None:
    queue = p.Queue(
        name="level",
        type=p.QueueType.QUORUM,
        arguments={"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"},
    )
    needs = requirements(topology(queues=(queue,)))
    no_flag = BrokerCapabilities(version=(3, 10, 8), feature_flags=frozenset({"quorum_queue"}))
    assert any("enable_feature_flag stream_queue" in p for p in missing(needs, no_flag))
    old = BrokerCapabilities(
        version=(3, 9, 29), feature_flags=frozenset({"quorum_queue", "stream_queue"})
    )
    assert any("3.10 or newer" in p and "3.9.29" in p for p in missing(needs, old))


def test_new_apply_to_values_need_3_12() -> None:
    policy = p.Policy(
        name="p", pattern=".*", apply_to=p.ApplyTo.QUORUM_QUEUES, definition={"max-length": 1}
    )
    (problem,) = missing(requirements(topology(policies=(policy,))), FULL)
    assert "3.12" in problem and "policy p" in problem


def test_federation_parameters_and_shovels_need_their_plugins() -> None:
    params = (
        p.Parameter(component="federation-upstream", name="up", value={"uri": "amqp://x"}),
        p.Parameter(component="shovel", name="move", value={}),
    )
    problems = missing(requirements(topology(parameters=params)), FULL)
    assert len(problems) == 1 and "rabbitmq_shovel" in problems[0]


def test_parse_version_tolerates_suffixes() -> None:
    assert parse_version("3.10.8") == (3, 10, 8)
    assert parse_version("4.1.0-beta.2") == (4, 1, 0)


def test_unlisted_plugins_fall_back_to_the_exchange_types_the_broker_offers() -> None:
    starting = BrokerCapabilities(
        version=(3, 10, 8),
        plugins_known=False,
        exchange_types=frozenset({"direct", "topic", "x-consistent-hash"}),
        feature_flags=frozenset({"quorum_queue", "stream_queue"}),
    )
    hashed = requirements(
        topology(exchanges=(p.Exchange(name="h", type=p.ExchangeType.CONSISTENT_HASH),))
    )
    modulus = requirements(
        topology(exchanges=(p.Exchange(name="m", type=p.ExchangeType.MODULUS_HASH),))
    )
    shovel = requirements(
        topology(parameters=(p.Parameter(component="shovel", name="s", value={}),))
    )
    assert missing(hashed, starting) == []
    assert "rabbitmq_sharding" in missing(modulus, starting)[0]
    assert missing(shovel, starting) == [], "not provable either way: the broker will answer"


def test_a_version_the_broker_refuses_is_named_with_what_to_do() -> None:
    queue = p.Queue(name="lazy", arguments={"x-queue-version": 1})
    needs = requirements(topology(queues=(queue,)))
    assert missing(needs, FULL) == []
    (problem,) = missing(needs, BrokerCapabilities(version=(4, 3, 0)))
    assert problem.startswith("queue lazy (vhost v): RabbitMQ 4.3 and newer refuse")
    assert "(the broker runs 4.3.0); remove x-queue-version" in problem


def test_target_version_lists_what_an_upgrade_would_break() -> None:
    queues = (
        p.Queue(name="lazy", arguments={"x-queue-version": 1}),
        p.Queue(name="work", type=p.QueueType.QUORUM),
    )
    needs = requirements(topology(queues=queues))
    report = CapabilityReport(FULL, needs, missing(needs, FULL))
    found = upgrade_warnings(report, (4, 3))
    assert found[0].startswith("RabbitMQ 4.3 would refuse: queue lazy (vhost v): RabbitMQ 4.3")
    assert "(the target is 4.3)" in found[0]
    assert any("queue work (vhost v): RabbitMQ 4.0 changed" in w for w in found[1:])
    assert upgrade_warnings(report, None) == []
    plain = requirements(topology(queues=(p.Queue(name="q"),)))
    (nothing,) = upgrade_warnings(CapabilityReport(FULL, plain), (4, 3))
    assert nothing == "RabbitMQ 4.3: nothing in this spec is refused or changed"


def test_a_listed_modulus_hash_type_needs_no_sharding_plugin() -> None:
    """x-modulus-hash is core from 4.3: the type being there is enough."""
    needs = requirements(
        topology(exchanges=(p.Exchange(name="m", type=p.ExchangeType.MODULUS_HASH),))
    )
    core = BrokerCapabilities(version=(4, 3, 0), exchange_types=frozenset({"x-modulus-hash"}))
    assert missing(needs, core) == []


def test_an_object_the_broker_already_holds_is_kept_not_refused() -> None:
    """A queue declared with x-queue-version 1 before an upgrade to 4.3 keeps working there;
    only declaring it again fails, so a plan that leaves it alone warns instead of refusing."""
    queues = (
        p.Queue(name="old", arguments={"x-queue-version": 1}),
        p.Queue(name="new", arguments={"x-queue-version": 1}),
    )
    needs = requirements(topology(queues=queues))
    broker = BrokerCapabilities(version=(4, 3, 0))
    report = CapabilityReport(broker, needs, [])

    def declared(key: tuple[str, ...]) -> bool:
        return key == ("queue", "v", "new")

    (refused,) = report.refusals(declared)
    assert refused.startswith("queue new (vhost v): RabbitMQ 4.3 and newer refuse")
    (kept,) = report.kept(declared)
    assert kept.startswith("queue old (vhost v): RabbitMQ 4.3 and newer refuse")
    assert kept.endswith("(it exists as it is and is kept; declaring it again would fail)")


def test_the_broker_s_own_deprecated_features_decide_over_its_version() -> None:
    transient = topology(queues=(p.Queue(name="passing", durable=False),))
    needs = requirements(transient)
    assert missing(needs, BrokerCapabilities(version=(4, 3, 6)))  # the default: denied
    permits = {"transient_nonexcl_queues": True}
    assert missing(needs, BrokerCapabilities(version=(4, 3, 6), deprecated=permits)) == []


class Answers:
    """A management client that answers from a table (what read_capabilities asks)."""

    def __init__(self, deprecated: Any, status: int = 200) -> None:
        self.deprecated, self.status = deprecated, status

    def overview(self) -> dict[str, Any]:
        return {"rabbitmq_version": "4.3.6", "exchange_types": []}

    def get(self, path: str) -> Any:
        return [{"enabled_plugins": []}]

    def request(self, method: str, path: str, allow: tuple[int, ...] = ()) -> httpx.Response:
        if path == "/deprecated-features":
            return httpx.Response(self.status, json=self.deprecated)
        return httpx.Response(200, json=[])


def test_the_deprecated_features_read_are_those_the_broker_gives_a_state() -> None:
    listed = [
        {"name": "transient_nonexcl_queues", "state": "permitted"},
        {"name": "global_qos", "state": "denied"},
        # 4.0.5 lists only the phase, which rabbitmq.conf may override: no word on it
        {"name": "ram_node_type", "deprecation_phase": "permitted_by_default"},
    ]
    read = read_capabilities(Answers(listed))  # type: ignore[arg-type]
    assert read.deprecated == {"transient_nonexcl_queues": True, "global_qos": False}
    assert read_capabilities(Answers({}, status=404)).deprecated == {}  # type: ignore[arg-type]
