"""``AsyncPublisher``: confirmed publishing from asyncio code.

The connection is an ``asyncio.Protocol`` feeding ``Session`` (the I/O-free protocol core)
rather than aio-pika's channel: aio-pika (through aiormq) creates a Future, a message id, a lock
acquisition and a drain for every publish, and the usual way to pipeline it is one Task per
message; together that holds it near 5,000 confirmed msg/s here. This publisher creates no task
and no future per message: frames are written in one batch per event-loop turn, a multiple ack
settles a range of the confirm tracker, and a ``Delivery`` creates a future only if someone
awaits it while it is pending. aio-pika stays the client of rabbitry's async consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, Unpack

from rabbitry.amqp.aio import Wire, connect_async, open_wire
from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.amqp.message import Body, Message
from rabbitry.amqp.session import Session
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError, ConfirmTimeout, ConnectionLost, FrameError
from rabbitry.publisher import resend
from rabbitry.publisher.base import (
    BatchOptions,
    PublisherBase,
    PublishOptions,
)
from rabbitry.publisher.requests import DEFAULT_REQUEST_TIMEOUT, Reply, RequestOptions
from rabbitry.uri import mask_text

_OUT_HIGH_WATER = 1 << 18
_TICK = 0.5


class AsyncPublisher(PublisherBase):
    """``async with AsyncPublisher(url) as p: await p.publish(...)``.

    ``publish`` returns once confirmed (or raises); ``send`` returns as soon as the message is
    handed to the connection (waiting only for room in the window) with a ``Delivery`` you may
    await later; ``publish_many`` pipelines an iterable and returns every outcome.
    """

    def __init__(self, url: Any = None, **options: Any) -> None:
        super().__init__(url, **options)
        self.tracker.on_settle = self._settled
        self._wire: Wire | None = None
        self._session: Session | None = None
        self._writable = True
        self._flush_scheduled = False
        self._space: asyncio.Future[None] | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._ready: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncPublisher:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        self._refuse_if_closed()
        if self._session is not None and self._session.ready:
            return
        self._loop = asyncio.get_running_loop()
        if self._reconnecting is None:
            self._reconnecting = self._loop.create_task(self._connect_loop(first=True))
        task = self._reconnecting
        await asyncio.shield(task)

    async def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` for messages in flight, then close the connection."""
        if self.closed:
            return
        try:
            if self.tracker.unsettled and self._session is not None:
                with contextlib.suppress(ConfirmTimeout, ConnectionLost):
                    await self.flush(timeout)
        finally:
            self.closed = True
            if self._ticker is not None:
                self._ticker.cancel()
            if self._reconnecting is not None and not self._reconnecting.done():
                self._reconnecting.cancel()
            self._fail_in_flight()
            wire, session = self._wire, self._session
            if wire is not None and wire.transport is not None and session is not None:
                session.close()
                wire.transport.write(session.take_output())
                wire.transport.close()
            self._wake()

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message in flight is settled."""
        pending = self.tracker.pending()
        try:
            async with asyncio.timeout(timeout):
                for delivery in pending:
                    if delivery.status is Status.PENDING:
                        await _settled(delivery)
        except TimeoutError:
            raise ConfirmTimeout(
                f"{self.tracker.unsettled} message(s) still unconfirmed after {timeout} s"
            ) from None

    # -- publishing ---------------------------------------------------------------------------

    async def publish(self, body: Body, **options: Unpack[PublishOptions]) -> Delivery:
        """Publish one message and wait for its confirm; the settled ``Delivery``."""
        delivery = await self.send(body, **options)
        if delivery.status is Status.PENDING:
            await _settled(delivery)
        return delivery.result()

    async def send(self, body: Body, **options: Unpack[PublishOptions]) -> Delivery:
        """Hand one message to the connection; await the returned ``Delivery`` for its confirm.

        Waits only while the window is full, the broker blocks publishers, or the connection
        is being re-established (back-pressure instead of unbounded memory).
        """
        session = self._session
        limit = self._limit(options.get("delay") is not None)
        if session is None or not self._can_send(session, limit):
            session = await self._room(limit)
        delivery = self.prepare(body, **options)
        self._write(session, delivery)
        return delivery

    async def request(
        self,
        body: Body,
        *,
        routing_key: str = "",
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        **options: Unpack[RequestOptions],
    ) -> Reply:
        """Publish a request (confirmed, mandatory) and wait up to ``timeout`` seconds for the
        reply a handler sends back over direct reply-to; the ``Reply``. Any number may wait
        at once, each for its own reply.

        Raises ``Unroutable`` at its confirm when no queue takes the request, and
        ``RequestTimeout`` when no reply came in time (a later reply is dropped)."""
        done = asyncio.get_running_loop().create_future()
        delivery, waiting = self._start_request(body, routing_key, timeout, options, done)
        try:
            async with asyncio.timeout(timeout):
                session = self._session
                if session is None or not self._can_send(session, self.window):
                    session = await self._room(self.window)
                self._want_replies(session)  # the consumer first, then the request
                self._write(session, delivery)
                await _settled(delivery)
                delivery.result()  # an unroutable or refused request raises here, at once
                if waiting.reply is None and waiting.error is None:
                    await done
        except TimeoutError:
            raise waiting.timed_out(routing_key, timeout) from None
        finally:
            self.replies.forget(waiting.correlation_id)
        return waiting.outcome()

    async def publish_many(
        self, messages: Iterable[Message | Body], **options: Unpack[BatchOptions]
    ) -> list[Delivery]:
        """Publish all with at most ``window`` unconfirmed; every ``Delivery`` once settled,
        in input order. Failures are reported per message (``ok``/``error``), not raised."""
        out: list[Delivery] = []
        async for delivery in self.stream(messages, **options):
            out.append(delivery)
        return out

    async def stream(
        self, messages: Iterable[Message | Body], **options: Unpack[BatchOptions]
    ) -> AsyncIterator[Delivery]:
        """Yield each ``Delivery`` in input order once settled, reading ``messages`` lazily."""
        batch = self.batch(options)
        fixed = batch.window
        limit_for = self._limit
        prepare = self.prepare_item
        timeout = self.confirm_timeout
        issued: list[Delivery] = []
        head = 0
        count = 0  # messages sent, for the batch's span
        try:
            for item in messages:
                session = self._session
                limit = fixed or limit_for(isinstance(item, Message) and item.delay is not None)
                if session is None or not self._can_send(session, limit):
                    while head < len(issued) and issued[head].status is not Status.PENDING:
                        yield issued[head]
                        head += 1
                    session = await self._room(limit)
                deadline = None if timeout is None else time.monotonic() + timeout
                delivery = prepare(item, batch, deadline)
                self._write(session, delivery)
                issued.append(delivery)
                count += 1
                if head > 4096 and head * 2 > len(issued):
                    del issued[:head]
                    head = 0
            if not self.confirms:
                await self._drained()
            while head < len(issued):
                delivery = issued[head]
                if delivery.status is Status.PENDING:
                    await _settled(delivery)
                yield delivery
                head += 1
        finally:
            self.end_batch(batch, count)

    # -- the window and the connection ----------------------------------------------------------

    def _limit(self, delayed: bool) -> int:
        """How many messages may be unconfirmed when the next one is sent (a delayed one at
        most ``WindowRule.delayed`` when the window adapts)."""
        adaptive = self.adaptive
        return self.window if adaptive is None else adaptive.limit(delayed)

    def _can_send(self, session: Session, limit: int) -> bool:
        return (
            session.ready
            and not session.blocked
            and self._writable
            and (self.tracker.unsettled < limit or not self.confirms)
            and len(session.out) < _OUT_HIGH_WATER
        )

    async def _room(self, limit: int) -> Session:
        self._refuse_if_closed()
        if self._session is None:
            await self.connect()
        while True:
            if self._failure is not None:
                raise self._failure
            session = self._session
            if session is not None and self._can_send(session, limit):
                return session
            adaptive = self.adaptive
            if adaptive is not None and self.tracker.unsettled >= adaptive.window:
                adaptive.filled()
            if session is not None and session.out:
                self._flush()
                if self._can_send(session, limit):
                    return session
            self._refuse_if_closed()
            if self._space is None or self._space.done():
                assert self._loop is not None
                self._space = self._loop.create_future()
            await self._space

    async def _drained(self) -> None:
        self._flush()
        while not self._writable and not self.closed:
            await self._room(self.window)

    def _write(self, session: Session, delivery: Delivery) -> None:
        session.publish(delivery)
        if len(session.out) >= _OUT_HIGH_WATER:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        wire, session = self._wire, self._session
        if wire is None or wire.transport is None or session is None or not session.out:
            return
        wire.transport.write(session.take_output())
        session.last_sent = time.monotonic()

    def _wake(self) -> None:
        space = self._space
        if space is not None and not space.done():
            space.set_result(None)

    def _settled(self, delivery: Delivery) -> None:
        waiter = delivery.waiter
        if waiter is not None and not waiter.done():
            if delivery.error is not None:
                waiter.set_exception(delivery.error)
                waiter.exception()  # retrieved here; the awaiting code gets it via result()
            else:
                waiter.set_result(None)

    # -- the transport's events (``rabbitry.amqp.aio.WireOwner``) ---------------------------------

    def wire_made(self, wire: Wire) -> None:
        self._flush()

    def wire_writable(self, wire: Wire, writable: bool) -> None:
        self._writable = writable
        if writable:
            self._wake()

    def wire_refused(self, wire: Wire, error: BrokerError) -> None:
        self._failure = error

    def wire_data(self, wire: Wire, data: bytes) -> None:
        session = self._session
        if wire is not self._wire or session is None or not wire.feed(session, data):
            return
        if self.adaptive is not None:
            self.adaptive.update(self.tracker.latency)
        if session.out:
            self._flush()
        if session.ready:
            ready = self._ready
            if ready is not None and not ready.done():
                ready.set_result(None)
        if self._space is not None:
            self._wake()  # the waiter checks its own window

    def wire_lost(self, wire: Wire, exc: Exception | None) -> None:
        if wire is not self._wire:
            return
        self._wire = None
        ready = self._ready
        if ready is not None and not ready.done():
            # during the handshake: a refused client certificate ends it as a TLS alert
            refusal = self.walk.current.tls_failure(exc) if exc is not None else None
            if refusal is not None:
                self._failure = refusal
            ready.set_exception(
                exc  # a garbled answer is for the rule to judge, not a plain failed connection
                if isinstance(exc, FrameError)
                else ConnectionError(mask_text(str(exc)) if exc else "closed")
            )
            ready.exception()
            return  # the connect loop retries or stops, and says so: nothing was lost
        if self.closed:
            return
        resend.note_lost(self, exc or "closed")
        if self._reconnecting is None or self._reconnecting.done():
            assert self._loop is not None
            self._reconnecting = self._loop.create_task(self._connect_loop(first=False))

    async def _connect_loop(self, *, first: bool) -> None:
        outage, unconfirmed = resend.publisher_outage(
            self,
            first=first,
            tidy=self._failed_try,
            gave_up=self._gave_up,
            stopping=lambda: self.closed,
        )
        try:
            if (
                await connect_async(outage, lambda s: self._connect_once(s, unconfirmed))
                is not None
            ):
                self._failure = None
                self._wake()
        finally:
            self._reconnecting = None

    def _failed_try(self, exc: BaseException) -> None:
        if self._failure is not None:  # the handshake's refusal: final
            raise self._failure from None

    def _gave_up(self, final: BaseException) -> None:
        if isinstance(final, Exception):
            self._failure = final
        self._wake()

    async def _connect_once(self, s: ConnectionSettings, unconfirmed: list[Delivery]) -> Session:
        session = Session(
            s,
            self.tracker,
            self.builder,
            confirms=self.confirms,
            resend=unconfirmed,
            on_reply=self._reply_hook,
        )
        session.last_received = time.monotonic()
        assert self._loop is not None
        self._ready = self._loop.create_future()
        # a full window of large messages may sit in the buffer: pause only well beyond it
        wire = Wire(self, write_buffer_high=1 << 24)

        def attach() -> Wire:
            # before connection_made: the broker speaks first, its bytes must find the session
            self._wire = wire
            self._session = session
            self._writable = True
            return wire

        async with asyncio.timeout(s.connect_timeout):
            try:
                await open_wire(s, attach)
            except BaseException:
                if self._wire is wire:
                    self._wire = None
                raise
            try:
                await self._ready
            except ConnectionError:
                if self._failure is not None:
                    raise self._failure from None
                raise
        if self._ticker is None:
            self._ticker = self._loop.call_later(_TICK, self._tick)
        return session

    def _tick(self) -> None:
        self._ticker = None
        if self.closed or self._loop is None:
            return
        now = time.monotonic()
        if self.tracker.unsettled and self.tracker.expire(now):
            self._wake()
        session, wire = self._session, self._wire
        if session is not None and wire is not None and wire.transport is not None:
            if not session.tick(now):
                resend.note_lost(self, None)
                wire.transport.abort()
            elif session.out:
                self._flush()
        self._ticker = self._loop.call_later(_TICK, self._tick)


async def _settled(delivery: Delivery) -> None:
    """Wait for a delivery to settle without raising its error."""
    if delivery.status is not Status.PENDING:
        return
    if delivery.waiter is None:
        delivery.waiter = asyncio.get_running_loop().create_future()
    with contextlib.suppress(Exception):
        await delivery.waiter
