"""The pytest plugin and container brokers against real RabbitMQ brokers."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.testing import (
    Broker,
    ProviderKind,
    TestVhost,
    choose_provider,
    create_test_vhost,
    delete_vhost,
    find_engine,
    vhost_exists,
)
from rabbitry.testing.container_recipe import ERL_ARGS, STREAM_READ_AHEAD
from rabbitry.testing.host import docker_client, engine_containers, free_port, require_engine
from rabbitry.testing.plugin import BrokerFactory

CLI = [sys.executable, "-c", "from rabbitry.cli import main; main()"]

# Vhosts handed to the tests below, checked by a later test: one per test, gone afterwards.
SEEN_VHOSTS: list[TestVhost] = []


def management_get(broker: Broker, path: str) -> httpx.Response:
    return httpx.get(f"{broker.management_url}/api/{path}", auth=broker.auth, timeout=30)


def declare_queue(amqp_url: str, name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        connection.channel().queue_declare(name, durable=True)
    finally:
        connection.close()


# The last of these checks the vhosts of the two before: under pytest-xdist (--dist loadgroup)
# the three go to one worker, in this order.
SEEN_VHOSTS_GROUP = pytest.mark.xdist_group("seen-vhosts")


def test_session_broker_answers(rabbitmq_broker: Broker, request: pytest.FixtureRequest) -> None:
    assert management_get(rabbitmq_broker, "overview").status_code == 200
    assert request.node.get_closest_marker("broker") is not None


@SEEN_VHOSTS_GROUP
def test_queue_declared_on_the_vhost_shows_in_the_management_api(
    rabbitmq_vhost: TestVhost,
) -> None:
    SEEN_VHOSTS.append(rabbitmq_vhost)
    assert rabbitmq_vhost.name.startswith("rabbitry-test-")
    declare_queue(rabbitmq_vhost.amqp_url, "orders")
    response = httpx.get(
        f"{rabbitmq_vhost.management_url}/api/queues/{quote(rabbitmq_vhost.name, safe='')}/orders",
        auth=(rabbitmq_vhost.username, rabbitmq_vhost.password),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.json()["durable"] is True


@SEEN_VHOSTS_GROUP
def test_another_test_gets_another_vhost(rabbitmq_vhost: TestVhost) -> None:
    SEEN_VHOSTS.append(rabbitmq_vhost)
    queues = management_get(rabbitmq_vhost.broker, f"queues/{quote(rabbitmq_vhost.name, safe='')}")
    assert queues.json() == []  # nothing left over from the test before


@SEEN_VHOSTS_GROUP
def test_vhosts_are_distinct_and_deleted_after_their_test(rabbitmq_broker: Broker) -> None:
    if len(SEEN_VHOSTS) < 2:
        # The two tests above ran in another process or not yet (the xdist group kept them
        # together in most runs, not in every one): make and remove two vhosts by the fixture's
        # own steps instead of skipping.
        for _ in range(2 - len(SEEN_VHOSTS)):
            vhost = create_test_vhost(rabbitmq_broker)
            SEEN_VHOSTS.append(vhost)
            delete_vhost(rabbitmq_broker, vhost.name)
    names = [vhost.name for vhost in SEEN_VHOSTS]
    assert len(set(names)) == len(names)
    for name in names:
        assert not vhost_exists(rabbitmq_broker, name)


def test_factory_starts_a_distinct_broker_that_survives_a_restart(
    rabbitmq_broker: Broker, rabbitmq_broker_factory: BrokerFactory
) -> None:
    second = rabbitmq_broker_factory(username="second", password="pw-" + uuid.uuid4().hex[:6])
    broker = second.broker
    assert broker.amqp_url() != rabbitmq_broker.amqp_url()
    first_node = management_get(rabbitmq_broker, "overview").json()["node"]
    second_node = management_get(broker, "overview").json()["node"]
    assert first_node != second_node

    declare_queue(broker.amqp_url(), "only-on-second")
    assert management_get(broker, "queues/%2F/only-on-second").status_code == 200
    assert management_get(rabbitmq_broker, "queues/%2F/only-on-second").status_code == 404

    # Stopping and starting keeps the data and, on a local engine, the URLs.
    broker.stop()
    restarted = broker.start()
    assert restarted.amqp_url() == broker.amqp_url()
    assert management_get(restarted, "queues/%2F/only-on-second").status_code == 200


def test_factory_brokers_on_one_network_reach_each_other_by_node_name(
    rabbitmq_broker_factory: BrokerFactory,
) -> None:
    suffix = uuid.uuid4().hex[:6]
    network = rabbitmq_broker_factory.network()
    cookie = "cookie-" + uuid.uuid4().hex
    nodes = [
        rabbitmq_broker_factory(
            network=network,
            hostname=f"{role}-{suffix}",
            nodename=f"rabbit@{role}-{suffix}",
            erlang_cookie=cookie,
        )
        for role in ("a", "b")
    ]
    assert management_get(nodes[0].broker, "overview").json()["node"] == f"rabbit@a-{suffix}"
    code, output = nodes[0].exec("rabbitmq-diagnostics", "-q", "-n", f"rabbit@b-{suffix}", "ping")
    assert code == 0, output


@pytest.mark.broker
def test_dev_broker_outlives_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if find_engine(os.environ) is None:
        if choose_provider(os.environ).kind is ProviderKind.TESTCONTAINERS:
            pytest.fail("no container engine answers")
        pytest.skip("the dev broker needs a container engine (Docker or Podman)")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".rabbitry").mkdir()
    name = f"rabbitry-dev-test-{uuid.uuid4().hex[:6]}"
    runner = CliRunner()
    ports = ["--port", str(free_port()), "--management-port", str(free_port())]
    try:
        # In a process of its own: the container must outlive the command.
        up = subprocess.run(
            [*CLI, "dev-broker", "up", "--name", name, *ports],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert up.returncode == 0, up.stdout + up.stderr
        assert "rabbitry:***@127.0.0.1" in up.stdout
        state = tmp_path / ".rabbitry" / f"dev-broker-{name}.json"
        assert state.stat().st_mode & 0o077 == 0

        container = docker_client(require_engine()).containers.get(name)
        assert container.status == "running"

        url = runner.invoke(cli, ["dev-broker", "url", "--name", name, "--reveal"]).output.strip()
        declare_queue(url, "dev-queue")
        masked = runner.invoke(cli, ["dev-broker", "url", "--name", name, "--management"])
        assert masked.output.startswith("http://rabbitry:***@127.0.0.1:")
        env = runner.invoke(cli, ["dev-broker", "env", "--name", name]).output
        assert f"RABBITMQ_URL={url.removesuffix('/%2F')} " in env  # names no vhost
        stream_port = json.loads(state.read_text())["stream_port"]
        assert "RABBITRY_STREAM_URL=rabbitmq-stream://rabbitry:" in env
        assert f"@127.0.0.1:{stream_port}/" in env
        assert answers_stream_protocol("127.0.0.1", stream_port)

        def run(*argv: str) -> tuple[int, str]:
            code, output = container.exec_run(list(argv))
            return int(code), output.decode(errors="replace")

        assert read_ahead_of(run) == f"{{ok,{STREAM_READ_AHEAD}}}"

        again = runner.invoke(cli, ["dev-broker", "up", "--name", name])
        assert again.exit_code == 0, again.output
        assert (
            runner.invoke(cli, ["dev-broker", "url", "--name", name, "--reveal"]).output.strip()
            == url
        )
    finally:
        down = runner.invoke(cli, ["dev-broker", "down", "--name", name])
    assert down.exit_code == 0, down.output
    assert "removed" in down.output
    assert not (tmp_path / ".rabbitry" / f"dev-broker-{name}.json").exists()


def answers_stream_protocol(host: str, port: int) -> bool:
    """Whether a peer-properties request on ``port`` gets the stream protocol's response."""
    request = struct.pack(">HHIi", 0x0011, 1, 1, 0)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(struct.pack(">I", len(request)) + request)
        header = sock.recv(8)
    return len(header) == 8 and struct.unpack(">H", header[4:6])[0] == 0x8011


