"""Hostile input over every command: each ends with exit 1 and a clear `error:` within 10 s, no
traceback, nothing changed on the broker, and no secret in any output or file.

The inputs: YAML alias bombs, deep nesting, control characters, oversized files, template loops
and string bombs, non-plain YAML tags, names over 255 bytes, non-ASCII vhost names, definitions
files with what JSON cannot carry, keys written twice and password hashes no password matches,
malformed URLs and options (TLS options on a plain URL among them), ports that accept and never
answer, and secrets in every place a spec or a URL can hold one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.errors import BrokerError
from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker

# Each test compares the whole broker's definitions before and after: no other test may change
# the broker meanwhile, so scripts/test.sh runs these after the parallel run, on their own.
pytestmark = [pytest.mark.broker, pytest.mark.broker_wide]

SECRETS = ["Br0ker-s3cret", "Us3r-s3cret", "Fed-s3cret", "Sh0vel-s3cret", "Mgmt-s3cret"]
HEAD = 'version: 1\nname: "{{ vars.stack }}"\n'


def alias_bomb() -> str:
    text = HEAD + 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, 10):
        text += f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]\n"
    return text


def vhost_with(keys: str, vhost: str = "{{ vars.vhost }}") -> str:
    return HEAD + f'vhosts:\n  - name: "{vhost}"\n' + keys


HOSTILE_SPECS = {
    "alias bomb": alias_bomb(),
    "deep nesting": HEAD + "x: " + "[" * 600 + "]" * 600 + "\n",
    "form feed": HEAD + "vhosts: []\x0c\n",
    "escape": HEAD.replace("version", "\x1b[31mversion"),
    "python tag": HEAD + "vhosts: !!python/object/apply:os.system [id]\n",
    "template loop": HEAD
    + "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}\n",
    "string bomb": HEAD + "# {{ 'a' * 10**10 }}\n",
    "power bomb": HEAD + "# {{ 9 ** 9999999 }}\n",
    "oversized": HEAD + "# " + "x" * (17 * 1024 * 1024) + "\n",
    "name over 255 bytes": vhost_with("    queues:\n      - name: " + "é" * 128 + "\n"),
    "non-ASCII vhost": vhost_with("    queues: []\n", vhost="café-{{ vars.vhost }}"),
    "control character in a name": vhost_with('    queues:\n      - name: "a\\u001bb"\n'),
}
SPEC_COMMANDS = ["validate", "render", "graph", "plan", "apply", "status", "shards check"]


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


def definitions(broker: Broker) -> Any:
    everything = broker.http.get("/definitions").json()
    for volatile in ("rabbit_version", "rabbitmq_version", "product_version", "product_name"):
        everything.pop(volatile, None)
    return everything


@dataclass(frozen=True)
class Took:
    """How long a command took: its CPU time (the work a hostile input made it do, which a
    loaded machine hardly changes) and its wall-clock time (waits: time-outs on silent ports)."""

    cpu: float
    wall: float

    @classmethod
    def since(cls, cpu: float, wall: float) -> Took:
        return cls(time.process_time() - cpu, time.monotonic() - wall)

    def within(self, seconds: float) -> bool:
        # Wall-clock time stretches with the machine's load (a CI run puts three brokers and
        # four pytest processes on 2 cores): allowed in proportion, so a hang still fails.
        stretch = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
        return self.cpu < seconds and self.wall < seconds * stretch

    def __str__(self) -> str:
        return f"{self.cpu:.1f} s of CPU, {self.wall:.1f} s wall-clock at load {os.getloadavg()[0]:.1f}"


def run(broker: Broker, argv: list[str], tmp: Path) -> tuple[int, str, Took]:
    argv = [*argv[0].split(), *argv[1:]]  # "shards check" is two words
    verb = argv[0]
    if verb in ("plan", "apply", "status", "export", "dlq", "shards"):
        argv = [*argv]
        if "--management-url" not in argv:
            argv += ["--management-url", broker.management_url]
        if "--url" not in argv:
            argv += ["--url", broker.amqp_url]
    if verb in ("validate", "render", "graph", "plan", "apply", "status", "shards"):
        argv += ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
    if verb == "apply":
        argv.append("--auto-approve")
    cpu, wall = time.process_time(), time.monotonic()
    result = CliRunner().invoke(cli, argv, prog_name="rabbitry")
    took = Took.since(cpu, wall)
    written = "".join(p.read_text(errors="replace") for p in tmp.glob("out*"))
    return result.exit_code, result.stdout + result.stderr + written, took


def assert_refused(code: int, output: str, took: Took) -> None:
    assert code == 1, output[-2000:]
    assert took.within(10), f"took {took}"
    assert "Traceback" not in output
    assert any(line.startswith("error: ") for line in output.splitlines()), output[-2000:]
    for secret in SECRETS:
        assert secret not in output


@pytest.mark.parametrize("name", sorted(HOSTILE_SPECS))
def test_a_hostile_spec_is_refused_by_every_command_and_changes_nothing(
    broker: Broker, tmp_path: Path, name: str
) -> None:
    spec = broker.spec(HOSTILE_SPECS[name], "hostile.yaml")
    before = definitions(broker)
    for verb in SPEC_COMMANDS:
        if name == "oversized" and verb not in ("validate", "apply"):
            continue  # the same refusal before reading; once per kind of command is enough
        code, output, took = run(broker, [verb, str(spec)], tmp_path)
        assert_refused(code, output, took)
    assert definitions(broker) == before


def hostile_definitions(vhost: str, user: str) -> dict[str, tuple[str, str]]:
    """Definitions files (text) that the broker's import would refuse or read otherwise than
    they say, each with the error rabbitry names it by. ``vhost`` does not exist: an apply
    that went ahead would make it first."""

    def queue(arguments: str) -> str:
        return (
            f'{{"vhosts": [{{"name": "{vhost}"}}], "queues": [{{"name": "jobs", "vhost":'
            f' "{vhost}", "durable": true, "auto_delete": false, "arguments": {arguments}}}]}}'
        )

    def users(entry: str) -> str:
        return (
            f'{{"vhosts": [{{"name": "{vhost}"}}],'
            f' "users": [{{"name": "{user}", "tags": "", {entry}}}]}}'
        )

    sha512 = base64.b64encode(b"salt" + hashlib.sha512(b"Us3r-s3cret").digest()).decode()
    return {
        "NaN": (queue('{"x-message-ttl": NaN}'), "NaN is not a JSON number"),
        "Infinity": (queue('{"x-max-length": Infinity}'), "Infinity is not a JSON number"),
        "1e400": (queue('{"x-message-ttl": 1e400}'), "1e400 is past the largest number"),
        "key written twice": (
            queue('{"x-queue-type": "quorum", "x-queue-type": "classic"}'),
            "queues[0].arguments.x-queue-type: the key 'x-queue-type' is written twice",
        ),
        "hash not base64": (
            users('"password_hash": "Us3r-s3cret!"'),
            "users[0].password_hash: password_hash is not base64",
        ),
        "hash too short": (
            users('"password_hash": "c2FsdHNob3J0"'),
            "password_hash decodes to 9 bytes, not the 36",
        ),
        "hash of another algorithm": (
            users(
                f'"password_hash": "{sha512}",'
                ' "hashing_algorithm": "rabbit_password_hashing_sha256"'
            ),
            "68 bytes is a rabbit_password_hashing_sha512 hash",
        ),
        "empty hash": (users('"password_hash": ""'), "the user has no password hash"),
        # a plain password alone is hashed as the broker would (test_import_definitions)
        "plain password and a hash": (
            users(f'"password": "Us3r-s3cret", "password_hash": "{sha512}"'),
            "gives both `password` and `password_hash`: keep one",
        ),
        "empty plain password": (users('"password": ""'), "the password is empty"),
        "deep nesting": (
            f'{{"vhosts": [{{"name": "{vhost}"}}], "global_parameters": [{{"name": "x",'
            f' "value": {"[" * 5000 + "]" * 5000}}}]}}',
            "nested deeper than 100 levels",
        ),
    }


DEFINITIONS_COMMANDS = ["validate", "import-definitions", "plan", "apply"]


@pytest.mark.parametrize("name", sorted(hostile_definitions("v", "u")))
def test_a_hostile_definitions_file_is_refused_before_any_change(
    broker: Broker, tmp_path: Path, name: str
) -> None:
    vhost, user = f"{broker.vhost}-defs", f"{broker.stack}-defs-u"
    text, expected = hostile_definitions(vhost, user)[name]
    source = tmp_path / f"{broker.stack}-defs.json"  # the stack is named after the file
    source.write_text(text)

    def touched() -> list[Any]:
        """What an apply of the file would make: the vhost, the user, the stack's record and
        lock (only these: other tests change the shared broker meanwhile)."""
        everything = definitions(broker)
        stack = source.stem
        return [
            [v for v in everything["vhosts"] if v["name"] == vhost],
            [u for u in everything["users"] if u["name"] == user],
            [p for p in everything["global_parameters"] if stack in p["name"]],
            [q for q in everything["queues"] if q["vhost"] == vhost],
        ]

    before = touched()
    assert before == [[], [], [], []]
    for verb in DEFINITIONS_COMMANDS:
        argv = [verb, str(source)]
        if verb in ("plan", "apply"):
            argv += ["--management-url", broker.management_url, "--url", broker.amqp_url]
        if verb == "apply":
            argv.append("--auto-approve")
        cpu, wall = time.process_time(), time.monotonic()
        result = CliRunner().invoke(cli, argv, prog_name="rabbitry")
        output = result.stdout + result.stderr
        assert_refused(result.exit_code, output, Took.since(cpu, wall))
        assert f"{source}: " in output and expected in output, (verb, output[-2000:])
    assert touched() == before  # no vhost, no user, no stack record, no lock left behind


def bad_broker_inputs(silent: int) -> dict[str, list[str]]:
    return {
        "unclosed IPv6": ["--management-url", "http://u:Mgmt-s3cret@[::1"],
        "port not a number": ["--management-url", "http://u:Mgmt-s3cret@host:abc"],
        "no scheme": ["--management-url", "u:Mgmt-s3cret@localhost:15672"],
        "silent management port": ["--management-url", f"http://u:Mgmt-s3cret@127.0.0.1:{silent}"],
        "amqp URL option": ["--url", "amqp://u:Br0ker-s3cret@localhost/?heartbeat=soon"],
        "missing CA file": ["--url", "amqps://u:Br0ker-s3cret@localhost/?cacertfile=/no/ca.pem"],
        "TLS option on amqp://": [
            "--url",
            "amqp://u:Br0ker-s3cret@localhost/?cacertfile=/no/ca.pem&verify=verify_peer",
        ],
        "unknown amqp URL option": ["--url", "amqp://u:Br0ker-s3cret@localhost/?ssl=true"],
        "contradicting TLS flags": ["--insecure", "--ca-file", "/etc/hostname"],
        "management URL option": [
            "--management-url",
            "http://u:Mgmt-s3cret@localhost:15672/?cacertfile=/etc/hostname",
        ],
        "CA file for a plaintext management URL": [
            "--management-url",
            "http://u:Mgmt-s3cret@127.0.0.1:15672",
            "--ca-file",
            "/etc/hostname",
        ],
    }


BROKER_COMMANDS = {
    "plan": ["plan", "{spec}"],
    "apply": ["apply", "{spec}"],
    "status": ["status", "{spec}"],
    "export": ["export", "--vhost", "{vhost}", "-o", "{tmp}/out.yaml"],
    "dlq list": ["dlq", "list", "--vhost", "{vhost}"],
    "dlq show": ["dlq", "show", "work.parking", "--vhost", "{vhost}"],
    "dlq replay": ["dlq", "replay", "work.parking", "--all", "--vhost", "{vhost}"],
    "dlq purge": ["dlq", "purge", "work.parking", "--yes", "--vhost", "{vhost}"],
}
# The commands each input reaches: management URL problems the management commands, AMQP URL
# problems those that open AMQP connections.
AMQP_ONLY = {
    "amqp URL option",
    "missing CA file",
    "TLS option on amqp://",
    "unknown amqp URL option",
}


@pytest.mark.parametrize("name", sorted(bad_broker_inputs(0)))
def test_bad_broker_inputs_are_refused_by_every_command_and_change_nothing(
    broker: Broker, tmp_path: Path, silent_port: int, name: str
) -> None:
    spec = broker.spec(vhost_with("    queues: [{name: work, retry: {attempts: 2}}]\n"))
    broker.apply(spec.read_text())
    before = definitions(broker)
    extra = bad_broker_inputs(silent_port)[name]
    for command, template in BROKER_COMMANDS.items():
        dlq_amqp = command in ("dlq show", "dlq replay", "dlq purge")
        if name in AMQP_ONLY and not dlq_amqp and command != "plan":
            continue
        if name not in AMQP_ONLY and dlq_amqp and "management" in name:
            continue  # these speak AMQP only
        argv = [arg.format(spec=spec, vhost=broker.vhost, tmp=tmp_path) for arg in template] + extra
        if name in AMQP_ONLY and command == "plan":
            # a plan that has a queue to count: the change makes it a replace
            argv[1] = str(
                broker.spec(vhost_with("    queues: [{name: work, type: classic}]\n"), "next.yaml")
            )
            argv.append("--json")
            code, output, took = run(broker, argv, tmp_path)
            # the plan itself goes on without AMQP (counts from statistics, and says so) ...
            assert code == 0 and took.within(10) and "Br0ker-s3cret" not in output
            continue
        code, output, took = run(broker, argv, tmp_path)
        assert_refused(code, output, took)
    assert definitions(broker) == before


def test_tls_asked_of_a_plain_url_is_refused_by_the_publisher_and_the_cli(
    broker: Broker, tmp_path: Path
) -> None:
    """The broker's own address, with a TLS option on amqp://: refused before any connection,
    never a plaintext one, and the broker's password is not shown."""
    parts = urlsplit(broker.vhost_amqp_url)
    password = parts.password or ""
    url = urlunsplit((*parts[:3], "cacertfile=/missing.pem&verify=verify_peer", ""))
    with pytest.raises(BrokerError) as caught:
        Publisher(url)
    text = str(caught.value)
    assert "connects without TLS (amqp://), but asks for TLS with cacertfile, verify" in text
    assert "use amqps://" in text and f"{parts.username}:***@" in text
    assert f":{password}@" not in text  # the password may equal the user name (guest)

    spec = broker.spec(vhost_with("    queues: [{name: work, retry: {attempts: 2}}]\n"))
    broker.apply(spec.read_text())
    before = broker.get("/definitions/{vhost}")  # the test's vhost: the broker is shared
    argv = ["dlq", "replay", "work.parking", "--all", "--vhost", broker.vhost, "--url", url]
    code, output, took = run(broker, argv, tmp_path)
    assert_refused(code, output, took)
    assert "asks for TLS with cacertfile, verify" in output and f":{password}@" not in output
    assert broker.get("/definitions/{vhost}") == before


