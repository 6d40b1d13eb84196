"""The small HTTP servers unit tests stand up on 127.0.0.1 in place of a management API."""

from __future__ import annotations

import contextlib
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

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def url_of(server: ThreadingHTTPServer, password: str = "guest") -> str:
    """The management URL of the stand-in ``server``, user ``guest`` with ``password``."""
    return f"http://guest:{password}@127.0.0.1:{server.server_address[1]}"


SHUTDOWN_POLL = 0.02
"""Seconds between two looks of ``serve_forever`` at its stop flag: ``shutdown()`` waits for
the next look, and socketserver's default of 0.5 s made every test with a server wait up to
half a second at its end."""


class JsonAnswers(BaseHTTPRequestHandler):
    """A handler that answers as the management API does (JSON with its length) and logs
    nothing: subclasses say what each request gets with ``answer``."""

    def answer(self, code: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> None:
        """``code`` with ``body``; ``headers`` are sent too, and a Content-Length of their
        own replaces the body's."""
        sent = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        self.send_response(code)
        for name, value in {**sent, **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(OSError):  # a client that stopped reading
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering from a thread of its own until the block ends, then closed."""
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
