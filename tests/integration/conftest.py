"""Shared by the integration tests: the per-test vhost seen through the CLI and the APIs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pika
import pytest
from click.testing import CliRunner, Result

from rabbitry.cli import cli
from rabbitry.testing import create_test_vhost, delete_vhost


def with_credentials(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def drain_ids(channel: Any, queue: str) -> list[str]:
    """Message ids of everything in ``queue``, taken off it with ``basic_get``."""
    ids = []
    while True:
        method, props, _ = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return ids
        ids.append(props.message_id)


def one_vhost_spec(vhost_keys: str) -> str:
    """A spec whose stack and one vhost are the test's own (``Broker.run`` passes both as
    variables), with ``vhost_keys`` (indented as under ``- name:``) for that vhost."""
    return (
        """
    version: 1
    name: "{{ vars.stack }}"
    vhosts:
      - name: "{{ vars.vhost }}"
"""
        + vhost_keys
    )


def worker_process(
    broker: Broker,
    module: str,
    source: str,
    env: Mapping[str, str],
    *args: str,
    stdout: IO[bytes] | int = subprocess.PIPE,
) -> subprocess.Popen[bytes]:
    """``rabbitry worker run <module>:app`` in a process of its own: ``source`` is written to
    ``<module>.py`` in the test's folder, and reads the spec's path and vhost from ``T_SPEC``
    and ``T_VHOST`` (with ``env`` added); ``args`` go to the command."""
    (broker.tmp / f"{module}.py").write_text(textwrap.dedent(source))
    environment = {
        **os.environ,
        "T_SPEC": str(broker.tmp / "spec.yaml"),
        "T_VHOST": broker.vhost,
        **env,
        "PYTHONPATH": f"{broker.tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    command = ["worker", "run", f"{module}:app", "--url", broker.amqp_url, *args]
    return subprocess.Popen(
        [sys.executable, "-c", "from rabbitry.cli import main; main()", *command],
        env=environment,
        cwd=broker.tmp,
        stdout=stdout,
        stderr=subprocess.STDOUT,
    )


class Broker:
    """The per-test vhost, seen through the CLI and the management API."""

    def __init__(self, vhost: Any, tmp_path: Path) -> None:
        self.test_vhost = vhost
        self.vhost = vhost.name
        self.tmp = tmp_path
        self.management_url = with_credentials(vhost.management_url, vhost.username, vhost.password)
        amqp = urlsplit(vhost.amqp_url)
        self.amqp_url = urlunsplit((amqp.scheme, amqp.netloc, "/", "", ""))
        self.vhost_amqp_url = vhost.amqp_url
        self.http = httpx.Client(
            base_url=vhost.management_url.rstrip("/") + "/api",
            auth=(vhost.username, vhost.password),
        )
        self.stack = f"test-{self.vhost}"

    def spec(self, body: str, name: str = "spec.yaml") -> Path:
        path = self.tmp / name
        path.write_text(textwrap.dedent(body).lstrip())
        return path

    def apply(self, body: str, name: str = "spec.yaml") -> Broker:
        """Write the spec ``body`` and apply it (it must apply cleanly)."""
        result = self.run("apply", str(self.spec(body, name)), "--auto-approve")
        assert result.exit_code == 0, result.output
        return self

    def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        verb, *rest = args
        argv = [verb, *rest]
        if verb in ("plan", "apply", "export", "status"):
            argv += ["--management-url", self.management_url, "--url", self.amqp_url]
        if verb in ("plan", "apply", "validate", "render", "status"):
            argv += ["--var", f"vhost={self.vhost}", "--var", f"stack={self.stack}"]
        return CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)

    def get(self, path: str) -> Any:
        response = self.http.get(path.replace("{vhost}", quote(self.vhost, safe="")))
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    @property
    def version(self) -> tuple[int, ...]:
        """The broker's RabbitMQ version, (4, 3, 6)."""
        shown = str(self.get("/overview")["rabbitmq_version"])
        return tuple(int(p) for p in shown.split("-")[0].split(".") if p.isdigit())

    def queue_names(self) -> set[str]:
        return {q["name"] for q in self.get("/queues/{vhost}")}

    def count(self, queue: str) -> int:
        """Exact message count (passive declare), not the management API's lagging figure."""
        connection = pika.BlockingConnection(pika.URLParameters(self.vhost_amqp_url))
        try:
            return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
        finally:
            connection.close()

    def for_next_test(self, tmp_path: Path) -> Broker:
        """This vhost, as applied for a module (``module_vhost``), handed to one more test: its
        specs copied to the test's own folder, every queue ``emptied``."""
        shared = Broker(self.test_vhost, tmp_path)
        for spec in self.tmp.glob("*.yaml"):
            shutil.copyfile(spec, tmp_path / spec.name)
        return shared.emptied()

    def emptied(self, timeout: float = 30.0) -> Broker:
        """This vhost with every queue empty and unconsumed, for a test that shares it with the
        tests before it (``module_vhost``): waits until no consumer of an earlier test is left
        (a killed worker's connection closes a moment after it dies), purges every queue and
        checks each holds nothing, by exact AMQP counts. A message still moving between delay
        levels is in one of the queues, so it goes too: no test sees another's messages."""
        names = sorted(self.queue_names())
        connection = pika.BlockingConnection(pika.URLParameters(self.vhost_amqp_url))
        try:
            channel = connection.channel()
            deadline = time.monotonic() + timeout
            while True:
                left = {}
                for name in names:
                    ok = channel.queue_declare(name, passive=True).method
                    if ok.consumer_count:
                        left[name] = f"{ok.consumer_count} consumer(s)"
                    elif ok.message_count:
                        channel.queue_purge(name)
                        left[name] = f"{ok.message_count} message(s)"
                if not left:
                    return self
                assert time.monotonic() < deadline, f"earlier tests left behind: {left}"
                time.sleep(0.05)
        finally:
            connection.close()

    def publish(self, queue: str, count: int) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.vhost_amqp_url))
        channel = connection.channel()
        channel.confirm_delivery()
        for i in range(count):
            channel.basic_publish("", queue, f"m{i}".encode())
        connection.close()


