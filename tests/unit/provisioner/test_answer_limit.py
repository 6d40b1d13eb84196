"""A management API answer is read as it streams in and no further than a limit
(``RABBITRY_MANAGEMENT_MAX_BYTES``), counted decoded: a server that answers without end, one
that announces gigabytes and a gzip bomb all stop at the limit with an error that names the
request, the limit and the setting, in plain reads, reads made ahead and ``rabbitry plan``,
which then changes nothing. The server is a small real HTTP server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import struct
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.errors import BrokerError
from rabbitry.management.answer_limit import (
    DEFAULT_MAX_BYTES,
    MAX_BYTES_ENV,
    AnswerTooLarge,
    max_answer_bytes,
)
from rabbitry.management.client import ManagementClient
from tests.unit.http_server import JsonAnswers, QuietServer, serving, url_of

MiB = 1024 * 1024
LIMIT = 1 * MiB
ENDLESS = 256 * MiB
"""What the endless answer sends at most (so that a client without the limit ends too)."""
BOMB = 256 * MiB
"""What the gzip bomb inflates to: about 270 KB sent."""
WITHIN = 4 * MiB
"""The decoded size of an answer read at a limit of just that."""
SECRET = "s3cret-pw"
SPEC = str(Path(__file__).parents[3] / "examples" / "shop.yaml")


def gzip_bomb(size: int) -> bytes:
    """A gzip body of ``size`` zero bytes, made in well under a second: after a full flush the
    deflate stream of each further MiB of zeros is the same bytes, so they are repeated."""
    block = bytes(MiB)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size // MiB):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return header + first + again * (size // MiB - 1) + deflate.flush() + trailer


class _Hostile(JsonAnswers):
    """``/api/endless``: chunked zeros without end; ``/api/announced``: a Content-Length of
    10 GiB; ``/api/bomb``: gzip that inflates to ``BOMB``; ``/api/garbled``: a body
    that says gzip and is not; ``/api/small``: ``{}``. With
    ``server.everything`` set, every GET answers that way. Any other method is recorded."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        kind = self.server.everything or self.path.split("?")[0].removeprefix("/api/")
        if kind == "endless":
            self._endless()
        elif kind == "announced":
            self.answer(200, b"", {"Content-Length": str(10 * 1024 * MiB)})
            self._zeros(None)
        elif kind == "bomb":
            self.answer(200, self.server.bomb, {"Content-Encoding": "gzip"})
        elif kind == "garbled":
            self.answer(200, b"not gzip at all", {"Content-Encoding": "gzip"})
        else:
            self.answer(200, b"{}")

    def do_PUT(self) -> None:
        self.server.writes.append(f"{self.command} {self.path}")
        self.answer(204, b"")

    do_POST = do_DELETE = do_PUT

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {"Content-Length": str(len(body))}).items():
            self.send_header(name, value)
        if headers and "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # a client that stopped reading
            self.wfile.write(body)

    def _endless(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._zeros(b"%x\r\n" % (64 * 1024))

    def _zeros(self, chunk_head: bytes | None) -> None:
        piece = bytes(64 * 1024)
        frame = piece if chunk_head is None else chunk_head + piece + b"\r\n"
        try:
            while self.server.sent < ENDLESS:
                self.wfile.write(frame)
                with self.server.counting:
                    self.server.sent += len(piece)
        except OSError:  # the client stopped reading and closed
            pass
        self.close_connection = True


class _Server(QuietServer):
    daemon_threads = True
    everything: str | None = None
    sent = 0
    bomb = b""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hostile)
        self.writes: list[str] = []
        self.counting = threading.Lock()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb(BOMB)


@pytest.fixture
def server(bomb: bytes) -> Iterator[_Server]:
    with serving(_Server()) as server:
        server.bomb = bomb
        yield server


def test_an_answer_without_end_stops_at_the_limit_naming_request_limit_and_setting(
    server: _Server,
) -> None:
    with ManagementClient(url_of(server, SECRET), max_answer=LIMIT) as client:
        client.get("/small")
        with pytest.raises(AnswerTooLarge) as raised:
            client.get("/endless")
    text = str(raised.value)
    assert "GET /api/endless answered more than 1 MiB" in text
    assert MAX_BYTES_ENV in text and SECRET not in text
    # read no further than the limit: what the server got out is the limit plus what the
    # sockets' buffers hold, far from the 256 MiB it would send
    assert server.sent < 64 * MiB


