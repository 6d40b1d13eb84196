"""``Worker``: the blocking twin of ``AsyncWorker``, over the same core.

One socket, a ``select`` loop, handlers run one at a time in the calling thread (coroutine
handlers run on a private event loop). It is the worker for code that is not asyncio;
throughput comes from the same place as the async one: deliveries parsed by offset and one
multiple ack per read batch instead of pika's per-message callbacks and ack frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import signal
import socket
import ssl
import time
from collections.abc import Coroutine
from types import FrameType
from typing import Any

from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.session import ConnectionRefused, State
from rabbitry.amqp.settings import Backoff, ConnectionSettings
from rabbitry.consumer.app import App
from rabbitry.consumer.decision import CANCEL_HEADER
from rabbitry.consumer.engine import WorkerCore, WorkerOptions, logger, worker_settings
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.session import ConsumerSession
from rabbitry.errors import BrokerError
from rabbitry.publisher import Publisher
from rabbitry.uri import mask_text

_READ_SIZE = 262144
_TICK = 0.1


class _Lost(Exception):
    """The socket broke or the broker closed the connection."""


def cancel_job(publisher: Publisher, queue: str, job_id: str, *, exchange: str = "") -> Delivery:
    """Withdraw the delayed job ``job_id`` (a message id): a confirmed control message to
    ``queue``; the worker that receives it drops ``job_id`` when it arrives. With several
    workers, give the app a shared ``CancelStore``."""
    return publisher.publish(
        b"", exchange=exchange, routing_key=queue, headers={CANCEL_HEADER: job_id}
    )


class Worker:
    """Runs the handlers of an ``App`` until stopped: ``Worker(app, url).run()``."""

    def __init__(
        self,
        app: App,
        url: str | ConnectionSettings | None = None,
        *,
        prefetch: int = 300,
        ack_every: int = 0,
        shutdown_timeout: float = 30.0,
        heartbeat: int | None = None,
        connection_name: str | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        settings = worker_settings(app, url, heartbeat, connection_name, backoff)
        self.options = WorkerOptions(
            prefetch=prefetch, concurrency=1, ack_every=ack_every, shutdown_timeout=shutdown_timeout
        )
        self.core = WorkerCore(app, settings, self.options)
        self.app = app
        self._sock: socket.socket | None = None
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def metrics(self) -> WorkerMetrics:
        return self.core.metrics

    def stop(self) -> None:
        """Begin a graceful shutdown (safe from a signal handler or another thread)."""
        self._stopping = True

    def run(self, *, handle_signals: bool = False, max_idle: float | None = None) -> None:
        """Consume until ``stop()`` (or, with ``max_idle``, until no message came for that
        many seconds); reconnects with back-off whenever the connection drops."""
        previous: dict[signal.Signals, Any] = {}
        if handle_signals:

            def on_signal(signum: int, frame: FrameType | None) -> None:
                self.stop()

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            self._run(max_idle)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._loop is not None:
                self._loop.close()

    # -- the loop ---------------------------------------------------------------------------------

    def _run(self, max_idle: float | None) -> None:
        core = self.core
        attempt = 0
        while not self._stopping:
            try:
                session = self._connect()
                attempt = 0
                self._serve(session, max_idle)
                if max_idle is not None and not self._stopping:
                    self._stopping = True
            except (OSError, _Lost, TimeoutError) as exc:
                self._drop()
                core.connection_lost()
                refusal = core.settings.tls_failure(exc)
                if refusal is not None:  # a certificate does not heal by retrying
                    raise refusal from None
                if self._stopping:
                    break
                core.metrics.reconnects += 1
                pause = core.settings.backoff.delay(attempt)
                attempt += 1
                logger.warning(
                    "connection to %s lost (%s); reconnecting in %.1f s",
                    core.settings.display,
                    mask_text(str(exc)),
                    pause,
                )
                time.sleep(pause)
        self._shutdown()

    def _connect(self) -> ConsumerSession:
        s = self.core.settings
        sock = socket.create_connection((s.host, s.port), timeout=s.connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if s.tls is not None:
            sock = s.tls.wrap_socket(sock, server_hostname=s.server_hostname or s.host)
        sock.settimeout(None)
        self._sock = sock
        session = self.core.new_session()
        session.last_received = time.monotonic()
        deadline = time.monotonic() + s.connect_timeout
        while not session.ready:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no AMQP handshake with {s.display}")
            self._io(0.1)
        return session

    def _serve(self, session: ConsumerSession, max_idle: float | None) -> None:
        core = self.core
        last_message = time.monotonic()
        while not self._stopping:
            got = self._io(_TICK)
            now = time.monotonic()
            if got:
                last_message = now
            elif max_idle is not None and now - last_message > max_idle and not core.publishing:
                return
            if not session.tick(now):
                raise _Lost("no heartbeat from the broker")
            self._send(core.take_output(flush=not got))

    def _io(self, timeout: float) -> int:
        """Read what arrived (waiting up to ``timeout``), run its handlers; messages handled."""
        core = self.core
        sock, session = self._sock, core.session
        assert sock is not None and session is not None
        if session.out:
            self._send(session.take_output())
        pending = isinstance(sock, ssl.SSLSocket) and sock.pending()
        if not pending:
            readable, _, _ = select.select([sock], [], [], timeout)
            if not readable:
                return 0
        try:
            data = sock.recv(_READ_SIZE)
        except (BlockingIOError, ssl.SSLWantReadError):
            return 0
        if not data:
            raise _Lost("the broker closed the connection")
        try:
            session.receive(data, time.monotonic())
        except ConnectionRefused as exc:
            with contextlib.suppress(OSError):
                self._send(session.take_output())
            if exc.permanent:
                raise BrokerError(
                    f"{core.settings.display} refused the connection: {exc}"
                ) from None
            raise _Lost(str(exc)) from None
        core.sync_generation()
        if session.cancelled_by_broker:
            logger.error(
                "the broker cancelled the consumer of %s", ", ".join(session.cancelled_by_broker)
            )
            session.cancelled_by_broker.clear()
        inbox = session.inbox
        if not inbox:
            return 0
        session.inbox = []
        for message in inbox:
            if self._stopping:
                core.acks.received(message.tag)
                core.requeue(message)
            elif core.admit(message):
                self._handle(message)
        self._send(core.take_output())
        return len(inbox)

    def _handle(self, message: IncomingMessage) -> None:
        route = self.core.routes[message.consumer]
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            result = route.handler(message)
            if route.is_async:
                assert isinstance(result, Coroutine)
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                coro: Coroutine[Any, Any, Any] = result
                if route.timeout is not None:
                    coro = asyncio.wait_for(result, route.timeout)
                self._loop.run_until_complete(coro)
        except TimeoutError as exc:
            error = exc
            if route.is_async:
                from rabbitry.consumer.decision import HandlerTimeout

                error = HandlerTimeout(
                    f"handler of {route.queue} ran longer than its time-to-run"
                    f" of {route.timeout:g} s"
                )
        except Exception as exc:
            error = exc
        self.core.conclude(message, error, time.perf_counter() - started)

    def _send(self, data: bytes) -> None:
        if not data:
            return
        sock = self._sock
        if sock is None:
            return
        sock.sendall(data)
        session = self.core.session
        if session is not None:
            session.last_sent = time.monotonic()

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _shutdown(self) -> None:
        core = self.core
        session = core.session
        if session is None or self._sock is None:
            self._drop()
            return
        deadline = time.monotonic() + self.options.shutdown_timeout
        with contextlib.suppress(OSError, _Lost, BrokerError):
            session.cancel_consumers()
            self._send(core.take_output())
            while core.publishing and time.monotonic() < deadline:
                self._io(0.05)
                self._send(core.take_output(flush=True))
            self._send(core.take_output(flush=True))
            session.close()
            self._send(session.take_output())
            end = time.monotonic() + 2.0
            while session.state is not State.CLOSED and time.monotonic() < end:
                self._io(0.1)
        self._drop()
        logger.info(
            "stopped: %d received, %d acked, %d requeued",
            core.metrics.total("received"),
            core.metrics.total("acked"),
            core.metrics.total("requeued"),
        )