def node_env(run: Callable[..., tuple[int, str]], app: str, key: str) -> str:
    """An application parameter as the broker's node holds it, as Erlang prints it
    (``run``: a command in its container)."""
    code, output = run("rabbitmqctl", "-q", "eval", f"application:get_env({app}, {key}).")
    assert code == 0, output
    return output.strip()


def read_ahead_of(run: Callable[..., tuple[int, str]]) -> str:
    """The broker's stream read-ahead as its node holds it."""
    return node_env(run, "rabbit", "stream_read_ahead")


@pytest.mark.broker
def test_container_brokers_offer_the_stream_protocol(rabbitmq_broker_factory: Any) -> None:
    handle = rabbitmq_broker_factory()
    broker = handle.broker
    assert broker.stream_port is not None
    assert answers_stream_protocol(broker.host, broker.stream_port)
    # and read streams of small chunks ahead (RabbitMQ 4.2.1+; older ones keep it unread)
    assert read_ahead_of(handle.exec) == f"{{ok,{STREAM_READ_AHEAD}}}"


@pytest.mark.broker
@pytest.mark.versions  # 4.0 and 3.10 keep the first of a parameter given twice, 4.3 the last
def test_a_callers_erlang_arguments_add_to_the_stream_ones(rabbitmq_broker_factory: Any) -> None:
    """Given with ``env``, they join rabbitry's: the stream port stays advertised where it is
    published, and a parameter both set is the caller's."""
    handle = rabbitmq_broker_factory(env={ERL_ARGS: "-rabbit stream_read_ahead 8192"})
    assert read_ahead_of(handle.exec) == "{ok,8192}"
    advertised = node_env(handle.exec, "rabbitmq_stream", "advertised_port")
    assert advertised == f"{{ok,{handle.broker.stream_port}}}"


