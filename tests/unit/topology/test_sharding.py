"""Consistent-hash and modulus sharding: expansion, resolution for clients, checks."""

from __future__ import annotations

from fractions import Fraction

import pytest

from rabbitry.errors import SpecError
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import BrokerState, observed_vhost
from rabbitry.topology import expand
from rabbitry.topology.patterns.retries import queue_retry
from rabbitry.topology.patterns.sharding import (
    HashSource,
    is_plugin_shard_queue,
    plugin_shard_queue,
    shard_queue_specs,
    sharding_of,
)
from rabbitry.topology.primitives import ApplyTo, ExchangeType, QueueType, Topology, Vhost

from .conftest import assert_reported, check, load, vhost_spec

WEIGHTED = """
sharded_exchanges:
  - name: orders
    weights: [1, 1, 1, 2]
    queue:
      type: quorum
      arguments: {x-quorum-initial-group-size: 3}
      delivery_limit: 5
      retry: {attempts: 3, backoff: [1s, 10s]}
"""


def expanded(body: str) -> Vhost:
    return expand(load(vhost_spec(body))).vhosts[0]


def test_weights_become_binding_keys_of_a_consistent_hash_exchange() -> None:
    vhost = expanded(WEIGHTED)
    exchange = next(e for e in vhost.exchanges if e.name == "orders")
    assert exchange.type is ExchangeType.CONSISTENT_HASH
    assert exchange.arguments == {}
    bindings = sorted((b.destination, b.routing_key) for b in vhost.bindings)
    assert bindings == [("orders.0", "1"), ("orders.1", "1"), ("orders.2", "1"), ("orders.3", "2")]


def test_every_shard_gets_the_template_and_its_own_retry_tiers_and_parking_lot() -> None:
    queues = {q.name: q for q in expanded(WEIGHTED).queues}
    for index in range(4):
        shard = queues[f"orders.{index}"]
        assert shard.type is QueueType.QUORUM
        assert shard.arguments == {
            "x-quorum-initial-group-size": 3,
            "x-delivery-limit": 5,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": f"orders.{index}.parking",
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        }
        tier = queues[f"orders.{index}.retry.1s"]
        assert tier.arguments["x-dead-letter-routing-key"] == f"orders.{index}"
        assert f"orders.{index}.retry.10s" in queues
        assert queues[f"orders.{index}.parking"].type is QueueType.QUORUM
    assert len(queues) == 4 * 4


def test_a_shared_parking_lot_is_declared_once() -> None:
    vhost = expanded(
        """
        sharded_exchanges:
          - {name: jobs, shards: 3, queue: {retry: {attempts: 2, backoff: [1s]}, parking: jobs.parked}}
        """
    )
    names = [q.name for q in vhost.queues]
    assert names.count("jobs.parked") == 1
    assert {"jobs.0", "jobs.1", "jobs.2"} <= set(names)


def test_retry_via_a_delay_binds_each_shard_on_the_delivery_exchange() -> None:
    vhost = expanded(
        """
        delays: [{name: later, max: 1h}]
        sharded_exchanges:
          - {name: jobs, shards: 2, queue: {type: quorum, retry: {via: later}}}
        """
    )
    delivered = {b.destination for b in vhost.bindings if b.source == "later.deliver"}
    assert delivered == {"jobs.0", "jobs.1"}


def test_header_and_property_hashing_set_exchange_arguments_and_routes() -> None:
    spec = load(
        vhost_spec(
            """
            sharded_exchanges:
              - {name: by-tenant, shards: 2, hash_header: tenant, queue_name: "t-{index}"}
              - {name: by-id, shards: 2, hash_property: message_id}
            """
        )
    )
    exchanges = {e.name: e for e in expand(spec).vhosts[0].exchanges}
    assert exchanges["by-tenant"].arguments == {"hash-header": "tenant"}
    assert exchanges["by-id"].arguments == {"hash-property": "message_id"}

    tenant = sharding_of(spec, "by-tenant")
    assert tenant.queues == ("t-0", "t-1")
    assert tenant.source is HashSource.HEADER
    route = tenant.route("acme")
    assert (route.exchange, route.routing_key, route.headers) == (
        "by-tenant",
        "",
        {"tenant": "acme"},
    )

    by_id = sharding_of(spec, "by-id", vhost="v")
    assert by_id.route("m-1").properties == {"message_id": "m-1"}


def test_resolution_gives_queues_shares_and_the_routing_key_route() -> None:
    spec = load(vhost_spec(WEIGHTED))
    sharding = sharding_of(spec, "orders")
    assert sharding.queues == ("orders.0", "orders.1", "orders.2", "orders.3")
    assert sharding.shares["orders.3"] == Fraction(2, 5)
    assert sharding.route("customer-7").routing_key == "customer-7"
    with pytest.raises(SpecError, match="no sharded exchange 'nope'"):
        sharding_of(spec, "nope")


def test_workers_resolve_each_shards_retry_like_a_declared_queue() -> None:
    spec = load(vhost_spec(WEIGHTED))
    vhost = spec.vhosts[0]
    shard = shard_queue_specs(vhost.sharded_exchanges[0])[2]
    retry = queue_retry(vhost, shard)
    assert retry is not None
    assert retry.parking_queue == "orders.2.parking"
    assert retry.tier_queues == {1000: "orders.2.retry.1s", 10000: "orders.2.retry.10s"}


