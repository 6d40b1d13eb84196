"""Waiting for a broker to be ready: AMQP answers connection.start, the management API 200.

Stand-ins on 127.0.0.1 play the broker's two ports; each wait is bounded by its own timeout
(counted by the wait itself, not asserted as wall-clock time)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rabbitry.errors import BrokerError
from rabbitry.testing.broker import Broker, wait_for_amqp, wait_for_management
from tests.unit.http_server import JsonAnswers, QuietServer, serving


def _amqp_port(answer: bytes) -> Iterator[int]:
    """A port that reads the protocol header and answers ``answer`` (b'': hangs up)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(8)
                if answer:
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    listener.close()


@pytest.fixture
def greeting_port() -> Iterator[int]:
    yield from _amqp_port(b"\x01")  # the first byte of a method frame: connection.start


@pytest.fixture
def hang_up_port() -> Iterator[int]:
    yield from _amqp_port(b"")


@contextmanager
def _management(status: int) -> Iterator[Broker]:
    """A management API stand-in that answers every GET with ``status``."""

    class Answer(JsonAnswers):
        def do_GET(self) -> None:
            self.answer(status)

    with serving(QuietServer(("127.0.0.1", 0), Answer)) as server:
        yield Broker(host="127.0.0.1", management_port=server.server_address[1])


def test_amqp_is_ready_once_the_port_answers_the_protocol_header(greeting_port: int) -> None:
    broker = Broker(host="127.0.0.1", amqp_port=greeting_port)
    assert wait_for_amqp(broker, timeout=5) is broker


def test_a_port_that_hangs_up_is_not_ready_and_the_error_says_what_it_did(
    hang_up_port: int,
) -> None:
    broker = Broker(host="127.0.0.1", amqp_port=hang_up_port)
    with pytest.raises(BrokerError, match=r"closed before connection\.start"):
        wait_for_amqp(broker, timeout=0.3)


def test_a_port_nothing_listens_on_names_the_refusal_and_each_pass_runs_the_check() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    checks: list[None] = []
    broker = Broker(host="127.0.0.1", amqp_port=port)
    with pytest.raises(BrokerError, match=rf"127.0.0.1:{port} did not answer .*Refused"):
        wait_for_amqp(broker, timeout=0.6, check=lambda: checks.append(None))
    assert checks, "the check runs between two attempts"


def test_a_check_that_raises_stops_the_wait_at_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]

    def gone() -> None:
        raise RuntimeError("the container exited")

    with pytest.raises(RuntimeError, match="exited"):
        wait_for_amqp(Broker(host="127.0.0.1", amqp_port=port), timeout=60, check=gone)


def test_the_management_api_is_ready_on_its_first_200() -> None:
    with _management(200) as broker:
        assert wait_for_management(broker, timeout=5) is broker


def test_a_management_api_that_refuses_the_user_fails_at_once_naming_it() -> None:
    with _management(401) as broker, pytest.raises(BrokerError, match=r"refused user 'guest'"):
        wait_for_management(broker, timeout=60)


def test_a_management_api_that_keeps_failing_gives_its_last_status() -> None:
    with _management(503) as broker, pytest.raises(BrokerError, match=r"last: HTTP 503"):
        wait_for_management(broker, timeout=0.3)
