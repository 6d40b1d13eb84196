"""``rabbitry dlq`` on a real broker: show without consuming, replay once, purge."""

from __future__ import annotations

import json
from typing import Any

import pika
import pytest

from rabbitry.consumer.decision import REPLAYED_HEADER
from rabbitry.consumer.dlq import ParkingLot, Selection
from rabbitry.policies.retry import ATTEMPT_HEADER, LAST_ERROR_HEADER, QUEUE_HEADER
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        exchanges:
          - {name: events, type: topic}
        queues:
          - name: work
            type: quorum
            retry: {attempts: 2, backoff: [1s]}
          - {name: audit}
        bindings:
          - {source: events, destination: audit, routing_key: "replayed.#"}
""")


@pytest.fixture
def parked(broker: Broker) -> Broker:
    """``work.parking`` holding ten messages parked by a worker (m-0 .. m-9)."""
    broker.apply(SPEC)
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(10):
        headers = {
            ATTEMPT_HEADER: 2,
            LAST_ERROR_HEADER: f"RuntimeError: failure {i}",
            QUEUE_HEADER: "work",
            "x-rabbitry-parked-reason": "gave up after 2 attempts",
            "tenant": "acme" if i % 2 else "globex",
        }
        channel.basic_publish(
            "",
            "work.parking",
            f"body-{i}".encode(),
            pika.BasicProperties(message_id=f"m-{i}", headers=headers, delivery_mode=2),
        )
    connection.close()
    return broker


def contents(broker: Broker, queue: str) -> list[tuple[Any, bytes]]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    out = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        out.append((props, body))
    connection.close()
    return out


def cli(broker: Broker, *args: str) -> Any:
    return broker.run(
        "dlq", *args, "--url", broker.amqp_url, "--management-url", broker.management_url
    )


def on_work_parking(broker: Broker, verb: str, *args: str) -> Any:
    """``rabbitry dlq VERB work.parking --vhost <the test's> ARGS``."""
    return cli(broker, verb, "work.parking", "--vhost", broker.vhost, *args)


