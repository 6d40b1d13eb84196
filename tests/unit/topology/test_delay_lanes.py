"""Lanes of a binary delay: what `lanes: N` expands into, and that one lane is today's layout."""

from __future__ import annotations

import pytest

from rabbitry.errors import SpecError
from rabbitry.topology import expand
from rabbitry.topology.primitives import DestinationType, Vhost

from .conftest import load, vhost_spec


def expanded(lanes: str) -> Vhost:
    delay = f"{{name: d, max: 7s{lanes}, targets: [{{queue: due}}]}}"
    body = f"queues: [{{name: due}}]\ndelays: [{delay}]"
    return expand(load(vhost_spec(body))).vhosts[0]


def test_each_level_is_one_queue_per_lane_bound_by_its_lane_word() -> None:
    vhost = expanded(", lanes: 3")
    queues = {q.name: q for q in vhost.queues if q.name.startswith("d.0")}
    assert sorted(queues) == [f"d.{k:02d}.{lane}" for k in range(3) for lane in range(3)]
    # every lane of a level dead-letters into the same exchange one level down
    assert {q.arguments["x-dead-letter-exchange"] for n, q in queues.items() if n[2:4] == "02"} == {
        "d.01"
    }
    assert queues["d.00.2"].arguments["x-dead-letter-exchange"] == "d.deliver"
    to_queues = {
        (b.source, b.destination, b.routing_key)
        for b in vhost.bindings
        if b.destination_type is DestinationType.QUEUE
    }
    assert ("d.02", "d.02.1", "1.1.#") in to_queues and ("d.00", "d.00.2", "2.*.*.1.#") in to_queues
    assert ("d.deliver", "due", "*.*.*.*.due") in to_queues  # the lane word, then three bits
    to_exchanges = {
        (b.source, b.destination, b.routing_key)
        for b in vhost.bindings
        if b.destination_type is DestinationType.EXCHANGE
    }
    mark = "d.layout.binary-1000ms-3-3lanes"
    assert (mark, "d.02", "*.1.#") in to_exchanges
    assert (mark, "d.deliver", "*.0.0.0.#") in to_exchanges
    assert ("d.01", "d.00", "*.*.0.#") in to_exchanges
    assert mark in {e.name for e in vhost.exchanges}


def test_one_lane_expands_exactly_as_a_delay_without_lanes() -> None:
    assert expanded(", lanes: 1") == expanded("")
    assert "d.layout.binary-1000ms-3" in {e.name for e in expanded("").exchanges}


def test_the_layout_fingerprint_changes_with_the_lanes() -> None:
    marks = [
        {e.name for e in expanded(lanes).exchanges if ".layout." in e.name}
        for lanes in ("", ", lanes: 2", ", lanes: 4")
    ]
    assert len({frozenset(m) for m in marks}) == 3


def test_lanes_on_fixed_levels_and_too_many_lanes_are_refused_where_they_are_written() -> None:
    with pytest.raises(SpecError, match=r"delays\[0\]: `lanes` is for binary levels only"):
        load(vhost_spec("delays: [{name: f, levels: fixed, lanes: 2}]"))
    with pytest.raises(SpecError, match=r"delays\[0\]\.lanes"):
        load(vhost_spec("delays: [{name: b, lanes: 17}]"))
