"""Routing from the topology: exchanges, shard keys, delays, reachability."""

from __future__ import annotations

import pytest

from rabbitry.errors import PublishError
from rabbitry.policies.delay import BinaryDelays
from rabbitry.publisher.routing import Router, UnknownExchange, topic_matches
from rabbitry.topology.primitives import (
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Queue,
    Topology,
    Vhost,
)


def topology() -> Topology:
    return Topology(
        vhosts=(
            Vhost(
                name="app",
                exchanges=(
                    Exchange(name="events", type=ExchangeType.TOPIC),
                    Exchange(
                        name="shards",
                        type=ExchangeType.CONSISTENT_HASH,
                        arguments={"hash-header": "tenant"},
                    ),
                    Exchange(name="keyed", type=ExchangeType.CONSISTENT_HASH),
                    Exchange(
                        name="fan",
                        type=ExchangeType.FANOUT,
                        arguments={"alternate-exchange": "events"},
                    ),
                ),
                queues=(Queue(name="orders"), Queue(name="s1")),
                bindings=(
                    Binding(source="events", destination="orders", routing_key="order.*.created"),
                    Binding(source="shards", destination="s1", routing_key="1"),
                ),
            ),
        )
    )


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.#", "a", True),
        ("#", "", True),
        ("#.c", "a.b.c", True),
        ("*", "", False),
    ],
)
def test_topic_matching(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def test_unknown_exchanges_are_caught_before_publishing() -> None:
    router = Router(topology(), "app")
    router.resolve("events", "x")
    router.resolve("", "orders")
    with pytest.raises(UnknownExchange, match="'nope' is not declared in vhost 'app'"):
        router.resolve("nope", "x")


def test_shard_key_goes_to_the_hash_header_or_the_routing_key() -> None:
    router = Router(topology(), "app")
    assert router.resolve("shards", "", shard_key="acme").headers == {"tenant": "acme"}
    target = router.resolve("keyed", "", shard_key="acme")
    assert target.routing_key == "acme" and target.headers is None


def test_delays_route_through_the_levels() -> None:
    delays = BinaryDelays("delay", unit_ms=1000, levels=4)
    target = Router(delays=delays).resolve("", "orders", delay=5)
    assert (
        target.exchange == "delay.02" and target.routing_key == "0.1.0.1.orders" and target.delayed
    )
    with pytest.raises(PublishError, match="delays="):
        Router().resolve("", "orders", delay=5)


def test_reachability_follows_bindings_and_alternate_exchanges() -> None:
    router = Router(topology(), "app")
    assert router.reaches_queue("events", "order.eu.created")
    assert not router.reaches_queue("events", "order.eu.paid")
    assert router.reaches_queue("fan", "order.x.created")
    assert router.reaches_queue("", "orders") and not router.reaches_queue("", "ghost")


def test_vhost_must_be_named_when_ambiguous() -> None:
    two = Topology(vhosts=(Vhost(name="a"), Vhost(name="b")))
    with pytest.raises(PublishError, match="several vhosts"):
        Router(two)
    with pytest.raises(PublishError, match="not in the topology"):
        Router(two, "c")
    assert DestinationType.QUEUE  # keep the import meaningful for readers of the model
