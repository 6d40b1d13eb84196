"""A delay's level layout changes (a longer max: one more level) on a real broker: nothing a
client or an earlier publish put in the levels is stranded; a delay arrives on time or the
change (or the publish) is refused with a clear message. Counted by passive declares."""

from __future__ import annotations

import time

import pytest

from rabbitry.errors import PublishError
from rabbitry.publisher import DelayLayoutMismatch, Publisher
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_patterns import collect

pytestmark = pytest.mark.broker

UNIT = 0.5
"""Seconds per tick: the levels hold 0.5 s, 1 s, 2 s, ... so the test runs in seconds."""

SPEC = one_vhost_spec("""
        queues:
          - {name: due, type: quorum}
        delays:
          - name: later
            unit: 500ms
            max: MAX
            targets: [{queue: due}]
""")
SHORT = SPEC.replace("MAX", "8s")  # 16 ticks: 5 levels
LONG = SPEC.replace("MAX", "16s")  # 32 ticks: 6 levels, every level binding changes


def level_counts(broker: Broker, levels: int) -> dict[str, int]:
    return {f"later.{k:02d}": broker.count(f"later.{k:02d}") for k in range(levels)}


def exists(broker: Broker, exchange: str) -> bool:
    return broker.get(f"/exchanges/{{vhost}}/{exchange}") is not None


def publisher(broker: Broker, spec_name: str) -> Publisher:
    return Publisher.from_spec(
        broker.tmp / spec_name,
        variables={"vhost": broker.vhost, "stack": broker.stack},
        url=broker.vhost_amqp_url,
    )


def arrivals(broker: Broker, count: int, timeout: float) -> list[tuple[float, bytes]]:
    """(monotonic arrival time, body) of ``count`` messages consumed from ``due``."""
    return [(arrived, body) for arrived, _, body in collect(broker, "due", count, timeout)]


def publish_delayed(pub: Publisher, delay: float, body: bytes) -> float:
    """Publish and wait for the confirm; the monotonic time it was sent."""
    sent = time.monotonic()
    pub.publish(body, routing_key="due", delay=delay)
    return sent


def assert_on_time(sent: float, delay: float, arrived: float) -> None:
    late = arrived - (sent + delay)
    assert late >= -0.05, f"delivered {-late:.3f} s early"
    assert late < 2.0, f"delivered {late:.3f} s late"


def test_a_relayout_is_refused_while_a_message_waits_in_the_levels_and_it_arrives_on_time(
    broker: Broker,
) -> None:
    broker.apply(SHORT)
    with publisher(broker, "spec.yaml") as pub:
        sent = publish_delayed(pub, 7.5, b"held")  # 15 ticks: levels 3, 2, 1, 0
    long_spec = broker.spec(LONG, "long.yaml")

    planned = broker.run("plan", str(long_spec))
    assert planned.exit_code == 0, planned.output
    assert "delay" in planned.output and "laid out anew" in planned.output
    assert "(binary-500ms-5 -> binary-500ms-6) while 1 message(s) wait" in planned.output

    refused = broker.run("apply", str(long_spec), "--auto-approve", "--prune")
    assert refused.exit_code == 1, refused.output
    assert "nothing was applied" in refused.output
    assert "1 message(s) wait in its level queues" in refused.output
    assert "--allow-delay-relayout" in refused.output
    assert exists(broker, "later.layout.binary-500ms-5")  # nothing changed
    assert not exists(broker, "later.layout.binary-500ms-6")

    [(arrived, body)] = arrivals(broker, 1, timeout=7.5 + 10)
    assert body == b"held"
    assert_on_time(sent, 7.5, arrived)
    assert sum(level_counts(broker, 5).values()) == 0 and broker.count("due") == 0
    assert broker.count("later.parking") == 0

    # drained: the same relayout goes through, and a delay through the new levels is on time
    applied = broker.run("apply", str(long_spec), "--auto-approve", "--prune")
    assert applied.exit_code == 0, applied.output
    assert not exists(broker, "later.layout.binary-500ms-5")
    with publisher(broker, "long.yaml") as pub:
        sent = publish_delayed(pub, 12.0, b"new")  # 24 ticks: enters the new level 4
    [(arrived, body)] = arrivals(broker, 1, timeout=12 + 10)
    assert body == b"new"
    assert_on_time(sent, 12.0, arrived)
    assert sum(level_counts(broker, 6).values()) == 0 and broker.count("later.parking") == 0