@pytest.mark.versions
def test_show_lists_failure_headers_and_leaves_the_messages(parked: Broker) -> None:
    result = on_work_parking(parked, "show", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["depth"] == 10 and len(document["messages"]) == 10
    first = document["messages"][0]
    assert first["message_id"] == "m-0" and first["origin"] == "work"
    assert first["attempts"] == 2 and first["last_error"] == "RuntimeError: failure 0"
    # show returns once the broker put back what it read: counted from another connection at
    # once, and a second show at once, find all ten
    assert parked.count("work.parking") == 10
    human = on_work_parking(parked, "show", "--limit", "3")
    assert human.exit_code == 0, human.output
    assert "work.parking: 10 message(s)" in human.output, human.output
    assert "m-2" in human.output and "m-3" not in human.output, human.output
    assert parked.count("work.parking") == 10
    listed = cli(parked, "list", "--vhost", parked.vhost, "--json")
    lots = {q["name"]: q for q in json.loads(listed.output)["parking_lots"]}
    assert "work.parking" in lots
    left = contents(parked, "work.parking")
    # all of them still there (a quorum queue puts returned messages back in another order)
    assert sorted(p.message_id for p, _ in left) == sorted(f"m-{i}" for i in range(10))


def test_replay_moves_each_selected_message_once_and_leaves_the_rest(parked: Broker) -> None:
    result = on_work_parking(parked, "replay", "--match", "tenant=acme", "--count", "3")
    assert result.exit_code == 0, result.output
    assert "replayed 3 of 10" in result.output and "7 left" in result.output
    back = contents(parked, "work")
    assert [p.message_id for p, _ in back] == ["m-1", "m-3", "m-5"]
    props, body = back[0]
    assert body == b"body-1"
    assert ATTEMPT_HEADER not in props.headers, "a fresh retry ladder"
    assert props.headers[REPLAYED_HEADER] == 1 and props.headers["tenant"] == "acme"
    rest = contents(parked, "work.parking")
    assert sorted(p.message_id for p, _ in rest) == sorted(f"m-{i}" for i in (0, 2, 4, 6, 7, 8, 9))


def test_replay_by_id_to_an_exchange(parked: Broker) -> None:
    result = on_work_parking(
        parked,
        "replay",
        "--id",
        "m-4",
        "--id",
        "m-8",
        "--exchange",
        "events",
        "--routing-key",
        "replayed.x",
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.message_id for p, _ in contents(parked, "audit")) == ["m-4", "m-8"]
    assert contents(parked, "work") == []
    assert len(contents(parked, "work.parking")) == 8


def test_replay_needs_a_selection_and_all_moves_everything(parked: Broker) -> None:
    refused = on_work_parking(parked, "replay")
    assert refused.exit_code == 1 and "--all" in refused.output
    with ParkingLot(parked.vhost_amqp_url, "work.parking") as lot:
        report = lot.replay(Selection())
    assert (report.moved, report.kept, report.failed) == (10, 0, [])
    assert len(contents(parked, "work")) == 10
    assert contents(parked, "work.parking") == []


def test_purge_selected_then_all(parked: Broker) -> None:
    result = cli(
        parked,
        "purge",
        "work.parking",
        "--vhost",
        parked.vhost,
        "--match",
        "tenant=globex",
        "--yes",
    )
    assert result.exit_code == 0, result.output
    assert "deleted 5" in result.output
    everything = cli(parked, "purge", "work.parking", "--vhost", parked.vhost, "--yes")
    assert "deleted 5" in everything.output
    assert contents(parked, "work.parking") == []


@pytest.mark.versions
def test_replay_and_purge_report_as_json_for_programs(parked: Broker) -> None:
    replayed = on_work_parking(parked, "replay", "--match", "tenant=acme", "--json")
    assert replayed.exit_code == 0, replayed.output
    report = json.loads(replayed.stdout)
    assert (report["scanned"], report["moved"], report["kept"], report["failed"]) == (10, 5, 5, [])
    assert report["queue"] == "work.parking" and report["vhost"] == parked.vhost
    assert len(contents(parked, "work")) == 5

    unasked = on_work_parking(parked, "purge", "--json")
    assert unasked.exit_code == 1 and "--yes" in json.loads(unasked.stderr)["error"]["message"]
    assert parked.count("work.parking") == 5, "nothing purged without --yes"
    purged = on_work_parking(parked, "purge", "--yes", "--json")
    assert purged.exit_code == 0, purged.output
    assert json.loads(purged.stdout)["deleted"] == 5


def publish_to(broker: Broker, queue: str, count: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(count):
        channel.basic_publish("", queue, f"{queue}-{i}".encode(), pika.BasicProperties())
    connection.close()


def test_purge_and_replay_refuse_a_work_queue_unless_told_it_is_meant(parked: Broker) -> None:
    publish_to(parked, "work", 4)
    for verb, flag in (("purge", "--yes"), ("replay", "--all")):
        refused = cli(parked, verb, "work", "--vhost", parked.vhost, flag)
        assert refused.exit_code == 1, refused.output
        assert "'work' is not a parking lot" in refused.output, refused.output
        assert "--any-queue" in refused.output and "nothing was" in refused.output
        assert parked.count("work") == 4, f"{verb} touched a live work queue"
    with ParkingLot(parked.vhost_amqp_url, "work") as lot, pytest.raises(Exception) as caught:
        lot.purge()
    assert type(caught.value).__name__ == "NotAParkingLot"
    assert parked.count("work") == 4

    meant = cli(parked, "purge", "work", "--vhost", parked.vhost, "--yes", "--any-queue")
    assert meant.exit_code == 0, meant.output
    assert "deleted 4" in meant.output
    assert parked.count("work") == 0
    lot = cli(parked, "purge", "work.parking", "--vhost", parked.vhost, "--yes")
    assert lot.exit_code == 0 and "deleted 10" in lot.output, lot.output
    assert parked.count("work.parking") == 0


def test_a_parking_lot_named_otherwise_is_known_from_the_spec(broker: Broker) -> None:
    path = broker.spec(
        one_vhost_spec("""
        queues:
          - {name: jobs, type: quorum, retry: {attempts: 2, backoff: [1s]}, parking: held}
""")
    )
    broker.apply(path.read_text())
    publish_to(broker, "held", 3)
    by_name = cli(broker, "purge", "held", "--vhost", broker.vhost, "--yes")
    assert by_name.exit_code == 1 and "--spec" in by_name.output, by_name.output
    assert broker.count("held") == 3
    spec_args = ["--spec", str(path), "--var", f"vhost={broker.vhost}", "--var", "stack=s"]
    jobs = cli(broker, "purge", "jobs", "--vhost", broker.vhost, "--yes", *spec_args)
    assert jobs.exit_code == 1 and "the spec given does not declare it" in jobs.output
    held = cli(broker, "purge", "held", "--vhost", broker.vhost, "--yes", *spec_args)
    assert held.exit_code == 0 and "deleted 3" in held.output, held.output
    assert broker.count("held") == 0


def test_a_parking_lot_named_outside_ascii_replays_every_property(broker: Broker) -> None:
    # RabbitMQ and the spec take such names; a client that checks names against ASCII (as
    # pamqp does) would refuse the declare before the broker saw it
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    for queue in ("commandes-été", "commandes-été.parking"):
        channel.queue_declare(queue, durable=True)
    properties = pika.BasicProperties(
        message_id="m-é",
        content_type="application/json",
        correlation_id="c-1",
        reply_to="answers",
        priority=3,
        type="order.placed",
        delivery_mode=1,
        headers={QUEUE_HEADER: "commandes-été", ATTEMPT_HEADER: 2, "pays": "côte"},
    )
    channel.basic_publish("", "commandes-été.parking", b'{"n": 1}', properties)
    connection.close()

    shown = cli(broker, "show", "commandes-été.parking", "--vhost", broker.vhost, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["messages"][0]["origin"] == "commandes-été"
    result = cli(broker, "replay", "commandes-été.parking", "--all", "--vhost", broker.vhost)
    assert result.exit_code == 0 and "replayed 1 of 1" in result.output, result.output
    [(props, body)] = contents(broker, "commandes-été")
    assert body == b'{"n": 1}' and props.message_id == "m-é"
    assert (props.content_type, props.correlation_id, props.reply_to) == (
        "application/json",
        "c-1",
        "answers",
    )
    assert (props.priority, props.type, props.delivery_mode) == (3, "order.placed", 1)
    assert props.headers["pays"] == "côte" and ATTEMPT_HEADER not in props.headers
    assert broker.count("commandes-été.parking") == 0
