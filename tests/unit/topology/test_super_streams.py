"""Super streams: what they expand to, and the way back to one spec entry (no broker)."""

from __future__ import annotations

from rabbitry.topology import expand
from rabbitry.topology.document import dump_yaml, spec_document
from rabbitry.topology.primitives import ExchangeType, QueueType

from .conftest import load, one_problem

SPEC = """
version: 1
name: shop
vhosts:
  - name: shop
    super_streams:
      - name: events
        partitions: 3
        arguments: {x-max-age: 7D, x-max-length-bytes: 20GB}
      - name: invoices
        routing_keys: [eu, us]
"""


def test_a_super_stream_is_what_add_super_stream_makes() -> None:
    vhost = expand(load(SPEC)).vhosts[0]
    events = next(e for e in vhost.exchanges if e.name == "events")
    assert events.type is ExchangeType.DIRECT and events.arguments == {"x-super-stream": True}
    streams = {q.name: q for q in vhost.queues}
    assert set(streams) == {"events-0", "events-1", "events-2", "invoices-eu", "invoices-us"}
    assert all(q.type is QueueType.STREAM for q in streams.values())
    assert streams["events-1"].arguments == {
        "x-max-age": "7D",
        "x-max-length-bytes": 20_000_000_000,
    }
    bound = [(b.source, b.destination, b.routing_key, b.arguments) for b in vhost.bindings]
    assert ("events", "events-2", "2", {"x-stream-partition-order": 2}) in bound
    assert ("invoices", "invoices-us", "us", {"x-stream-partition-order": 1}) in bound


def test_an_export_writes_a_super_stream_back_as_one_entry() -> None:
    topology = expand(load(SPEC))
    document = spec_document(topology)
    vhost = document["vhosts"][0]
    events, invoices = vhost["super_streams"]
    assert (events["name"], events["partitions"], events["arguments"]["x-max-age"]) == (
        "events",
        3,
        "7D",
    )
    assert invoices == {"name": "invoices", "routing_keys": ["eu", "us"]}
    assert "exchanges" not in vhost and "queues" not in vhost and "bindings" not in vhost
    assert expand(load(dump_yaml(document))) == topology


def test_a_super_stream_is_partitioned_one_way() -> None:
    both = one_problem(SPEC.replace("partitions: 3", "partitions: 3\n        routing_keys: [a]"))
    assert "one of them" in both.message
    twice = one_problem(SPEC.replace("[eu, us]", "[eu, eu]"))
    assert "listed twice" in twice.message


def test_a_plan_shows_a_super_stream_made_whole_as_one_line() -> None:
    from rabbitry.provisioner.display import render_plan
    from rabbitry.provisioner.ownership import OwnershipRecord
    from rabbitry.provisioner.planner import plan
    from rabbitry.provisioner.state import BrokerState
    from rabbitry.topology.primitives import Topology

    made = plan(expand(load(SPEC)), BrokerState(Topology(name="shop"), OwnershipRecord("shop")))
    text = render_plan(made)
    assert "+ super stream shop/events (3 partitions)" in text
    assert "+ super stream shop/invoices (2 partitions)" in text
    assert "events-1" not in text and "Plan: 13 to create" in text  # JSON keeps every object


def test_partitions_are_read_off_the_bindings_in_partition_order() -> None:
    from rabbitry.topology.patterns.super_streams import Partition, partitions_in_order

    order = "x-stream-partition-order"
    bindings = [
        {"destination": "r-asia", "routing_key": "apac", "arguments": {order: 2}},
        {"destination": "r-americas", "routing_key": "amer", "arguments": {order: 0}},
        {"destination": "audit", "destination_type": "exchange", "arguments": {order: 3}},
        {"destination": "r-europe", "routing_key": "emea", "arguments": {order: 1}},
        {"destination": "r-europe", "routing_key": "uk", "arguments": {order: 4}},
        {"destination": "tap", "routing_key": "amer", "arguments": {}},
        {"destination": "odd", "routing_key": "x", "arguments": {order: "1"}},
    ]
    assert partitions_in_order(bindings) == [
        Partition("r-americas", "amer"),
        Partition("r-europe", "emea"),
        Partition("r-asia", "apac"),
    ]
    assert partitions_in_order([]) == []
