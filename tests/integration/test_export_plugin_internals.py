"""Export of a vhost MQTT and STOMP clients use, on a real broker with both plugins enabled.

The clients are real: the few MQTT (3.1.1 and 5) and STOMP 1.2 frames they need are spoken over
a socket here, as any client library would send them. Their sessions make queues bound from
``amq.topic``; the export leaves those out and names them, keeps what the user declared (a queue
bound from ``amq.topic`` too), and the spec validates and applies back to an empty vhost.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from rabbitry.cli import cli

from .conftest import with_credentials

MQTT_PORT = 1883
STOMP_PORT = 61613
VHOST = "iot"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _text(value: str) -> bytes:
    data = value.encode()
    return struct.pack("!H", len(data)) + data


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def _read_packet(sock: socket.socket) -> tuple[int, bytes]:
    first = sock.recv(1)[0]
    length, shift = 0, 0
    while True:
        digit = sock.recv(1)[0]
        length |= (digit & 0x7F) << shift
        shift += 7
        if not digit & 0x80:
            break
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return first, body


def mqtt_session(host: str, port: int, client: str, *, will_delay: int = 0) -> socket.socket:
    """An MQTT session that outlives its connection: 3.1.1 with clean session false, or, with
    a ``will_delay``, 5 with an hour's session expiry and a will sent that many seconds after
    the connection drops. The user name ``vhost:user`` picks the vhost."""
    sock = socket.create_connection((host, port), timeout=10)
    login = _text(f"{VHOST}:guest") + _text("guest")
    if will_delay:
        properties = bytes([0x11]) + struct.pack("!I", 3600)  # session expiry interval
        will = bytes([0x18]) + struct.pack("!I", will_delay)  # will delay interval
        flags = 0xC0 | 0x04  # user name, password, will; clean start off
        body = (
            _text("MQTT")
            + bytes([5, flags])
            + struct.pack("!H", 60)
            + _varint(len(properties))
            + properties
            + _text(client)
            + _varint(len(will))
            + will
            + _text("meters/gone")
            + _text("offline")
            + login
        )
    else:
        body = _text("MQTT") + bytes([4, 0xC0]) + struct.pack("!H", 60) + _text(client) + login
    sock.sendall(_packet(0x10, body))
    kind, answer = _read_packet(sock)
    assert kind == 0x20 and answer[1] == 0, f"CONNACK refused: {answer!r}"
    return sock


def mqtt_subscribe(sock: socket.socket, topic: str, qos: int, *, v5: bool = False) -> None:
    body = struct.pack("!H", 1) + (b"\x00" if v5 else b"") + _text(topic) + bytes([qos])
    sock.sendall(_packet(0x82, body))
    kind, answer = _read_packet(sock)
    assert kind == 0x90 and answer[-1] == qos, f"SUBACK refused: {answer!r}"


def stomp_durable_subscription(host: str, port: int, topic: str) -> socket.socket:
    """A STOMP 1.2 client with a durable subscription to ``/topic/<topic>``."""
    sock = socket.create_connection((host, port), timeout=10)
    sock.sendall(
        f"CONNECT\naccept-version:1.2\nhost:{VHOST}\nlogin:guest\npasscode:guest\n\n\0".encode()
    )
    assert sock.recv(4096).startswith(b"CONNECTED"), "STOMP CONNECT refused"
    sock.sendall(
        f"SUBSCRIBE\nid:0\ndestination:/topic/{topic}\ndurable:true\nauto-delete:false\n"
        "receipt:sub\n\n\0".encode()
    )
    assert sock.recv(4096).startswith(b"RECEIPT"), "STOMP SUBSCRIBE refused"
    return sock


def wait_for(condition: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.fixture
def iot_broker(rabbitmq_broker_factory: Any) -> Any:
    # RabbitMQ's own variable, honoured by the official image and rabbitry's alike
    plugins = "rabbitmq_management,rabbitmq_mqtt,rabbitmq_stomp"
    return rabbitmq_broker_factory(
        env={"RABBITMQ_ENABLED_PLUGINS": plugins}, extra_ports=[MQTT_PORT, STOMP_PORT]
    )


def test_export_leaves_mqtt_and_stomp_internals_out_and_applies_back(
    iot_broker: Any, tmp_path: Path
) -> None:
    broker = iot_broker.broker
    http = httpx.Client(base_url=broker.management_url + "/api", auth=broker.auth)
    management = with_credentials(broker.management_url, broker.username, broker.password)

    def cli_run(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    def queues() -> dict[str, Any]:
        return {q["name"]: q for q in http.get(f"/queues/{VHOST}").json()}

    # what the user made by hand: the vhost, a queue fed from amq.topic
    http.put(f"/vhosts/{VHOST}", json={}).raise_for_status()
    http.put(f"/permissions/{VHOST}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    http.put(f"/queues/{VHOST}/readings", json={"durable": True}).raise_for_status()
    http.post(
        f"/bindings/{VHOST}/e/amq.topic/q/readings", json={"routing_key": "sensors.#"}
    ).raise_for_status()

    # what the clients' sessions make
    host = broker.host
    meter = mqtt_session(host, iot_broker.host_port(MQTT_PORT), "meter-1")
    mqtt_subscribe(meter, "sensors/+/temp", 1)
    mqtt_subscribe(meter, "alerts/#", 0)
    meter.sendall(b"\xe0\x00")  # DISCONNECT: the session and its queues stay
    meter.close()
    gauge = mqtt_session(host, iot_broker.host_port(MQTT_PORT), "gauge-5", will_delay=600)
    mqtt_subscribe(gauge, "sensors/#", 1, v5=True)
    gauge.close()  # dropped without DISCONNECT: the will waits for its delay in a queue
    news = stomp_durable_subscription(host, iot_broker.host_port(STOMP_PORT), "news.*")
    news.sendall(b"DISCONNECT\n\n\0")
    news.close()
    internals = {
        "mqtt-subscription-meter-1qos1",
        "mqtt-subscription-meter-1qos0",
        "mqtt-subscription-gauge-5qos1",
        "mqtt-will-gauge-5",
    }
    wait_for(lambda: internals <= set(queues()), f"the MQTT plugin's queues {internals}")
    (stomp_queue,) = [name for name in queues() if name.startswith("stomp-subscription-")]
    assert set(queues()) == {*internals, stomp_queue, "readings"}

    spec = tmp_path / "iot.yaml"
    exported = cli_run("export", "--vhost", VHOST, "--management-url", management, "-o", str(spec))
    assert exported.exit_code == 0, exported.output
    for name in sorted(internals):
        assert f"left out: queue {VHOST}/{name}: made by the MQTT plugin" in exported.stderr
    assert f"left out: queue {VHOST}/{stomp_queue}: made by the STOMP plugin" in exported.stderr
    for name in ("mqtt-subscription-meter-1qos1", "mqtt-subscription-gauge-5qos1", stomp_queue):
        assert f"left out: binding {VHOST}/amq.topic -> {name}: to or from" in exported.stderr
    text = spec.read_text()
    assert "mqtt-" not in text and "stomp-" not in text, text
    assert "name: readings" in text and "routing_key: sensors.#" in text, text
    checked = cli_run("validate", str(spec))
    assert checked.exit_code == 0, checked.output

    # applied where the clients' queues are, it adopts the user's queue and leaves them alone
    applied = cli_run(
        "apply", str(spec), "--management-url", management, "--auto-approve", "--prune"
    )
    assert applied.exit_code == 0, applied.output
    assert set(queues()) == {*internals, stomp_queue, "readings"}

    # and it makes the user's objects again where nothing is left
    http.delete(f"/vhosts/{VHOST}").raise_for_status()
    applied = cli_run("apply", str(spec), "--management-url", management, "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert set(queues()) == {"readings"}
    bindings = http.get(f"/bindings/{VHOST}/e/amq.topic/q/readings").json()
    assert [b["routing_key"] for b in bindings] == ["sensors.#"]
    again = cli_run("plan", str(spec), "--management-url", management, "--detailed-exitcode")
    assert again.exit_code == 0, again.output
