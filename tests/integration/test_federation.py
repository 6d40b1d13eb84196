"""Federation between two brokers on one network: links, status and no loss across outages."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pika
import pytest
from click.testing import CliRunner, Result

from rabbitry.cli import cli
from rabbitry.testing.broker import Broker
from rabbitry.testing.containers import BrokerContainer
from rabbitry.testing.plugin import BrokerFactory

pytestmark = pytest.mark.broker

PASSWORD = "fed-s3cret"

UPSTREAM = """
    version: 1
    name: upstream
    users:
      - {name: federator, password: "{{ env.FED_PASSWORD }}"}
    vhosts:
      - name: /
        exchanges: [{name: events, type: topic}]
        permissions: [{user: federator}]
"""

DOWNSTREAM = """
    version: 1
    name: downstream
    vhosts:
      - name: /
        exchanges: [{name: events, type: topic}]
        queues: [{name: events.copy, type: quorum}]
        bindings: [{source: events, destination: events.copy, routing_key: "order.#"}]
        federation:
          upstreams:
            - name: up
              uri: amqp://federator@fed-up:5672/%2F
              password: "{{ env.FED_PASSWORD }}"
              reconnect_delay: 1s
              ack_mode: on-confirm
              expires: 10m
          exchanges:
            - {pattern: "^events$", upstream: up}
"""


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[BrokerContainer, BrokerContainer]]:
    factory = BrokerFactory()
    try:
        network = factory.network()
        up = factory(network=network, hostname="fed-up")
        down = factory(network=network, hostname="fed-down")
        yield up, down
    finally:
        factory.close()


def run(broker: Broker, tmp_path: Path, body: str, verb: str, *flags: str) -> Result:
    spec = tmp_path / f"spec-{verb}-{time.monotonic_ns()}.yaml"
    spec.write_text(textwrap.dedent(body).lstrip())
    mgmt = f"http://{broker.username}:{broker.password}@{broker.host}:{broker.management_port}"
    argv = [verb, str(spec), "--management-url", mgmt, "--url", broker.amqp_url(), *flags]
    return CliRunner().invoke(cli, argv, env={"FED_PASSWORD": PASSWORD}, catch_exceptions=False)


def wait(condition: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def nodes_have_stats(broker: Broker) -> bool:
    nodes = httpx.get(f"{broker.management_url}/api/nodes", auth=broker.auth).json()
    return all(node.get("enabled_plugins") for node in nodes)


def publish(broker: Broker, count: int, start: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(start, start + count):
        properties = pika.BasicProperties(delivery_mode=2)
        channel.basic_publish("events", "order.created", str(i).encode(), properties)
    connection.close()


def consume_all(broker: Broker, expected: int, timeout: float = 60) -> list[int]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    channel = connection.channel()
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        method, _, body = channel.basic_get("events.copy", auto_ack=True)
        if method is None:
            time.sleep(0.2)
            continue
        got.append(int(body))
    connection.close()
    return got


def status(down: Broker, tmp_path: Path) -> tuple[int, dict[str, object]]:
    result = run(down, tmp_path, DOWNSTREAM, "status", "--json")
    assert PASSWORD not in result.output
    return result.exit_code, json.loads(result.output)


def test_exchange_federation_delivers_and_loses_nothing_while_a_side_is_down(
    pair: tuple[BrokerContainer, BrokerContainer], tmp_path: Path
) -> None:
    up, down = pair
    for node in (up, down):
        wait(lambda node=node: nodes_have_stats(node.broker), what="node statistics")
    applied = run(up.broker, tmp_path, UPSTREAM, "apply", "--auto-approve")
    assert applied.exit_code == 0, applied.output
    applied = run(down.broker, tmp_path, DOWNSTREAM, "apply", "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert PASSWORD not in applied.output

    wait(lambda: status(down.broker, tmp_path)[0] == 0, what="the link to run")
    _, report = status(down.broker, tmp_path)
    links = report["federation_links"]
    assert isinstance(links, list) and len(links) == 1
    assert links[0]["name"] == "events" and links[0]["upstream"] == "up"
    assert links[0]["status"] == "running"

    publish(up.broker, 50, start=0)
    assert sorted(consume_all(down.broker, 50)) == list(range(50))

    # Downstream down: the upstream keeps what is published in the link's queue (expires 10m).
    down.stop()
    publish(up.broker, 50, start=50)
    down_broker = down.start()
    wait(lambda: nodes_have_stats(down_broker), what="downstream statistics")
    assert sorted(consume_all(down_broker, 50)) == list(range(50, 100))

    # Upstream down: the link fails, status says so with exit 3, and recovers by itself.
    up.stop()
    wait(lambda: status(down_broker, tmp_path)[0] == 3, what="status to see the link down")
    human = run(down_broker, tmp_path, DOWNSTREAM, "status", "--json")
    assert json.loads(human.output)["healthy"] is False
    up_broker = up.start()
    publish(up_broker, 50, start=100)  # while the link is still reconnecting
    wait(lambda: status(down_broker, tmp_path)[0] == 0, what="the link to recover")
    received = consume_all(down_broker, 50)
    assert sorted(received) == list(range(100, 150)), "messages published during the outage"
    text = run(down_broker, tmp_path, DOWNSTREAM, "status")
    assert "running" in text.output and "events <- up" in text.output, text.output
