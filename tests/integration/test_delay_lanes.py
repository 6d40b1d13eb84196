"""A binary delay with lanes on a real broker: jobs published through the Publisher spread over
each level's lane queues (exact AMQP counts while they wait), each arrives once, never early;
changing the lanes is a relayout, refused while a message waits."""

from __future__ import annotations

import time

import pytest

from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_delay_relayout import arrivals, assert_on_time, exists

LEVELS = 4
SPEC = one_vhost_spec("""
        queues: [{name: due, type: quorum}]
        delays: [{name: later, unit: 500ms, max: 4s, lanes: LANES, targets: [{queue: due}]}]
""")
"""8 ticks of 0.5 s: levels 0.5 s, 1 s, 2 s and 4 s."""
ONE, THREE = "binary-500ms-4", "binary-500ms-4-3lanes"

pytestmark = pytest.mark.broker


def spec_with(lanes: int) -> str:
    return SPEC.replace("LANES", str(lanes))


def level_queues(lanes: int) -> list[str]:
    if lanes == 1:
        return [f"later.{k:02d}" for k in range(LEVELS)]
    return [f"later.{k:02d}.{lane}" for k in range(LEVELS) for lane in range(lanes)]


def publisher(broker: Broker) -> Publisher:
    return Publisher.from_spec(
        broker.tmp / "spec.yaml",
        variables={"vhost": broker.vhost, "stack": broker.stack},
        url=broker.vhost_amqp_url,
    )


def test_jobs_spread_over_the_lanes_and_each_arrives_once_after_its_delay(broker: Broker) -> None:
    broker.apply(spec_with(3))
    sent: dict[bytes, tuple[float, float]] = {}
    with publisher(broker) as pub:
        # six 4 s jobs wait in level 3 alone (bit 3 of 8 ticks) for 4 s: counted there
        for n in range(6):
            body = f"long-{n}".encode()
            sent[body] = (time.monotonic(), 4.0)
            pub.publish(body, routing_key="due", delay=4.0)
        lanes = [broker.count(f"later.03.{lane}") for lane in range(3)]
        # and jobs of other delays, each through the levels of its set bits
        for n, delay in enumerate((0.5, 1.0, 1.5, 2.5, 3.0, 3.5)):
            body = f"short-{n}".encode()
            sent[body] = (time.monotonic(), delay)
            pub.publish(body, routing_key="due", delay=delay)
    assert lanes == [2, 2, 2], "the publisher takes the lanes in turn"

    got = arrivals(broker, len(sent), timeout=4.0 + 30)
    assert sorted(body for _, body in got) == sorted(sent), "each job arrives once"
    for arrived, body in got:
        published, delay = sent[body]
        assert arrived - (published + delay) >= -0.05, f"{body!r} arrived early"
    assert sum(broker.count(name) for name in level_queues(3)) == 0
    assert broker.count("due") == 0 and broker.count("later.parking") == 0


def test_changing_the_lanes_is_a_relayout_refused_while_a_message_waits(broker: Broker) -> None:
    broker.apply(spec_with(1))
    with publisher(broker) as pub:
        sent = time.monotonic()
        pub.publish(b"held", routing_key="due", delay=3.5)  # 7 ticks: levels 2, 1, 0
    three = broker.spec(spec_with(3), "three.yaml")

    refused = broker.run("apply", str(three), "--auto-approve", "--prune")
    marks = [exists(broker, f"later.layout.{layout}") for layout in (ONE, THREE)]
    assert (refused.exit_code, marks) == (1, [True, False]), refused.output  # nothing changed
    assert f"({ONE} -> {THREE}) while 1 message(s) wait" in refused.output
    [(arrived, body)] = arrivals(broker, 1, timeout=3.5 + 15)
    assert_on_time(sent, 3.5, arrived)
    assert body == b"held"

    # drained: the relayout goes through, the old mark and the one-lane queues go with it
    applied = broker.run("apply", str(three), "--auto-approve", "--prune")
    marks = [exists(broker, f"later.layout.{layout}") for layout in (ONE, THREE)]
    assert (applied.exit_code, marks) == (0, [False, True]), applied.output
    assert broker.get("/queues/{vhost}/later.02") is None
    assert broker.get("/queues/{vhost}/later.02.2") is not None
