"""Delay and retry patterns on a real broker, driven with plain pika and the pure cores."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.policies.delay import BinaryDelays, FixedDelays
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    PARKED_REASON_HEADER,
    Outcome,
    failed_attempts,
    failure_headers,
)
from rabbitry.topology import load_spec
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.retries import queue_retry
from tests.integration.applied import applied_vhost_fixtures
from tests.integration.conftest import Broker, one_vhost_spec

# Policies' apply-to, quorum delivery limits and x-death differ across releases. One xdist
# worker runs the module: one apply for all its tests (``applied``).
pytestmark = [pytest.mark.broker, pytest.mark.versions, pytest.mark.xdist_group("test_patterns")]

SPEC = one_vhost_spec("""
        exchanges:
          - {name: events, type: topic}
        queues:
          - {name: due, type: quorum}
          - {name: expired, type: quorum}
          - name: work
            type: quorum
            delivery_limit: 10
            retry: {attempts: 3, backoff: [1s, 2s]}
          - name: mail
            type: quorum
            retry: {attempts: 3, backoff: {initial: 1s, multiplier: 2, max: 4s, jitter: 0.2}, via: delay}
        bindings:
          - {source: events, destination: expired, routing_key: order.expired}
        delays:
          - name: delay
            unit: 100ms
            count: 10
            targets:
              - queue: due
              - {name: order-expired, exchange: events, routing_key: order.expired}
          - name: fixed
            levels: [1s, 2s]
            targets: [{queue: due}]
""")


applied_once, applied = applied_vhost_fixtures(SPEC)


def _spec(broker: Broker) -> Any:
    return load_spec(
        Path(broker.tmp / "spec.yaml"), {"vhost": broker.vhost, "stack": broker.stack}
    ).vhosts[0]


def _channel(broker: Broker) -> tuple[pika.BlockingConnection, Any]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    return connection, channel


def send_delayed(broker: Broker, scheme: Any, delay: float, address: str, body: bytes) -> None:
    """Publish ``body`` into the delay levels of ``scheme``, due at ``address`` after ``delay``."""
    connection, channel = _channel(broker)
    route = scheme.route(delay, address)
    channel.basic_publish(route.exchange, route.routing_key, body, mandatory=True)
    connection.close()


def collect(
    broker: Broker, queue: str, count: int, timeout: float
) -> list[tuple[float, Any, bytes]]:
    """Consume ``count`` messages, recording (arrival time, properties, body)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    got: list[tuple[float, Any, bytes]] = []
    deadline = time.monotonic() + timeout
    for method, props, body in channel.consume(queue, inactivity_timeout=0.05):
        if method is not None:
            got.append((time.monotonic(), props, body))
            channel.basic_ack(method.delivery_tag)
        if len(got) >= count or time.monotonic() > deadline:
            break
    channel.cancel()
    connection.close()
    return got


def test_binary_delays_arrive_in_due_order_without_head_of_line_blocking(applied: Broker) -> None:
    scheme = delay_scheme(_spec(applied).delays[0])
    assert isinstance(scheme, BinaryDelays) and scheme.levels == 10
    connection, channel = _channel(applied)
    due: dict[bytes, float] = {}
    # Longest first: with per-message TTL the 20 s message would block every shorter one.
    for seconds in range(20, 0, -2):
        route = scheme.route(seconds * 0.5, "due")
        body = f"{seconds * 0.5}".encode()
        # due from before the publish: the broker may hold the message (its TTL running) before
        # this process, descheduled on a loaded machine, reads the clock after the call
        due[body] = time.monotonic() + route.delay_ms / 1000
        channel.basic_publish(route.exchange, route.routing_key, body, mandatory=True)
    connection.close()
    arrivals = collect(applied, "due", len(due), timeout=20)
    assert len(arrivals) == len(due), "every delayed message arrives"
    delays = [float(body) for _, _, body in arrivals]
    assert delays == sorted(delays), f"arrived in due order, not publish order: {delays}"
    lateness = [at - due[body] for at, _, body in arrivals]
    assert min(lateness) > -0.05, f"never early: {lateness}"
    assert max(lateness) < 0.6, f"each within tolerance: {lateness}"


def test_exchange_target_delivers_with_its_routing_key(applied: Broker) -> None:
    scheme = delay_scheme(_spec(applied).delays[0])
    send_delayed(applied, scheme, 0.3, "order-expired", b"order-42")
    (arrival,) = collect(applied, "expired", 1, timeout=10)
    assert arrival[2] == b"order-42"


def test_fixed_levels_round_up_and_deliver(applied: Broker) -> None:
    scheme = delay_scheme(_spec(applied).delays[1])
    assert isinstance(scheme, FixedDelays)
    connection, channel = _channel(applied)
    start = time.monotonic()
    route = scheme.route(1.5, "due")  # rounds up to the 2 s level
    channel.basic_publish(route.exchange, route.routing_key, b"fixed", mandatory=True)
    connection.close()
    (arrival,) = collect(applied, "due", 1, timeout=10)
    assert 1.95 < arrival[0] - start < 2.8


