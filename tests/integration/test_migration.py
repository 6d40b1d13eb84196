"""Queue migrations on a real broker: no message lost, bindings never missing, resumable."""

from __future__ import annotations

import threading
from pathlib import Path

import pika
import pytest

from rabbitry.errors import Unroutable
from rabbitry.management.client import ManagementClient
from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.provisioner.applier import ApplyOptions, apply_plan
from rabbitry.provisioner.migration import STEPS, temp_name
from rabbitry.provisioner.planner import Action, plan
from rabbitry.provisioner.queue_counter import AmqpQueueCounter
from rabbitry.provisioner.state import read_state
from rabbitry.publisher import Message, Publisher
from rabbitry.topology import load_topology
from tests.integration.conftest import Broker, one_vhost_spec

# Queue type and arguments cannot change in place on 3.10: migration must adapt.
pytestmark = [pytest.mark.broker, pytest.mark.versions]

BEFORE = one_vhost_spec("""
        exchanges:
          - {name: orders, type: topic}
          - {name: dead, type: fanout}
        queues:
          - {name: work, type: classic}
          - {name: dead}
        bindings:
          - {source: orders, destination: work, routing_key: "order.*"}
          - {source: dead, destination: dead}
""")
AFTER = BEFORE.replace(
    "- {name: work, type: classic}",
    "- {name: work, type: quorum, arguments: {x-dead-letter-exchange: dead}}",
)


def fill(broker: Broker, count: int, prefix: str) -> set[str]:
    ids = {f"{prefix}-{i}" for i in range(count)}
    with Publisher(broker.vhost_amqp_url) as publisher:
        results = publisher.publish_many(
            (Message(body=b"x" * 1024, message_id=mid) for mid in sorted(ids)),
            exchange="orders",
            routing_key="order.new",
            mandatory=True,
        )
    assert all(r.ok for r in results)
    return ids


def drain_ids(broker: Broker, queue: str) -> list[str]:
    """Message ids of everything in ``queue``, counted first (nothing publishes to it any
    more), then consumed until that many came: not a second's silence per call as before
    (12 s of the module on each release)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    waiting = channel.queue_declare(queue, passive=True).method.message_count
    assert waiting, f"nothing in {queue}"
    channel.basic_qos(prefetch_count=1000)
    ids: list[str] = []
    for method, props, _body in channel.consume(queue, inactivity_timeout=30):
        if method is None:  # fewer than counted: the caller's assertions say which
            break
        ids.append(props.message_id)
        channel.basic_ack(method.delivery_tag)
        if len(ids) >= waiting:
            break
    channel.cancel()
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    connection.close()
    return ids


def test_50000_messages_migrate_to_quorum_under_live_publishers(broker: Broker) -> None:
    broker.apply(BEFORE, "before.yaml")
    before = fill(broker, 50_000, "pre")

    live_ids: list[str] = []
    returns: list[str] = []
    stop = threading.Event()

    def publish_live() -> None:
        # Mandatory through the exchange: a moment without a bound queue would be a return.
        with Publisher(broker.vhost_amqp_url) as publisher:
            i = 0
            while not stop.is_set():
                mid = f"live-{i}"
                try:
                    publisher.publish(
                        b"live",
                        exchange="orders",
                        routing_key="order.live",
                        mandatory=True,
                        message_id=mid,
                    )
                    live_ids.append(mid)
                except Unroutable:
                    returns.append(mid)
                i += 1

    live = threading.Thread(target=publish_live)
    live.start()
    try:
        after_spec = broker.spec(AFTER, "after.yaml")
        shown = broker.run("plan", str(after_spec))
        assert (
            "-/+ queue" in shown.output
            and "migrate through work.rabbitry-migration" in shown.output
        )
        assert "steps: declare-temp, move-to-temp" in shown.output
        migrated = broker.run("apply", str(after_spec), "--auto-approve", "--allow-replace")
        assert migrated.exit_code == 0, migrated.output
    finally:
        stop.set()
        live.join()

    assert returns == [], "a binding was missing while publishers sent with mandatory"
    assert len(live_ids) > 100, "the live publisher really ran during the migration"
    work = broker.get("/queues/{vhost}/work")
    assert work["type"] == "quorum" and work["arguments"]["x-dead-letter-exchange"] == "dead"
    assert temp_name("work") not in broker.queue_names()
    received = drain_ids(broker, "work")
    missing = (before | set(live_ids)) - set(received)
    assert not missing, f"{len(missing)} message(s) lost, e.g. {sorted(missing)[:5]}"
    # Only the two bind/unbind windows can duplicate (a message reaching both queues).
    assert len(received) - len(set(received)) < 100
    assert broker.run("plan", str(after_spec), "--detailed-exitcode").exit_code == 0


class Killed(Exception):
    """Stands for the process dying: not a rabbitry error, so nothing catches it."""


@pytest.mark.parametrize("step", STEPS)
def test_migration_killed_at_any_step_is_finished_by_the_next_apply(
    broker: Broker, step: str
) -> None:
    broker.apply(BEFORE, "before.yaml")
    before = fill(broker, 2000, "m")
    after_spec = broker.spec(AFTER, "after.yaml")
    topology = load_topology(Path(after_spec), {"vhost": broker.vhost, "stack": broker.stack})
    endpoints = resolve_endpoints(broker.amqp_url, broker.management_url)

    def die_at(current: str) -> None:
        if current == step:
            raise Killed(current)

    with ManagementClient(broker.management_url) as client:
        first = plan(topology, read_state(client, broker.stack, [broker.vhost]))
        with pytest.raises(Killed):
            apply_plan(
                client,
                first,
                ApplyOptions(allow_replace=True),
                AmqpQueueCounter(endpoints),
                before_step=die_at,
            )
        resumed = plan(topology, read_state(client, broker.stack, [broker.vhost]))
        (change,) = resumed.by_action(Action.REPLACE)
        assert f"step {step!r}" in change.reasons[0]

    finished = broker.run("apply", str(after_spec), "--auto-approve", "--allow-replace")
    assert finished.exit_code == 0, finished.output
    assert broker.get("/queues/{vhost}/work")["type"] == "quorum"
    assert temp_name("work") not in broker.queue_names()
    received = drain_ids(broker, "work")
    assert set(received) == before, f"lost: {len(before - set(received))}"
    assert broker.run("plan", str(after_spec), "--detailed-exitcode").exit_code == 0
