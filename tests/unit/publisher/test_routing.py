"""Routing from the topology: exchanges, shard keys, delays, reachability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rabbitry.errors import PublishError
from rabbitry.policies.delay import BinaryDelays, DelayError
from rabbitry.publisher import AsyncPublisher, Publisher
from rabbitry.publisher.routing import Router, SpecDelays, UnknownExchange
from rabbitry.topology import expand, load_spec_text
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
        target.exchange == "delay.layout.binary-1000ms-4"
        and target.routing_key == "0.1.0.1.orders"
        and target.delayed
    )
    with pytest.raises(PublishError, match="delays="):
        Router().resolve("", "orders", delay=5)


def test_delayed_messages_take_the_lanes_in_turn() -> None:
    router = Router(delays=BinaryDelays("delay", unit_ms=1000, levels=4, lanes=3))
    keys = [router.resolve("", "orders", delay=5).routing_key for _ in range(4)]
    assert keys == ["1.0.1.0.1.orders", "2.0.1.0.1.orders", "0.0.1.0.1.orders", "1.0.1.0.1.orders"]


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


DELAYS_SPEC = """
version: 1
vhosts:
  - name: app
    queues:
      - {name: reminders}
      - {name: invoices}
      - {name: mail, retry: {attempts: 3, backoff: [1s], via: slow}}
      - {name: both}
    exchanges: [{name: events, type: topic}]
    delays:
      - name: fast
        unit: 100ms
        max: 10s
        targets:
          - {queue: reminders}
          - {queue: both}
          - {name: expired, exchange: events, routing_key: order.expired}
      - name: slow
        targets: [{queue: invoices}, {queue: both}]
"""


def spec_delays() -> SpecDelays:
    return SpecDelays.of(load_spec_text(DELAYS_SPEC, "spec.yaml", environ={}).vhosts[0])


def test_spec_delays_pick_the_delay_that_delivers_to_the_address() -> None:
    delays = spec_delays()
    assert delays.scheme_for("reminders").prefix == "fast"
    assert delays.scheme_for("expired").prefix == "fast"  # an exchange target, by its name
    assert delays.scheme_for("invoices").prefix == "slow"
    assert delays.scheme_for("mail").prefix == "slow"  # a queue retrying via the delay
    route = delays.route(2, "reminders")
    assert route.exchange == "fast.layout.binary-100ms-7"
    assert route.routing_key.endswith(".reminders")
    assert delays.named("slow").prefix == "slow"


def test_spec_delays_refuse_an_address_no_delay_or_several_delays_deliver_to() -> None:
    delays = spec_delays()
    with pytest.raises(PublishError, match=r"no delay of vhost 'app' delivers to 'ghost'") as e:
        delays.scheme_for("ghost")
    assert "fast -> both, expired, reminders" in str(e.value) and "delays=" in str(e.value)
    with pytest.raises(PublishError, match=r"several delays .* 'both' \(fast, slow\)") as e:
        delays.scheme_for("both")
    assert "pass delays= with the name" in str(e.value)
    with pytest.raises(PublishError, match=r"no delay 'later' \(delays: fast, slow\)"):
        delays.named("later")
    with pytest.raises(PublishError, match="declares no delays"):
        SpecDelays("app", ()).scheme_for("reminders")


def test_a_publisher_from_a_spec_delays_through_the_spec_delays(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(DELAYS_SPEC.replace("name: app", "name: '{{ vars.vhost }}'"))
    from_path = Publisher.from_spec(path, variables={"vhost": "app"}, vhost="app")
    assert from_path.router.layout_check is not None  # asks the broker: none here
    from_path.router.layout_check = None
    delivery = from_path.prepare(b"x", routing_key="reminders", delay=2.0)
    assert delivery.exchange == "fast.layout.binary-100ms-7" and delivery.mandatory
    with pytest.raises(DelayError, match="declared max of 10000 ms"):
        from_path.prepare(b"x", routing_key="reminders", delay=12.0)
    with pytest.raises(PublishError, match="several delays"):
        from_path.prepare(b"x", routing_key="both", delay=2.0)

    spec = load_spec_text(DELAYS_SPEC, "spec.yaml", environ={})
    named = AsyncPublisher.from_spec(spec, url="amqp://u:p@h/app", delays="slow")
    named.router.layout_check = None
    slow = named.prepare(b"x", routing_key="both", delay=2.0)
    assert slow.exchange == "slow.layout.binary-1000ms-28"

    levels = BinaryDelays("fast", unit_ms=100, levels=7)
    given = Publisher.from_spec(spec, vhost="app", delays=levels)
    assert given.router.delays is levels
    assert given.prepare(b"x", routing_key="both", delay=12.0).exchange == levels.layout_exchange

    topology = expand(spec)
    with pytest.raises(PublishError, match="from_spec was given a Topology"):
        Publisher.from_spec(topology, vhost="app", delays="slow")
    with pytest.raises(PublishError, match=r"delay= needs delay levels: make the publisher"):
        Publisher.from_spec(topology, vhost="app").prepare(b"x", routing_key="x", delay=1)


def test_a_spec_publisher_checks_each_delay_layout_once_before_its_first_delay() -> None:
    spec = load_spec_text(DELAYS_SPEC, "spec.yaml", environ={})
    publisher = Publisher.from_spec(spec, vhost="app")
    checked: list[str] = []
    publisher.router.layout_check = lambda scheme: checked.append(scheme.layout_exchange)
    publisher.prepare(b"x", routing_key="app.plain")
    assert checked == []  # no delay, no check
    for _ in range(3):
        publisher.prepare(b"x", routing_key="reminders", delay=2.0)
    assert checked == ["fast.layout.binary-100ms-7"]
    publisher.router.delays = publisher.router.delays.named("slow")  # type: ignore[union-attr]
    publisher.prepare(b"x", routing_key="both", delay=2.0)
    assert checked == ["fast.layout.binary-100ms-7", "slow.layout.binary-1000ms-28"]


def test_a_refused_layout_publishes_nothing_and_is_asked_again_next_time() -> None:
    from rabbitry.publisher.layout import DelayLayoutMismatch, mismatch_message

    spec = load_spec_text(DELAYS_SPEC, "spec.yaml", environ={})
    publisher = Publisher.from_spec(spec, vhost="app")
    asked: list[str] = []

    def refuse(scheme: Any) -> None:
        asked.append(scheme.prefix)
        raise DelayLayoutMismatch(mismatch_message(scheme, "amqp://h/app"))

    publisher.router.layout_check = refuse
    for _ in range(2):
        with pytest.raises(DelayLayoutMismatch, match=r"no exchange 'fast.layout.binary-100ms-7'"):
            publisher.prepare(b"x", routing_key="reminders", delay=2.0)
    assert asked == ["fast", "fast"]


def test_publish_options_name_exactly_what_prepare_and_the_message_builder_accept() -> None:
    import inspect

    from rabbitry.amqp.message import MessageBuilder
    from rabbitry.publisher.base import PublisherBase, PublishOptions

    prepare = set(inspect.signature(PublisherBase.prepare).parameters) - {"self", "body"}
    build = set(inspect.signature(MessageBuilder.build).parameters) - {"self", "body"}
    accepted = (prepare - {"properties"}) | (build - {"deadline"})
    assert set(PublishOptions.__annotations__) == accepted