def _silence(container: Any) -> None:
    """Kill the container's processes behind the engine's back, as a host that ends a session
    does: the engine goes on reporting it as running, and its port forwarding stays. Where the
    processes are not visible from here (an engine in a VM), pausing it silences it too."""
    state = container.attrs.get("State") or {}
    pids = [state.get("ConmonPid") or 0, state.get("Pid") or 0]
    if all(pid and Path(f"/proc/{pid}").exists() for pid in pids):
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    else:
        container.pause()


@pytest.mark.broker
def test_dev_broker_keeps_clear_of_other_containers_ports_and_revives_a_silent_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if find_engine(os.environ) is None:
        pytest.fail("no container engine answers")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".rabbitry").mkdir()
    client = docker_client(require_engine())
    first = f"rabbitry-dev-test-{uuid.uuid4().hex[:6]}"
    second = f"rabbitry-dev-test-{uuid.uuid4().hex[:6]}"
    amqp, mgmt = free_port(), free_port()
    try:
        up = subprocess.run(
            [*CLI, "dev-broker", "up", "--name", first, "--port", str(amqp),
             "--management-port", str(mgmt)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert up.returncode == 0, up.stdout + up.stderr
        url = CliRunner().invoke(cli, ["dev-broker", "url", "--name", first, "--reveal"])
        container = client.containers.get(first)
        _silence(container)

        # Its port no longer answers, and nothing holds it that a bind would see; but it is
        # still the first container's, and a broker given it would never be reached.
        taken = subprocess.run(
            [*CLI, "dev-broker", "up", "--name", second, "--port", str(amqp)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert taken.returncode == 1
        assert f"host port {amqp} is published by container {first!r}" in taken.stderr
        assert not [c for c in engine_containers(client) if c["Name"].lstrip("/") == second]

        # `up` of the silent one brings it back, with the URL (password, ports) it had.
        again = subprocess.run(
            [*CLI, "dev-broker", "up", "--name", first],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        after = CliRunner().invoke(cli, ["dev-broker", "url", "--name", first, "--reveal"])
        assert after.output == url.output
        declare_queue(after.output.strip(), "back")
    finally:
        for name in (first, second):
            CliRunner().invoke(cli, ["dev-broker", "down", "--name", name])
