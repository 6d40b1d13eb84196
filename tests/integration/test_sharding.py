"""Sharding on a real broker: consistent-hash weights and stickiness, the modulus plugin."""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter

import pika
import pytest

from rabbitry.topology import load_spec
from rabbitry.topology.patterns.sharding import is_plugin_shard_queue, sharding_of
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        sharded_exchanges:
          - name: orders
            weights: [1, 1, 1, 2]
            queue:
              retry: {attempts: 2, backoff: [1m]}
          - name: tenants
            shards: 2
            hash_header: tenant
            queue_name: "tenant-shard-{index}"
""")

MODULUS = one_vhost_spec("""
        modulus_sharding:
          - {name: images, shards_per_node: 2}
""")


def wait_for_node_stats(broker: Broker) -> None:
    """A node lists its plugins once its first statistics are in (a few seconds after boot);
    the capability check reads them from there."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(node.get("enabled_plugins") for node in broker.get("/nodes")):
            return
        time.sleep(0.5)


def depths(
    channel: pika.adapters.blocking_connection.BlockingChannel, queues: tuple[str, ...]
) -> dict[str, int]:
    return {q: channel.queue_declare(q, passive=True).method.message_count for q in queues}


def wait_for_depth(channel: object, queues: tuple[str, ...], total: int) -> dict[str, int]:
    deadline = time.monotonic() + 60
    while True:
        counts = depths(channel, queues)  # type: ignore[arg-type]
        if sum(counts.values()) >= total or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def drain(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list[str]:
    bodies = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body.decode())


def test_weighted_shards_share_keys_by_weight_and_a_key_sticks_to_one_shard(
    broker: Broker,
) -> None:
    wait_for_node_stats(broker)
    broker.apply(SPEC)
    spec_path = broker.tmp / "spec.yaml"
    spec = load_spec(spec_path, {"vhost": broker.vhost, "stack": broker.stack})
    sharding = sharding_of(spec, "orders")
    assert set(sharding.queues) <= broker.queue_names()
    assert {f"orders.{i}.retry.1m" for i in range(4)} <= broker.queue_names()

    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    keys = [secrets.token_hex(8) for _ in range(10_000)]
    for key in keys:
        route = sharding.route(key)
        channel.basic_publish(route.exchange, route.routing_key, key.encode(), mandatory=True)
    counts = wait_for_depth(channel, sharding.queues, len(keys))
    assert sum(counts.values()) == len(keys)
    for queue, share in sharding.shares.items():
        expected = float(share) * len(keys)
        assert abs(counts[queue] - expected) <= 0.15 * expected, (queue, counts)

    # Same key, same shard: every shard holds only its own keys, whatever order they came in.
    for queue in sharding.queues:
        channel.queue_purge(queue)
    again = keys[:500]
    for _ in range(3):
        for key in again:
            channel.basic_publish("orders", key, key.encode())
    wait_for_depth(channel, sharding.queues, 3 * len(again))
    shard_of: dict[str, set[str]] = {}
    for queue in sharding.queues:
        for key in drain(channel, queue):
            shard_of.setdefault(key, set()).add(queue)
    assert len(shard_of) == len(again)
    assert all(len(shards) == 1 for shards in shard_of.values())

    # A header-hashed sharding spreads by the header, not the routing key.
    tenants = sharding_of(spec, "tenants")
    for i in range(400):
        route = tenants.route(f"tenant-{i % 40}")
        properties = pika.BasicProperties(headers=route.headers)
        channel.basic_publish(route.exchange, "same-routing-key", f"{i % 40}".encode(), properties)
    counts = wait_for_depth(channel, tenants.queues, 400)
    assert sum(counts.values()) == 400 and min(counts.values()) > 0, counts
    owners: dict[str, set[str]] = {}
    for queue in tenants.queues:
        for tenant in drain(channel, queue):
            owners.setdefault(tenant, set()).add(queue)
    assert all(len(q) == 1 for q in owners.values())
    connection.close()

    check = broker.run(
        "shards", "check", str(spec_path), "--sample", "5000", "--json",
        "--url", broker.amqp_url, "--management-url", broker.management_url,
        "--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}",
    )  # fmt: skip
    assert check.exit_code == 0, check.output
    report = json.loads(check.output)
    assert report["healthy"] is True
    (orders,) = [e for e in report["exchanges"] if e["exchange"] == "orders"]
    assert [s["weight"] for s in orders["shards"]] == [1, 1, 1, 2]
    assert sum(s["observed"] for s in orders["shards"]) == 5000
    assert orders["split_keys"] == []
    assert all(depth == 0 for depth in depths_after(broker, sharding.queues).values())


def depths_after(broker: Broker, queues: tuple[str, ...]) -> dict[str, int]:
    """The check publishes through a scratch exchange: the real shards stay empty."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    try:
        return depths(connection.channel(), queues)
    finally:
        connection.close()


def test_modulus_sharding_lets_the_plugin_make_shard_queues_that_route_and_stay_unmanaged(
    broker: Broker,
) -> None:
    wait_for_node_stats(broker)
    broker.apply(MODULUS)
    spec_path = broker.tmp / "spec.yaml"

    deadline = time.monotonic() + 30
    shard_queues: list[str] = []
    while time.monotonic() < deadline:
        shard_queues = sorted(q for q in broker.queue_names() if is_plugin_shard_queue(q))
        if len(shard_queues) == 2:
            break
        time.sleep(0.3)
    assert len(shard_queues) == 2, broker.queue_names()
    # "sharding: <exchange> - <node> - <n>": the node name depends on the broker.
    assert all(q.startswith("sharding: images - ") for q in shard_queues)
    assert {q.rsplit(" - ", 1)[1] for q in shard_queues} == {"0", "1"}

    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(200):
        channel.basic_publish("images", f"image-{i}", b"x", mandatory=True)
    counts = wait_for_depth(channel, tuple(shard_queues), 200)
    connection.close()
    assert sum(counts.values()) == 200
    assert Counter(counts).most_common(1)[0][1] < 200, counts
    assert min(counts.values()) > 0, counts

    # The plugin's queues are not rabbitry's: nothing to plan, nothing pruned.
    plan = broker.run("plan", str(spec_path), "--detailed-exitcode")
    assert plan.exit_code == 0, plan.output
    pruned = broker.run("apply", str(spec_path), "--auto-approve", "--prune")
    assert pruned.exit_code == 0, pruned.output
    assert set(shard_queues) <= broker.queue_names()
