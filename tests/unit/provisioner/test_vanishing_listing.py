"""RabbitMQ answers a listing with HTTP 500 and an empty body when an object it lists vanishes
while it reads it (a vhost another client deletes during ``GET /vhosts``): a read asks again;
a 500 that stays, or one with a body, is still an error. RabbitMQ 4.3 lists a vhost being deleted
as its statistics without a name: the vhosts' listing passes such an entry over."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rabbitry.errors import BrokerError
from rabbitry.management import client as management
from rabbitry.management.client import ManagementClient
from tests.unit.http_server import JsonAnswers, QuietServer, serving, url_of


class _Flaky(JsonAnswers):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.server.asked += 1
        if self.server.asked <= self.server.empty_500s:
            self.answer(500, b"")
        elif self.path.endswith("/broken"):
            self.answer(500, b'{"error":"internal"}')
        else:
            self.answer(200, self.server.listing)


class _Server(QuietServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Flaky)
        self.asked = 0
        self.empty_500s = 0
        self.listing = b'[{"name": "/"}]'


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    monkeypatch.setattr(management, "VANISHED_PAUSE", 0.0)
    with serving(_Server()) as server:
        yield server


def test_a_listing_answered_500_empty_while_an_object_vanished_is_asked_again(
    server: _Server,
) -> None:
    server.empty_500s = 2
    with ManagementClient(url_of(server)) as client:
        assert client.get("/vhosts") == [{"name": "/"}]
    assert server.asked == 3


def test_a_500_that_stays_is_an_error_after_a_few_asks(server: _Server) -> None:
    server.empty_500s = 100
    with ManagementClient(url_of(server)) as client, pytest.raises(BrokerError, match="500"):
        client.get("/vhosts")
    assert server.asked == 1 + management.VANISHED_RETRIES


def test_a_500_with_a_body_is_not_asked_again(server: _Server) -> None:
    with ManagementClient(url_of(server)) as client, pytest.raises(BrokerError, match="500"):
        client.get("/broken")
    assert server.asked == 1


GOING = b'{"recv_oct": 8, "send_oct": 520, "metadata": {"default_queue_type": "classic"}}'
"""What RabbitMQ 4.3 listed for a vhost another client deleted during ``GET /vhosts``."""


def test_a_vhost_listed_without_a_name_while_it_is_deleted_is_passed_over(
    server: _Server,
) -> None:
    server.listing = b'[{"name": "/"}, ' + GOING + b', {"name": "app"}]'
    with ManagementClient(url_of(server)) as client:
        assert client.vhosts() == [{"name": "/"}, {"name": "app"}]