def test_modulus_sharding_declares_the_exchange_and_the_plugin_policy_only() -> None:
    vhost = expanded(
        """
        modulus_sharding:
          - {name: images.x, shards_per_node: 2, routing_key: "1"}
        """
    )
    assert [(e.name, e.type) for e in vhost.exchanges] == [("images.x", ExchangeType.MODULUS_HASH)]
    assert vhost.queues == ()
    (policy,) = vhost.policies
    assert policy.name == "images.x.sharding"
    assert policy.pattern == r"^images\.x$"
    assert policy.apply_to is ApplyTo.EXCHANGES
    assert policy.definition == {"shards-per-node": 2, "routing-key": "1"}


def test_the_plugins_shard_queues_are_never_read_planned_or_pruned() -> None:
    name = plugin_shard_queue("images", "rabbit@node-a", 0)
    assert name == "sharding: images - rabbit@node-a - 0"
    assert is_plugin_shard_queue(name)
    observed = observed_vhost(
        "v",
        {},
        {
            "exchanges": [{"name": "images", "type": "x-modulus-hash"}],
            "queues": [{"name": name, "arguments": {}}],
            "bindings": [
                {"source": "images", "destination": name, "destination_type": "queue"},
            ],
        },
    )
    assert observed.queues == ()
    assert observed.bindings == ()
    desired = expand(load(vhost_spec("modulus_sharding: [{name: images}]")))
    record = OwnershipRecord.from_value(desired.name, None)
    state = BrokerState(topology=Topology(name=desired.name, vhosts=(observed,)), record=record)
    keys = {c.key for c in plan(desired, state).changes}
    assert not any(name in key for key in keys)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("sharded_exchanges: [{name: s}]", "give `shards` (a count) or `weights`"),
        ("sharded_exchanges: [{name: s, shards: 2, weights: [1, 1]}]", "not both"),
        (
            "sharded_exchanges: [{name: s, shards: 2, hash_header: h, hash_property: message_id}]",
            "hash one thing",
        ),
        ("sharded_exchanges: [{name: s, shards: 2, queue_name: fixed}]", "must contain {index}"),
        ("sharded_exchanges: [{name: s, shards: 2, queue_name: '{shard}'}]", "{exchange} and"),
        (
            "exchanges: [{name: s}]\nsharded_exchanges: [{name: s, shards: 2}]",
            "declares its exchange itself",
        ),
        (
            "queues: [{name: s.1}]\nsharded_exchanges: [{name: s, shards: 2}]",
            "shard queue 's.1' is also declared",
        ),
        (
            "sharded_exchanges: [{name: s, shards: 2, queue: {delivery_limit: 3}}]",
            "delivery_limit applies to quorum queues",
        ),
        (
            "sharded_exchanges: [{name: s, shards: 2, queue: {type: classic,"
            " arguments: {x-quorum-initial-group-size: 3}}}]",
            "x-quorum-initial-group-size applies to quorum queues",
        ),
        (
            "sharded_exchanges: [{name: s, shards: 2, queue: {retry: {via: nowhere}}}]",
            "retry via 'nowhere'",
        ),
        (
            "sharded_exchanges: [{name: s, shards: 2, queue: {type: stream, retry: {}}}]",
            "cannot retry",
        ),
        ("queues: [{name: 'sharding: x - n - 0'}]", "made by the sharding plugin"),
        (
            "policies: [{name: m.sharding, pattern: m}]\nmodulus_sharding: [{name: m}]",
            "also declared in `policies`",
        ),
    ],
)
def test_sharding_mistakes_are_reported(body: str, message: str) -> None:
    assert_reported(check(vhost_spec(body)), message)


def test_a_sharding_problem_points_at_its_line() -> None:
    problems = check(
        vhost_spec("sharded_exchanges:\n  - name: s\n    shards: 2\n    queue_name: x")
    )
    (problem,) = problems
    assert problem.path == "vhosts[0].sharded_exchanges[0].queue_name"
    assert problem.line == 7


def test_a_clean_sharding_spec_has_no_problems() -> None:
    assert check(vhost_spec(WEIGHTED)) == []


def test_plan_warns_when_quorum_shards_want_more_replicas_than_the_cluster_has() -> None:
    desired = expand(load(vhost_spec(WEIGHTED)))
    record = OwnershipRecord.from_value(desired.name, None)
    empty = Topology(name=desired.name)
    warnings = plan(desired, BrokerState(topology=empty, record=record, node_count=1)).warnings
    assert len(warnings) == 4
    assert "v/orders.0 wants 3 replicas" in warnings[0]
    assert "the cluster has 1 node(s)" in warnings[0]
    for nodes in (3, None):
        state = BrokerState(topology=empty, record=record, node_count=nodes)
        assert plan(desired, state).warnings == ()


def test_bindings_into_and_out_of_sharded_exchanges_are_not_dangling() -> None:
    problems = check(
        vhost_spec(
            """
            exchanges: [{name: events, type: topic}]
            sharded_exchanges: [{name: orders, shards: 2}]
            queues: [{name: audit}]
            bindings:
              - {source: events, destination: orders, destination_type: exchange, routing_key: "order.#"}
              - {source: orders, destination: audit, routing_key: "1"}
            """
        )
    )
    assert [p for p in problems if p.severity == "error"] == []
