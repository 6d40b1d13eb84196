"""The management client's short wait for a first answer catches a silent port, and nothing
else: a first delete or import, and a clone of a client whose broker already answered, wait
the full timeout (a large vhost's delete takes tens of seconds). And the answers a real broker
gives only in a race, played by a small HTTP server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rabbitry.errors import BrokerError
from rabbitry.management import client as management
from rabbitry.management.client import ManagementClient
from tests.unit.http_server import JsonAnswers, QuietServer, serving, url_of

SLOW = 0.6  # seconds the fake API takes to answer a delete


class _Slow(JsonAnswers):
    shovel_reads: dict[str, int] = {}

    def _answer(self, delay: float, code: int = 200, body: bytes = b"{}") -> None:
        time.sleep(delay)  # the slow broker played, not a synchronisation
        self.answer(code, body)

    def do_GET(self) -> None:
        if "/parameters/shovel/" in self.path:
            # RabbitMQ 3.10 while a queue-length shovel deletes itself: HTTP 500 with an empty
            # body between its existence check and its read, 404 once it is gone
            _Slow.shovel_reads[self.path] = seen = _Slow.shovel_reads.get(self.path, 0) + 1
            if self.path.endswith("/broken") or seen == 1:
                self._answer(0.0, 500, b"")
            else:
                self._answer(0.0, 404, b'{"error":"Object Not Found","reason":"Not Found"}')
            return
        self._answer(SLOW if self.path.endswith("/slow") else 0.0)

    def do_DELETE(self) -> None:
        self._answer(SLOW, 204, b"")


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(management, "FIRST_ANSWER_TIMEOUT", SLOW / 3)
    with serving(QuietServer(("127.0.0.1", 0), _Slow)) as server:
        yield url_of(server)


def test_a_first_read_that_gets_no_answer_soon_is_a_silent_port(api: str) -> None:
    with ManagementClient(api) as client, pytest.raises(BrokerError, match="no answer within"):
        client.get("/slow")


def test_a_first_delete_waits_the_full_timeout(api: str) -> None:
    with ManagementClient(api) as client:
        assert client.delete("/vhosts/big") is True


def test_after_one_answer_reads_wait_the_full_timeout_and_so_do_clones(api: str) -> None:
    with ManagementClient(api) as client:
        client.get("/overview")
        client.get("/slow")
        with client.clone() as clone:
            clone.get("/slow")


def test_a_slow_first_read_sent_with_others_that_answered_is_read_again_not_failed(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a plan sends its reads together: the small ones answer, the listing of a large vhost on
    # a busy broker takes longer than a silent port would be given
    monkeypatch.setattr(management, "FIRST_ANSWER_TIMEOUT", SLOW * 0.75)  # room for the others
    with ManagementClient(api) as client:
        client.read_ahead([], paths=["/slow", "/overview"])
        assert client.get("/overview") == {}
        assert client.get("/slow") == {}, "the API had answered: a slow read is no silent port"


def test_a_failed_read_ahead_fails_as_a_read_does_without_a_second_wait() -> None:
    import socket

    from rabbitry.errors import BrokerError
    from rabbitry.management.client import ManagementClient

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connections are refused
    with ManagementClient(f"http://127.0.0.1:{port}", timeout=2) as client:
        client.read_ahead(["v"])
        with pytest.raises(BrokerError, match="cannot reach the management API"):
            client.vhost_objects("v")
        assert not client._ahead


def test_a_shovel_that_vanishes_mid_read_is_gone_and_a_lasting_500_is_an_error(api: str) -> None:
    _Slow.shovel_reads.clear()
    with ManagementClient(api) as client:
        assert client.get_vanishing("/parameters/shovel/v/moving", pause=0.01) is None
        assert _Slow.shovel_reads["/api/parameters/shovel/v/moving"] == 2
        with pytest.raises(BrokerError, match="HTTP 500"):
            client.get_vanishing("/parameters/shovel/v/broken", attempts=3, pause=0.01)
        assert _Slow.shovel_reads["/api/parameters/shovel/v/broken"] == 3
        with pytest.raises(BrokerError, match="HTTP 500"):
            client.get_optional("/parameters/shovel/v/other")  # plain reads do not retry