SECRET_SPEC = (
    HEAD
    + """\
broker:
  url: amqp://guest:Br0ker-s3cret@127.0.0.1:1/
users:
  - {name: "u-{{ vars.vhost }}", password: Us3r-s3cret}
vhosts:
  - name: "{{ vars.vhost }}"
    permissions:
      - {user: "u-{{ vars.vhost }}"}
    parameters:
      - component: shovel
        name: s1
        value:
          src-uri: amqp://u:Sh0vel-s3cret@127.0.0.1
          src-queue: a
          dest-uri: amqp://u:Sh0vel-s3cret@127.0.0.1
          dest-queue: b
    federation:
      upstreams:
        - {name: dc1, uri: "amqp://fed:Fed-s3cret@127.0.0.1:5672"}
      exchanges:
        - {pattern: "^events$", upstream: dc1}
    exchanges:
      - {name: events, type: topic}
"""
)


def test_no_secret_reaches_any_output_or_file(broker: Broker, tmp_path: Path) -> None:
    spec = broker.spec(SECRET_SPEC, "secrets.yaml")
    outputs = []
    for argv in (
        ["validate", str(spec)],
        ["validate", str(spec), "--json"],
        ["render", str(spec)],
        ["render", str(spec), "--format", "json"],
        ["render", str(spec), "--template-only"],
        ["graph", str(spec), "-o", f"{tmp_path}/out.dot"],
        ["plan", str(spec), "-v"],
        ["plan", str(spec), "--json"],
        ["apply", str(spec), "-v"],
        ["plan", str(spec), "--json"],
        ["export", "--vhost", broker.vhost, "--users", "-o", f"{tmp_path}/out.yaml"],
        ["export", "--vhost", broker.vhost, "--users", "--json"],  # an error: no --json there
        ["status", str(spec)],
    ):
        code, output, _ = run(broker, argv, tmp_path)
        outputs.append(output)
        if argv[0] == "apply":
            assert code == 0, output
        assert "Traceback" not in output
    everything = "\n".join(outputs)
    for secret in SECRETS:
        assert secret not in everything, secret
    exported = (tmp_path / "out.yaml").read_text()
    assert "{{ env.RABBITRY_SHOVEL_S1_SRC_URI_PASSWORD }}" in exported
    assert (tmp_path / "out.yaml").stat().st_mode & 0o777 == 0o600