def test_unroutable_delayed_message_lands_in_the_delay_parking_queue(applied: Broker) -> None:
    scheme = delay_scheme(_spec(applied).delays[0])
    send_delayed(applied, scheme, 0.2, "nobody-listens", b"lost?")
    (parked,) = collect(applied, "delay.parking", 1, timeout=10)
    assert parked[2] == b"lost?"
    # The level queues are not wedged: a message behind it still arrives.
    send_delayed(applied, scheme, 0.2, "due", b"after")
    assert collect(applied, "due", 1, timeout=10)[0][2] == b"after"


def _fail_forever(broker: Broker, queue: str, expected: int) -> list[float]:
    """A worker whose handler always fails: retries by the spec's rules until parking."""
    retry = queue_retry(_spec(broker), next(q for q in _spec(broker).queues if q.name == queue))
    assert retry is not None
    connection, channel = _channel(broker)
    seen: list[float] = []
    deadline = time.monotonic() + 30
    for method, props, body in channel.consume(queue, inactivity_timeout=0.05):
        if method is None:
            if len(seen) >= expected or time.monotonic() > deadline:
                break
            continue
        seen.append(time.monotonic())
        error = RuntimeError(f"handler failed on {body!r}")
        verdict = retry.policy.decide(failed_attempts(props.headers), error)
        headers = failure_headers(
            props.headers, verdict, error, queue, now_ms=int(time.time() * 1000)
        )
        out = pika.BasicProperties(headers=headers, message_id=props.message_id, delivery_mode=2)
        if verdict.outcome is Outcome.PARK:
            channel.basic_publish("", retry.parking_queue, body, out, mandatory=True)
        elif retry.delay is not None:
            route = retry.delay.route(verdict.delay_ms / 1000, queue)
            channel.basic_publish(route.exchange, route.routing_key, body, out, mandatory=True)
        else:
            tier = retry.tier_queue(verdict.delay_ms)
            channel.basic_publish("", tier, body, out, mandatory=True)
        # Confirmed publish first, then the ack: a crash in between duplicates, never loses.
        channel.basic_ack(method.delivery_tag)
    channel.cancel()
    connection.close()
    return seen


@pytest.mark.parametrize(("queue", "gaps"), [("work", (1.0, 2.0)), ("mail", (0.8, 1.6))])
def test_failed_message_walks_the_ladder_and_parks_after_exactly_n_attempts(
    applied: Broker, queue: str, gaps: tuple[float, float]
) -> None:
    connection, channel = _channel(applied)
    props = pika.BasicProperties(message_id="m-1", headers={"tenant": "acme"}, delivery_mode=2)
    channel.basic_publish("", queue, b"payload", props, mandatory=True)
    connection.close()

    seen = _fail_forever(applied, queue, expected=3)
    assert len(seen) == 3, "exactly N=3 attempts"
    for (earlier, later), minimum in zip(itertools.pairwise(seen), gaps, strict=True):
        assert later - earlier >= minimum - 0.05, f"back-off respected: {seen}"

    (parked,) = collect(applied, f"{queue}.parking", 1, timeout=5)
    _, props_out, body = parked
    assert body == b"payload" and props_out.message_id == "m-1"
    headers = props_out.headers
    assert headers["tenant"] == "acme", "application headers intact"
    assert headers[ATTEMPT_HEADER] == 3
    assert "handler failed" in headers[LAST_ERROR_HEADER]
    assert "3 attempts" in headers[PARKED_REASON_HEADER]
    assert "x-death" not in headers, "stale x-death stripped on every republish"
    assert collect(applied, queue, 1, timeout=0.5) == [], "nothing left behind"


def test_rejected_message_is_dead_lettered_into_the_parking_lot(applied: Broker) -> None:
    connection, channel = _channel(applied)
    channel.basic_publish("", "work", b"poison", mandatory=True)
    method = None
    while method is None:
        method, _props, _body = channel.basic_get("work")
    channel.basic_reject(method.delivery_tag, requeue=False)
    connection.close()
    (parked,) = collect(applied, "work.parking", 1, timeout=5)
    assert parked[2] == b"poison"
    assert parked[1].headers["x-death"][0]["reason"] == "rejected"


def test_spec_needing_a_missing_plugin_fails_before_changing_anything(
    rabbitmq_broker_factory: Any, tmp_path: Path
) -> None:
    # RabbitMQ's own variable, honoured by the official image and ours alike.
    minimal = rabbitmq_broker_factory(
        env={"RABBITMQ_ENABLED_PLUGINS": "rabbitmq_management"}
    ).broker
    spec = tmp_path / "sharded.yaml"
    spec.write_text(
        "version: 1\nvhosts:\n  - name: sharded\n    exchanges:\n"
        "      - {name: shards, type: x-consistent-hash}\n    queues: [{name: q}]\n"
    )
    management = minimal.management_url.replace("://", f"://{minimal.username}:{minimal.password}@")
    result = CliRunner().invoke(
        cli, ["apply", str(spec), "--auto-approve", "--management-url", management]
    )
    assert result.exit_code == 1, result.output
    assert "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange" in result.output
    vhosts = httpx.get(minimal.management_url + "/api/vhosts", auth=minimal.auth).json()
    assert "sharded" not in {v["name"] for v in vhosts}, "nothing was applied"