@pytest.fixture
def broker(rabbitmq_vhost: Any, tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(rabbitmq_vhost, tmp_path)
    yield broker
    forget_stack(broker.http, broker.stack)
    broker.http.close()


def forget_stack(http: httpx.Client, stack: str) -> None:
    """Delete a test's stack records. The vhost goes with the test, but its stack's ownership
    record is broker-wide and would stay, still owning what the test adopted (an export
    --users takes the admin user): a later test on the same broker would be refused it."""
    for record in (f"rabbitry.stack.{stack}", f"rabbitry.lock.{stack}"):
        http.delete(f"/global-parameters/{quote(record, safe='')}")


@pytest.fixture(scope="module")
def module_vhost(rabbitmq_broker: Any) -> Iterator[Any]:
    """One vhost for a module's tests (per xdist worker that runs them), for tests that apply
    the same spec and change no topology: the module applies it once and each test takes it
    ``Broker.emptied()``. Tests that change objects keep the per-test ``broker``."""
    vhost = create_test_vhost(rabbitmq_broker)
    try:
        yield vhost
    finally:
        delete_vhost(rabbitmq_broker, vhost.name)
        with httpx.Client(
            base_url=vhost.management_url.rstrip("/") + "/api",
            auth=(vhost.username, vhost.password),
        ) as http:
            forget_stack(http, f"test-{vhost.name}")


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[Any]:
    """The Spark session of every Spark module in this pytest process (``spark_sessions``)."""
    from tests.integration.spark_sessions import Sessions

    with Sessions() as held:
        yield held


@pytest.fixture
def spark(spark_sessions: Any) -> Any:
    """The local Spark session (``local[2,2]``), started once per pytest process."""
    return spark_sessions.local()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """A three-node cluster, started once per pytest process (test_cluster, test_failover)."""
    from tests.integration.cluster import three_nodes

    with three_nodes() as nodes:
        yield nodes


class StreamBroker:
    """A vhost of a broker that offers the stream protocol: what the Spark stream tests'
    helpers need (the vhost's AMQP URL), plus the stream port."""

    def __init__(self, vhost_amqp_url: str, stream_port: int) -> None:
        self.vhost_amqp_url = vhost_amqp_url
        self.stream_port = stream_port


@pytest.fixture(scope="session")
def stream_capable_broker(rabbitmq_broker: Any) -> Iterator[Any]:
    """The session's broker when it offers the stream protocol at a known port (a container
    broker does); else a container broker of this pytest process's own."""
    if rabbitmq_broker.stream_port is not None:
        yield rabbitmq_broker
        return
    from rabbitry.testing import start_broker
    from rabbitry.testing.broker import BrokerUnavailable

    try:
        container = start_broker()
    except BrokerUnavailable as exc:
        pytest.skip(str(exc))
    with container:
        assert container.broker.stream_port is not None
        yield container.broker


@pytest.fixture
def stream_broker(stream_capable_broker: Any) -> Iterator[StreamBroker]:
    """A fresh vhost on ``stream_capable_broker``, deleted after the test."""
    vhost = create_test_vhost(stream_capable_broker)
    try:
        yield StreamBroker(vhost.amqp_url, stream_capable_broker.stream_port)
    finally:
        delete_vhost(stream_capable_broker, vhost.name)
