"""A three-node cluster: quorum work, retry and delay queues survive losing their leader."""

from __future__ import annotations

import textwrap
from pathlib import Path
from urllib.parse import quote

import httpx
import pika
import pytest
from click.testing import CliRunner, Result

from rabbitry.cli import cli
from rabbitry.policies.delay import BinaryDelays
from rabbitry.testing.broker import Broker
from rabbitry.testing.containers import BrokerContainer
from rabbitry.topology import load_spec
from rabbitry.topology.patterns.delays import delay_scheme
from tests.integration.cluster import api, restore, wait

# the session's cluster, shared with test_failover on one xdist worker
pytestmark = [pytest.mark.broker, pytest.mark.xdist_group("cluster")]

VHOST = "shop"

SPEC = """
    version: 1
    name: cluster
    vhosts:
      - name: shop
        queues:
          - name: work
            type: quorum
            arguments: {x-quorum-initial-group-size: 3}
            delivery_limit: 5
            retry: {attempts: 3, backoff: [10m]}
        delays:
          - {name: later, unit: 1s, max: 1h, queue_type: quorum, targets: [{queue: work}]}
"""


def run(broker: Broker, spec: Path, verb: str, *flags: str) -> Result:
    mgmt = f"http://{broker.username}:{broker.password}@{broker.host}:{broker.management_port}"
    argv = [verb, str(spec), "--management-url", mgmt, "--url", broker.amqp_url(), *flags]
    return CliRunner().invoke(cli, argv, catch_exceptions=False)


def depth(broker: Broker, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url(VHOST)))
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


def test_quorum_work_retry_and_delay_queues_survive_stopping_their_leader(
    cluster: list[BrokerContainer], tmp_path: Path
) -> None:
    restore(cluster)
    first = cluster[0].broker
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(textwrap.dedent(SPEC).lstrip())
    planned = run(first, spec_path, "plan")
    assert planned.exit_code == 0, planned.output
    assert "wants 3 replicas" not in planned.output, "three nodes are enough"
    applied = run(first, spec_path, "apply", "--auto-approve")
    assert applied.exit_code == 0, applied.output

    work = api(first, f"/queues/{VHOST}/work")
    assert work["type"] == "quorum"
    assert len(work["members"]) == 3, work["members"]
    scheme = delay_scheme(load_spec(spec_path).vhosts[0].delays[0])
    assert isinstance(scheme, BinaryDelays)

    connection = pika.BlockingConnection(pika.URLParameters(first.amqp_url(VHOST)))
    channel = connection.channel()
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(100):
        channel.basic_publish("", "work", f"work-{i}".encode(), persistent, mandatory=True)
    for i in range(20):  # retries waiting out their 10 minute tier
        channel.basic_publish(
            "", "work.retry.10m", f"retry-{i}".encode(), persistent, mandatory=True
        )
    for i in range(20):  # delayed by 30 minutes: they wait in the level queues
        route = scheme.route(1800, "work")
        channel.basic_publish(
            route.exchange, route.routing_key, f"later-{i}".encode(), persistent, mandatory=True
        )
    connection.close()
    levels = [scheme.level_queue(k) for k in range(scheme.levels)]
    wait(
        lambda: sum(depth(first, q) for q in levels) == 20,
        what="delayed messages to settle in their level queue",
    )

    leader = api(first, f"/queues/{VHOST}/work")["leader"]
    doomed = next(node for node in cluster if f"rabbit@{node.hostname}" == leader)
    survivor = next(node for node in cluster if node is not doomed).broker
    doomed.stop()

    def new_leader() -> bool:
        queue = api(survivor, f"/queues/{quote(VHOST)}/work")
        return bool(queue.get("leader")) and queue["leader"] != leader

    wait(new_leader, what="a new leader for the work queue")
    wait(lambda: depth(survivor, "work") == 100, what="the work messages on the new leader")
    assert depth(survivor, "work.retry.10m") == 20
    assert sum(depth(survivor, q) for q in levels) == 20

    connection = pika.BlockingConnection(pika.URLParameters(survivor.amqp_url(VHOST)))
    channel = connection.channel()
    bodies = set()
    while True:
        method, _, body = channel.basic_get("work", auto_ack=True)
        if method is None:
            break
        bodies.add(body.decode())
    connection.close()
    assert bodies == {f"work-{i}" for i in range(100)}, "every message, from the survivors"


def test_plan_warns_when_the_cluster_is_smaller_than_a_quorum_group(
    cluster: list[BrokerContainer], tmp_path: Path
) -> None:
    # A stopped node (when the leader test ran first) is still one of three cluster
    # members, so ask for more replicas than members.
    broker = next(node.broker for node in cluster if _answers(node.broker))
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(
        textwrap.dedent(SPEC)
        .lstrip()
        .replace("x-quorum-initial-group-size: 3", "x-quorum-initial-group-size: 5")
    )
    planned = run(broker, spec_path, "plan")
    assert planned.exit_code == 0, planned.output
    assert "shop/work wants 5 replicas" in planned.output
    assert "the cluster has 3 node(s)" in planned.output


def _answers(broker: Broker) -> bool:
    try:
        api(broker, "/overview")
    except httpx.HTTPError:
        return False
    return True
