"""Capability checks: what a topology needs, and the message for each missing piece."""

from __future__ import annotations

from rabbitry.provisioner.capabilities import (
    BrokerCapabilities,
    missing,
    parse_version,
    requirements,
)
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