def test_the_flag_lays_the_levels_out_anew_and_the_apply_says_what_it_gives_up(
    broker: Broker,
) -> None:
    broker.apply(SHORT)
    with publisher(broker, "spec.yaml") as pub:
        pub.publish(b"given up", routing_key="due", delay=7.5)
    long_spec = broker.spec(LONG, "long.yaml")
    without_prune = broker.run("apply", str(long_spec), "--auto-approve", "--allow-delay-relayout")
    assert without_prune.exit_code == 1, without_prune.output
    assert "apply with --prune" in without_prune.output
    assert not exists(broker, "later.layout.binary-500ms-6")

    applied = broker.run(
        "apply", str(long_spec), "--auto-approve", "--prune", "--allow-delay-relayout"
    )
    assert applied.exit_code == 0, applied.output
    assert "while 1 message(s) wait in its level queues" in applied.output
    assert exists(broker, "later.layout.binary-500ms-6")
    assert not exists(broker, "later.layout.binary-500ms-5")


def test_a_publisher_holding_the_old_spec_refuses_to_delay_into_the_new_levels(
    broker: Broker,
) -> None:
    broker.apply(SHORT)
    long_spec = broker.spec(LONG, "long.yaml")
    running = publisher(broker, "spec.yaml")  # publishes before and after the relayout
    ahead = publisher(broker, "long.yaml")  # the new spec, before it is applied
    try:
        sent = publish_delayed(running, 1.0, b"before")  # checks the layout: it fits
        [(arrived, body)] = arrivals(broker, 1, timeout=1 + 10)
        assert body == b"before"
        assert_on_time(sent, 1.0, arrived)

        with pytest.raises(DelayLayoutMismatch) as early:
            ahead.publish(b"early", routing_key="due", delay=3)
        assert "laid out as binary-500ms-6" in str(early.value)
        assert "no exchange 'later.layout.binary-500ms-6'" in str(early.value)

        applied = broker.run("apply", str(long_spec), "--auto-approve", "--prune")
        assert applied.exit_code == 0, applied.output

        # checked before the relayout, it publishes into the old layout's entry: gone
        with pytest.raises(PublishError, match=r"later\.layout\.binary-500ms-5") as gone:
            running.publish(b"stale", routing_key="due", delay=3)
        assert "404" in str(gone.value) or "NOT_FOUND" in str(gone.value)
        assert running.stats.confirmed == 1  # only "before"

        with publisher(broker, "spec.yaml") as stale:  # started after: refused before sending
            with pytest.raises(DelayLayoutMismatch) as refused:
                stale.publish(b"stale", routing_key="due", delay=3)
            assert stale.stats.confirmed == 0 and stale.stats.in_flight == 0
        message = str(refused.value)
        assert "delay 'later' of the spec is laid out as binary-500ms-5" in message
        assert "rabbitry apply SPEC" in message
        # nothing was published: every level, the target and the parking lot are empty
        assert sum(level_counts(broker, 6).values()) == 0
        assert broker.count("due") == 0 and broker.count("later.parking") == 0

        sent = publish_delayed(ahead, 3.0, b"fresh")  # the same publisher, now that it fits
    finally:
        running.close()
        ahead.close()
    [(arrived, body)] = arrivals(broker, 1, timeout=3 + 10)
    assert body == b"fresh"
    assert_on_time(sent, 3.0, arrived)
    assert sum(level_counts(broker, 6).values()) == 0
