"""The small HTTP servers unit tests stand up on 127.0.0.1 in place of a management API."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

S = TypeVar("S", bound=ThreadingHTTPServer)


class QuietServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` whose handler threads say nothing when the client hangs up.

    Clients under test drop connections on purpose (a capped read, a time-out, a pool closed),
    and socketserver prints each such reset with its traceback to ``sys.stderr`` from the
    handler's thread, possibly after its test ended: into whatever a later test captures (a
    ``CliRunner`` swaps ``sys.stderr`` for the whole process), failing its "no traceback"
    check. Any other error is still printed."""

    daemon_threads = True

    def url(self, password: str = "guest") -> str:
        """The URL of this server, with user guest and ``password``."""
        return f"http://guest:{password}@127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class JsonAnswers(BaseHTTPRequestHandler):
    """A handler that answers JSON (``answer``) and logs nothing."""

    def answer(self, code: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> None:
        """``body`` as JSON with ``code``; ``headers`` add to (or replace) Content-Length."""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        given = headers or {}
        if "Content-Length" not in given and "Transfer-Encoding" not in given:
            self.send_header("Content-Length", str(len(body)))
        for name, value in given.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering from a thread of its own until the block ends, then closed."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
