"""``Publisher``: confirmed publishing from plain (blocking) Python code.

The connection is a socket driven by ``Session`` (the I/O-free protocol core) rather than
pika's ``BlockingConnection``: pika waits for each confirm inside ``basic_publish`` and encodes
every frame through its general-purpose codec, which caps a confirmed publisher at about 1,500
msg/s here; a window of pipelined messages written in batches is what makes confirms cheap,
and pika's blocking API cannot express it. pika stays the client of rabbitry's consumers.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.amqp.message import Body, Message
from rabbitry.amqp.session import ConnectionRefused, Session, State
from rabbitry.errors import BrokerError, ConfirmTimeout, PublishError
from rabbitry.publisher.base import PublisherBase, logger
from rabbitry.publisher.errors import ConnectionLost, PublisherClosed
from rabbitry.uri import mask_text

_READ_SIZE = 262144
_OUT_HIGH_WATER = 1 << 20


class _Disconnected(Exception):
    """The socket broke or the broker closed the connection."""


class Publisher(PublisherBase):
    """Publishes with confirms over one connection; ``with Publisher(url) as p: p.publish(...)``.

    ``publish`` returns once the broker confirmed the message and raises ``Nacked``,
    ``Unroutable``, ``ConfirmTimeout`` or another ``PublishError`` otherwise.
    ``publish_many``/``stream`` keep up to ``window`` messages unconfirmed and report each
    message's outcome. A lost connection is re-established with back-off and the unconfirmed
    messages are sent again (``stats.republished`` counts them: consumers may see duplicates).
    """

    _sock: socket.socket | None = None
    _session: Session | None = None

    def __init__(self, url: Any = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._sock = None
        self._session = None
        self._wbuf = bytearray()
        self._broken: PublishError | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Publisher:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Open the connection now (otherwise the first publish does)."""
        if self.closed:
            raise PublisherClosed("the publisher is closed")
        if self._session is None or not self._session.ready:
            self._open(first=True)

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` for messages in flight, then close the connection."""
        if self.closed:
            return
        try:
            if self._session is not None and self.tracker.unsettled:
                with contextlib.suppress(PublishError):
                    self.flush(timeout)
        finally:
            self.closed = True
            self.tracker.fail_where(
                lambda d: True,
                lambda d: PublisherClosed(f"message {d.message_id}: publisher closed unconfirmed"),
            )
            session, sock = self._session, self._sock
            if session is not None and sock is not None:
                with contextlib.suppress(OSError, _Disconnected, ConnectionRefused):
                    session.close()
                    end = time.monotonic() + 1.0
                    self._wbuf += session.take_output()
                    while session.state is not State.CLOSED and time.monotonic() < end:
                        self._io(0.1)
            self._drop_socket()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message in flight is settled (raises ConfirmTimeout if not)."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.tracker.unsettled or self._wbuf:
            if end is not None and time.monotonic() >= end:
                raise ConfirmTimeout(
                    f"{self.tracker.unsettled} message(s) still unconfirmed after {timeout} s"
                )
            self._step(0.5 if end is None else max(0.0, min(0.5, end - time.monotonic())))

    # -- publishing ---------------------------------------------------------------------------

    def publish(
        self,
        body: Body,
        *,
        exchange: str | None = None,
        routing_key: str = "",
        headers: Mapping[str, Any] | None = None,
        mandatory: bool | None = None,
        delay: float | timedelta | None = None,
        shard_key: str | None = None,
        message_id: str | None = None,
        check_route: bool = False,
        timeout: float | None = None,
        **properties: Any,
    ) -> Delivery:
        """Publish one message and wait for its confirm; the settled ``Delivery``."""
        delivery = self.prepare(
            body,
            exchange=exchange,
            routing_key=routing_key,
            headers=headers,
            mandatory=mandatory,
            delay=delay,
            shard_key=shard_key,
            message_id=message_id,
            check_route=check_route,
            timeout=timeout,
            **properties,
        )
        self._send(delivery)
        if not self.confirms:
            self._drain_output()
            return delivery
        while delivery.status is Status.PENDING:
            self._step(0.5)
        return delivery.result()

    def publish_many(
        self,
        messages: Iterable[Message | Body],
        *,
        exchange: str | None = None,
        routing_key: str = "",
        mandatory: bool | None = None,
        headers: Mapping[str, Any] | None = None,
        window: int | None = None,
    ) -> list[Delivery]:
        """Publish all, ``window`` unconfirmed at most; one settled ``Delivery`` per message,
        in order. Failures are reported per message (``delivery.ok`` / ``.error``), not raised;
        only a connection that stays lost past the back-off raises ``ConnectionLost``, whose
        ``deliveries`` lists every message sent so far with its outcome."""
        done: list[Delivery] = []
        try:
            done.extend(
                self.stream(
                    messages,
                    exchange=exchange,
                    routing_key=routing_key,
                    mandatory=mandatory,
                    headers=headers,
                    window=window,
                )
            )
        except ConnectionLost as exc:
            exc.deliveries = done + self.tracker.pending()
            raise
        return done

    def stream(
        self,
        messages: Iterable[Message | Body],
        *,
        exchange: str | None = None,
        routing_key: str = "",
        mandatory: bool | None = None,
        headers: Mapping[str, Any] | None = None,
        window: int | None = None,
    ) -> Iterator[Delivery]:
        """Like ``publish_many`` but lazy: yields each ``Delivery`` (in input order) once it is
        settled, reading ``messages`` only as the window allows: memory stays bounded."""
        limit = window or self.window
        tracker = self.tracker
        issued: deque[Delivery] = deque()
        source = iter(messages)
        exhausted = False
        prepare = self.prepare_item
        timeout = self.confirm_timeout
        while True:
            session = self._ready_session()
            if not exhausted:
                deadline = None if timeout is None else time.monotonic() + timeout
                out = session.out
                while (
                    tracker.unsettled < limit
                    and session.ready
                    and not session.blocked
                    and len(out) < _OUT_HIGH_WATER
                ):
                    item = next(source, _END)
                    if item is _END:
                        exhausted = True
                        break
                    delivery = prepare(
                        item,
                        exchange=exchange,
                        routing_key=routing_key,
                        mandatory=mandatory,
                        headers=headers,
                        deadline=deadline,
                    )
                    if self._broken is not None:
                        tracker.fail(delivery, self._broken)
                    else:
                        session.publish(delivery)
                    issued.append(delivery)
            while issued and issued[0].status is not Status.PENDING:
                yield issued.popleft()
            if exhausted and not issued:
                self._drain_output()
                return
            if not self.confirms:
                self._drain_output()
                continue
            self._step(0.5)

    # -- I/O ----------------------------------------------------------------------------------

    def _send(self, delivery: Delivery) -> None:
        session = self._ready_session()
        while session.blocked or (self.confirms and self.tracker.unsettled >= self.window):
            self._step(0.5)
            session = self._ready_session()
        session.publish(delivery)

    def _ready_session(self) -> Session:
        if self.closed:
            raise PublisherClosed("the publisher is closed")
        session = self._session
        if session is None:
            self._open(first=True)
            session = self._session
        assert session is not None
        while not session.ready:
            self._step(0.5)
            session = self._session
            assert session is not None
        return session

    def _drain_output(self) -> None:
        while self._wbuf or (self._session is not None and self._session.out):
            self._step(0.0 if not self._wbuf else 0.5, want_read=False)

    def _step(self, timeout: float, *, want_read: bool = True) -> None:
        """One round of socket I/O; reconnects (and republishes) when the connection broke."""
        try:
            self._io(timeout, want_read=want_read)
        except _Disconnected as exc:
            logger.warning("connection to %s lost: %s", self.settings.display, exc)
            self._open(first=False)
        session = self._session
        if session is not None:
            now = time.monotonic()
            if self.tracker.unsettled:
                self.tracker.expire(now)
            if not session.tick(now):
                logger.warning("no heartbeat from %s: reconnecting", self.settings.display)
                self._drop_socket()
                self._open(first=False)

    def _io(self, timeout: float, *, want_read: bool = True) -> None:
        sock, session = self._sock, self._session
        if sock is None or session is None:
            raise _Disconnected("not connected")
        if session.out:
            self._wbuf += session.out
            session.out.clear()
            session.last_sent = time.monotonic()
        try:
            if self._wbuf:
                try:
                    sent = sock.send(self._wbuf)
                    del self._wbuf[:sent]
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
            pending_tls = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
            if not pending_tls:
                readable, _, _ = select.select(
                    [sock] if want_read else [],
                    [sock] if self._wbuf else [],
                    [],
                    timeout if (want_read or self._wbuf) else 0,
                )
                if not readable:
                    return
            while True:
                try:
                    data = sock.recv(_READ_SIZE)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    break
                if not data:
                    raise _Disconnected("the broker closed the socket")
                session.receive(data, time.monotonic())
                if len(data) < _READ_SIZE and not (
                    isinstance(sock, ssl.SSLSocket) and sock.pending()
                ):
                    break
        except ConnectionRefused as exc:
            if exc.permanent:
                raise BrokerError(
                    f"{self.settings.display} refused the connection: {exc}"
                ) from None
            raise _Disconnected(f"the broker closed the connection: {exc}") from None
        except OSError as exc:
            # a client certificate refused shows as an alert on the first read after the
            # handshake (TLS 1.3 checks it after the client finished)
            refusal = self.settings.tls_failure(exc)
            if refusal is not None:
                raise refusal from None
            raise _Disconnected(mask_text(str(exc)) or type(exc).__name__) from None

    def _drop_socket(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._wbuf.clear()

    def _open(self, *, first: bool) -> None:
        """Connect (again), with back-off; unconfirmed messages are republished once ready."""
        self._drop_socket()
        backoff = self.settings.backoff
        started = time.monotonic()
        attempt = 0
        resend = self.tracker.take_unsettled() if self.confirms else []
        if not first:
            self.reconnects += 1
        while True:
            try:
                self._connect_once(resend)
                self._broken = None
                if resend:
                    self._announce_republish(resend)
                return
            except BrokerError:
                self._fail_all(resend, ConnectionLost)
                raise
            except (OSError, _Disconnected, ConnectionRefused) as exc:
                elapsed = time.monotonic() - started
                give_up = backoff.give_up_after
                if first and attempt == 0 and not resend and give_up is not None and give_up <= 0:
                    give_up = 0
                if give_up is not None and elapsed >= give_up:
                    message = (
                        f"could not connect to {self.settings.display} for {elapsed:.0f} s: "
                        f"{mask_text(str(exc))}"
                    )
                    self._fail_all(resend, ConnectionLost, message)
                    self._broken = ConnectionLost(message)
                    raise ConnectionLost(message) from None
                pause = backoff.delay(attempt)
                attempt += 1
                logger.info(
                    "connecting to %s failed (%s); retrying in %.1f s",
                    self.settings.display,
                    mask_text(str(exc)),
                    pause,
                )
                time.sleep(pause)

    def _fail_all(
        self, deliveries: list[Delivery], kind: type[PublishError], message: str = ""
    ) -> None:
        for d in deliveries:
            self.tracker.fail_detached(d, kind(f"message {d.message_id}: {message or 'not sent'}"))

    def _connect_once(self, resend: list[Delivery]) -> None:
        s = self.settings
        sock = socket.create_connection((s.host, s.port), timeout=s.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if s.tls is not None:
                sock = s.tls.wrap_socket(sock, server_hostname=s.server_hostname or s.host)
            sock.setblocking(False)
        except Exception as exc:
            sock.close()
            refusal = s.tls_failure(exc)
            if refusal is not None:
                raise refusal from None
            raise
        self._sock = sock
        self._session = Session(
            s, self.tracker, self.builder, confirms=self.confirms, resend=resend
        )
        self._session.last_received = time.monotonic()
        end = time.monotonic() + s.connect_timeout
        while not self._session.ready:
            if time.monotonic() >= end:
                self._drop_socket()
                raise _Disconnected(f"no handshake with {s.display} in {s.connect_timeout} s")
            self._io(min(0.5, max(0.0, end - time.monotonic())))


_END: Any = object()
