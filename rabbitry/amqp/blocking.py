"""The blocking transport: a non-blocking socket, buffered writes, reads fed into a session.

``SocketWire.exchange`` is one round of I/O for ``Publisher`` and ``Worker`` alike: write what
the session produced, wait up to a timeout for the broker, feed every byte that arrived into the
session. A broken connection raises ``Disconnected`` (the caller reconnects through
``Reconnect``); what retrying cannot fix raises at once (``TLSHandshakeError``, a refused login
as ``BrokerError``).
"""

from __future__ import annotations

import contextlib
import select
import socket
import time

from rabbitry.amqp.inprocess import PeerSocket, peer_for
from rabbitry.amqp.reconnect import refusal_error
from rabbitry.amqp.session import ConnectionRefused, Session, State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError, FrameError
from rabbitry.uri import mask_text

READ_SIZE = 262144


# Internal: every client connects again on it or raises ConnectionLost or a BrokerError of
# rabbitry.errors; it never reaches a user (tests/unit/test_error_tree.py knows it).
class Disconnected(Exception):
    """The connection is gone (or never finished its handshake): connect again."""


class SocketWire:
    """One socket to the broker. Not thread-safe: one caller drives it."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        peer = peer_for(settings.host)
        self.sock: socket.socket | PeerSocket = (
            open_socket(settings) if peer is None else PeerSocket(peer)
        )
        self.wbuf = bytearray()
        self.tls = settings.tls is not None
        """A TLS socket: it may hold decrypted bytes select() cannot see (``pending``)."""
        self.would_block: tuple[type[OSError], ...] = (BlockingIOError,)
        if self.tls:  # ssl is loaded only for amqps: a plain worker never maps OpenSSL
            import ssl

            self.would_block += (ssl.SSLWantReadError, ssl.SSLWantWriteError)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.wbuf.clear()

    def close_session(self, session: Session, within: float = 1.0) -> None:
        """Close ``session`` (``connection.close``), wait up to ``within`` seconds for the
        broker's close-ok, then close the socket. A connection that breaks meanwhile is closed
        all the same: nothing is raised."""
        with contextlib.suppress(OSError, Disconnected, BrokerError):
            session.close()
            end = time.monotonic() + within
            while session.state is not State.CLOSED and time.monotonic() < end:
                self.exchange(session, 0.1)
        self.close()

    def handshake(self, session: Session) -> None:
        """Drive the session until it is ready, within the connect timeout."""
        s = self.settings
        session.last_received = time.monotonic()
        end = time.monotonic() + s.connect_timeout
        while not session.ready:
            if session.state is State.CLOSED:  # closed by the client (a worker's start-up check)
                raise Disconnected(f"the connection to {s.display} was closed during its handshake")
            left = end - time.monotonic()
            if left <= 0:
                raise Disconnected(f"no AMQP handshake with {s.display} in {s.connect_timeout} s")
            self.exchange(session, min(0.5, left))

    def send_all(self, session: Session, data: bytes | bytearray) -> None:
        """Write ``data`` (and what the session has to say) before returning."""
        self.wbuf += data
        while self.wbuf or session.out:
            self.exchange(session, 0.5, want_read=False)

    def exchange(self, session: Session, timeout: float, *, want_read: bool = True) -> bool:
        """One round of I/O; True when bytes arrived (and went into ``session``)."""
        sock = self.sock
        if session.out:
            self.wbuf += session.out
            session.out.clear()
        try:
            if self.wbuf:
                try:
                    sent = sock.send(self.wbuf)
                    del self.wbuf[:sent]
                    session.last_sent = time.monotonic()
                except self.would_block:
                    pass
            if not (self.tls and sock.pending() > 0):  # type: ignore[union-attr]
                readable, _, _ = select.select(
                    [sock] if want_read else [],
                    [sock] if self.wbuf else [],
                    [],
                    timeout if (want_read or self.wbuf) else 0,
                )
                if not readable:
                    return False
            got = False
            while True:
                try:
                    data = sock.recv(READ_SIZE)
                except self.would_block:
                    break
                if not data:
                    raise Disconnected("the broker closed the connection")
                got = True
                session.receive(data, time.monotonic())
                if len(data) < READ_SIZE and not (
                    self.tls and sock.pending()  # type: ignore[union-attr]
                ):
                    break
            return got
        except FrameError as exc:  # nothing after a broken frame can be read: the caller closes
            raise FrameError.at(str(self.settings.addresses[0]), exc) from None
        except ConnectionRefused as exc:
            # say goodbye properly (close-ok) before the socket goes
            with contextlib.suppress(OSError):
                sock.send(bytes(session.out))
            if exc.permanent:
                raise refusal_error(self.settings, exc) from None
            raise Disconnected(f"the broker closed the connection: {exc}") from None
        except OSError as exc:
            # a client certificate refused shows as an alert on the first read after the
            # handshake (TLS 1.3 checks it after the client finished)
            refusal = self.settings.tls_failure(exc)
            if refusal is not None:
                raise refusal from None
            raise Disconnected(mask_text(str(exc)) or type(exc).__name__) from None


def open_socket(settings: ConnectionSettings) -> socket.socket:
    """A connected, non-blocking socket (TLS done when the settings ask for it)."""
    s = settings
    sock = socket.create_connection((s.host, s.port), timeout=s.connect_timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if s.tls is not None:
            sock = s.tls.wrap_socket(sock, server_hostname=s.tls_server_name)
        sock.setblocking(False)
    except Exception as exc:
        sock.close()
        refusal = s.tls_failure(exc)
        if refusal is not None:
            raise refusal from None
        raise
    return sock