def test_an_answer_that_announces_more_than_the_limit_is_not_read(server: _Server) -> None:
    with (
        ManagementClient(url_of(server, SECRET), max_answer=LIMIT) as client,
        pytest.raises(AnswerTooLarge, match="it announces 10,737,418,240 bytes"),
    ):
        client.get("/announced")
    assert server.sent < 64 * MiB


def test_a_gzip_bomb_stops_at_the_limit_counted_decoded(server: _Server) -> None:
    tracemalloc.start()
    try:
        with (
            ManagementClient(url_of(server, SECRET), max_answer=LIMIT) as client,
            pytest.raises(AnswerTooLarge, match="GET /api/bomb answered more than 1 MiB"),
        ):
            client.get("/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the limit and one step of inflating (1 MiB), with what reading needs; never 256 MiB
    assert peak < 16 * MiB, f"{peak / MiB:.0f} MiB held"


def test_an_answer_that_cannot_be_decoded_says_so_not_that_the_api_is_unreachable(
    server: _Server,
) -> None:
    with (
        ManagementClient(url_of(server, SECRET)) as client,
        pytest.raises(BrokerError) as raised,
    ):
        client.get("/garbled")
    message = str(raised.value)
    assert "GET /api/garbled" in message
    assert "not valid gzip" in message
    assert "cannot reach" not in message
    assert SECRET not in message


def test_answers_within_the_limit_are_read_whole_and_decoded(server: _Server) -> None:
    # a compressed answer exactly as large as the limit set (the 256 MiB bomb at the default
    # limit took a second of CPU to decode and showed no more)
    server.bomb = gzip_bomb(WITHIN)
    with ManagementClient(url_of(server, SECRET), max_answer=WITHIN) as client:
        response = client.request("GET", "/bomb")
    assert len(response.content) == WITHIN
    assert "content-encoding" not in response.headers


def test_reads_made_ahead_stop_at_the_limit_too(server: _Server) -> None:
    with ManagementClient(url_of(server, SECRET), max_answer=LIMIT) as client:
        client.read_ahead([], paths=["/endless"])
        with pytest.raises(AnswerTooLarge, match="GET /api/endless"):
            client.get("/endless")
    server.everything = "bomb"  # a vhost's listings, read ahead in their own threads
    with ManagementClient(url_of(server, SECRET), max_answer=LIMIT) as client:
        client.read_ahead(["shop"])
        with pytest.raises(AnswerTooLarge, match=r"GET /api/\S+ answered more than 1 MiB"):
            client.vhost_objects("shop")


def test_a_clone_keeps_the_limit(server: _Server) -> None:
    with (
        ManagementClient(url_of(server, SECRET), max_answer=LIMIT) as client,
        client.clone() as clone,
        pytest.raises(AnswerTooLarge),
    ):
        clone.get("/bomb")


@pytest.mark.parametrize("kind", ["endless", "bomb"])
def test_plan_against_a_hostile_api_exits_1_with_the_limit_and_changes_nothing(
    server: _Server, kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("RABBITRY_URL", "RABBITMQ_URL", "RABBITRY_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    server.everything = kind
    result = CliRunner().invoke(
        cli,
        ["plan", SPEC],
        env={"RABBITRY_MANAGEMENT_URL": url_of(server, SECRET), MAX_BYTES_ENV: str(LIMIT)},
        catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: GET /api/") and "answered more than 1 MiB" in last
    assert MAX_BYTES_ENV in last
    assert SECRET not in result.output + result.stderr
    assert server.writes == []


def test_the_limit_comes_from_the_environment_in_whole_bytes() -> None:
    assert max_answer_bytes({}) == DEFAULT_MAX_BYTES == 256 * MiB
    assert max_answer_bytes({MAX_BYTES_ENV: " "}) == DEFAULT_MAX_BYTES
    assert max_answer_bytes({MAX_BYTES_ENV: "1_073_741_824"}) == 1024 * MiB
    for bad in ("1e9", "0", "-5", "lots"):
        with pytest.raises(BrokerError, match=f"{MAX_BYTES_ENV}='{bad}' is not a number"):
            max_answer_bytes({MAX_BYTES_ENV: bad})


def test_a_client_made_with_a_bad_setting_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_BYTES_ENV, "big")
    with pytest.raises(BrokerError, match=MAX_BYTES_ENV):
        ManagementClient("http://guest:guest@127.0.0.1:1")
