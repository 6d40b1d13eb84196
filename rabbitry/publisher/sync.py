"""``Publisher``: confirmed publishing from plain (blocking) Python code.

The connection is a socket driven by ``Session`` (the I/O-free protocol core) rather than
pika's ``BlockingConnection``: pika waits for each confirm inside ``basic_publish`` and encodes
every frame through its general-purpose codec, which caps a confirmed publisher at about 1,500
msg/s here; a window of pipelined messages written in batches is what makes confirms cheap,
and pika's blocking API cannot express it. pika stays the client of rabbitry's consumers.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Unpack

from rabbitry.amqp.blocking import Disconnected, SocketWire
from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.amqp.connector import connect
from rabbitry.amqp.message import Body, Message
from rabbitry.amqp.session import Session
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import ConfirmTimeout, ConnectionLost, FrameError, PublishError
from rabbitry.publisher import resend
from rabbitry.publisher.base import (
    Batch,
    BatchOptions,
    PublisherBase,
    PublishOptions,
)
from rabbitry.publisher.requests import DEFAULT_REQUEST_TIMEOUT, Reply, RequestOptions

_OUT_HIGH_WATER = 1 << 20


class Publisher(PublisherBase):
    """Publishes with confirms over one connection; ``with Publisher(url) as p: p.publish(...)``.

    ``publish`` returns once the broker confirmed the message and raises ``Nacked``,
    ``Unroutable``, ``ConfirmTimeout`` or another ``PublishError`` otherwise.
    ``publish_many``/``stream`` keep up to ``window`` messages unconfirmed and report each
    message's outcome. A lost connection is re-established with back-off and the unconfirmed
    messages are sent again (``stats.republished`` counts them: consumers may see duplicates).
    """

    _wire: SocketWire | None = None
    _session: Session | None = None

    def __init__(self, url: Any = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._wire = None
        self._session = None
        self._broken: PublishError | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Publisher:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Open the connection now (otherwise the first publish does)."""
        self._refuse_if_closed()
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
            self._fail_in_flight()
            session, wire = self._session, self._wire
            if session is not None and wire is not None:
                wire.close_session(session)
            self._drop_socket()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message in flight is settled (raises ConfirmTimeout if not)."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.tracker.unsettled or self._unsent:
            if end is not None and time.monotonic() >= end:
                raise ConfirmTimeout(
                    f"{self.tracker.unsettled} message(s) still unconfirmed after {timeout} s"
                )
            self._step(0.5 if end is None else max(0.0, min(0.5, end - time.monotonic())))

    # -- publishing ---------------------------------------------------------------------------

    def publish(self, body: Body, **options: Unpack[PublishOptions]) -> Delivery:
        """Publish one message and wait for its confirm; the settled ``Delivery``."""
        delivery = self.prepare(body, **options)
        self._send(delivery)
        if not self.confirms:
            self._drain_output()
            return delivery
        while delivery.status is Status.PENDING:
            self._step(0.5)
        return delivery.result()

    def request(
        self,
        body: Body,
        *,
        routing_key: str = "",
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        **options: Unpack[RequestOptions],
    ) -> Reply:
        """Publish a request (confirmed, mandatory) and wait up to ``timeout`` seconds for the
        reply a handler sends back over direct reply-to; the ``Reply``.

        Raises ``Unroutable`` at its confirm when no queue takes the request, and
        ``RequestTimeout`` when no reply came in time (a later reply is dropped)."""
        delivery, waiting = self._start_request(body, routing_key, timeout, options)
        try:
            self._want_replies(self._ready_session())  # the consumer first, then the request
            self._send(delivery)
            end = time.monotonic() + timeout
            while waiting.reply is None and waiting.error is None:
                if delivery.error is not None:
                    raise delivery.error
                left = end - time.monotonic()
                if left <= 0:
                    raise waiting.timed_out(routing_key, timeout)
                self._step(min(0.5, left))
        finally:
            self.replies.forget(waiting.correlation_id)
        return waiting.outcome()

    def publish_many(
        self, messages: Iterable[Message | Body], **options: Unpack[BatchOptions]
    ) -> list[Delivery]:
        """Publish all, ``window`` unconfirmed at most; one settled ``Delivery`` per message,
        in order. Failures are reported per message (``delivery.ok`` / ``.error``), not raised;
        only a connection that stays lost past the back-off raises ``ConnectionLost``, whose
        ``deliveries`` lists every message sent so far with its outcome."""
        done: list[Delivery] = []
        try:
            done.extend(self.stream(messages, **options))
        except ConnectionLost as exc:
            exc.deliveries = done + self.tracker.pending()
            raise
        return done

    def stream(
        self, messages: Iterable[Message | Body], **options: Unpack[BatchOptions]
    ) -> Iterator[Delivery]:
        """Like ``publish_many`` but lazy: yields each ``Delivery`` (in input order) once it is
        settled, reading ``messages`` only as the window allows: memory stays bounded."""
        batch = self.batch(options)
        count = [0]  # messages sent, for the batch's span
        try:
            yield from self._stream(messages, batch, count)
        finally:
            self.end_batch(batch, count[0])

    def _stream(
        self, messages: Iterable[Message | Body], batch: Batch, count: list[int]
    ) -> Iterator[Delivery]:
        tracker = self.tracker
        issued: deque[Delivery] = deque()
        source = iter(messages)
        exhausted = False
        prepare = self.prepare_item
        timeout = self.confirm_timeout
        adaptive = self.adaptive if batch.window is None else None
        delayed = False  # the last message read had a delay: its limit holds for the next read
        held: Message | Body | None = None  # a delayed message read while its limit was full
        while True:
            session = self._ready_session()
            limit = (batch.window or self.window) if adaptive is None else adaptive.limit(delayed)
            if not exhausted:
                deadline = None if timeout is None else time.monotonic() + timeout
                out = session.out
                while (
                    tracker.unsettled < limit
                    and session.ready
                    and not session.blocked
                    and len(out) < _OUT_HIGH_WATER
                ):
                    if held is not None:
                        item, held = held, None
                    else:
                        item = next(source, _END)
                        if item is _END:
                            exhausted = True
                            break
                    if adaptive is not None:
                        now_delayed = isinstance(item, Message) and item.delay is not None
                        if now_delayed is not delayed:
                            delayed, limit = now_delayed, adaptive.limit(now_delayed)
                            if tracker.unsettled >= limit:
                                held = item
                                break
                    delivery = prepare(item, batch, deadline)
                    if self._broken is not None:
                        tracker.fail(delivery, self._broken)
                    else:
                        session.publish(delivery)
                    issued.append(delivery)
                    count[0] += 1
                if adaptive is not None and tracker.unsettled >= adaptive.window:
                    adaptive.filled()
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
            if self.adaptive is not None:
                self.adaptive.filled()
            self._step(0.5)
            session = self._ready_session()
        session.publish(delivery)

    def _ready_session(self) -> Session:
        self._refuse_if_closed()
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
        while self._unsent or (self._session is not None and self._session.out):
            self._step(0.0 if not self._unsent else 0.5, want_read=False)

    @property
    def _unsent(self) -> bool:
        return self._wire is not None and bool(self._wire.wbuf)

    def _step(self, timeout: float, *, want_read: bool = True) -> None:
        """One round of socket I/O; reconnects (and republishes) when the connection broke."""
        wire, session = self._wire, self._session
        try:
            if wire is None or session is None:
                raise Disconnected("not connected")
            wire.exchange(session, timeout, want_read=want_read)
        except (Disconnected, FrameError) as exc:  # a broken frame ends the connection too
            resend.note_lost(self, exc)
            self._open(first=False)
        if self.adaptive is not None:
            self.adaptive.update(self.tracker.latency)
        session = self._session
        if session is not None:
            now = time.monotonic()
            if self.tracker.unsettled:
                self.tracker.expire(now)
            if not session.tick(now):
                resend.note_lost(self, None)
                self._drop_socket()
                self._open(first=False)

    def _drop_socket(self) -> None:
        if self._wire is not None:
            self._wire.close()
        self._wire = None

    def _open(self, *, first: bool) -> None:
        """Connect (again), with back-off; unconfirmed messages are republished once ready."""
        self._drop_socket()
        outage, unconfirmed = resend.publisher_outage(
            self,
            first=first,
            tidy=lambda exc: self._drop_socket(),
            gave_up=self._gave_up,
        )
        connect(outage, lambda target: self._connect_once(target, unconfirmed))
        self._broken = None

    def _gave_up(self, final: BaseException) -> None:
        if isinstance(final, ConnectionLost):
            self._broken = final

    def _connect_once(self, target: ConnectionSettings, unconfirmed: list[Delivery]) -> None:
        self._wire = wire = SocketWire(target)
        self._session = Session(
            target,
            self.tracker,
            self.builder,
            confirms=self.confirms,
            resend=unconfirmed,
            on_reply=self._reply_hook,
        )
        wire.handshake(self._session)


_END: Any = object()
