"""The management client's short wait for a first answer catches a silent port, and nothing
else: a first delete or import, and a clone of a client whose broker already answered, wait
the full timeout (a large vhost's delete takes tens of seconds)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rabbitry.errors import BrokerError
from rabbitry.provisioner import management
from rabbitry.provisioner.management import ManagementClient

SLOW = 0.6  # seconds the fake API takes to answer a delete


class _Slow(BaseHTTPRequestHandler):
    def _answer(self, delay: float, code: int = 200, body: bytes = b"{}") -> None:
        time.sleep(delay)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(SLOW if self.path.endswith("/slow") else 0.0)

    def do_DELETE(self) -> None:
        self._answer(SLOW, 204, b"")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(management, "FIRST_ANSWER_TIMEOUT", SLOW / 3)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://guest:guest@127.0.0.1:{server.server_address[1]}"
    server.shutdown()


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


def test_a_failed_read_ahead_is_read_again_and_fails_as_a_read_does() -> None:
    import socket

    from rabbitry.errors import BrokerError
    from rabbitry.provisioner.management import ManagementClient

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connections are refused
    with ManagementClient(f"http://127.0.0.1:{port}", timeout=2) as client:
        client.read_ahead(["v"])
        with pytest.raises(BrokerError, match="cannot reach the management API"):
            client.vhost_objects("v")
        assert not client._ahead
