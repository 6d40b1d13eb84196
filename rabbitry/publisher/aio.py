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
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import timedelta
from typing import Any

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.amqp.message import Body, Message
from rabbitry.amqp.session import ConnectionRefused, Session
from rabbitry.errors import BrokerError, ConfirmTimeout
from rabbitry.publisher.base import PublisherBase, logger
from rabbitry.publisher.errors import ConnectionLost, PublisherClosed
from rabbitry.uri import mask_text

_OUT_HIGH_WATER = 1 << 18
_TICK = 0.5


class _Wire(asyncio.Protocol):
    """Moves bytes between the transport and the publisher's current session."""

    def __init__(self, owner: AsyncPublisher) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # a full window of large messages may sit in the buffer: pause only well beyond it
        transport.set_write_buffer_limits(high=1 << 24)
        self.owner._flush()

    def data_received(self, data: bytes) -> None:
        self.owner._on_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._on_lost(self, exc)

    def pause_writing(self) -> None:
        self.owner._writable = False

    def resume_writing(self) -> None:
        self.owner._writable = True
        self.owner._wake()


class AsyncPublisher(PublisherBase):
    """``async with AsyncPublisher(url) as p: await p.publish(...)``.

    ``publish`` returns once confirmed (or raises); ``send`` returns as soon as the message is
    handed to the connection (waiting only for room in the window) with a ``Delivery`` you may
    await later; ``publish_many`` pipelines an iterable and returns every outcome.
    """

    def __init__(self, url: Any = None, **options: Any) -> None:
        super().__init__(url, **options)
        self.tracker.on_settle = self._settled
        self._wire: _Wire | None = None
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
        if self.closed:
            raise PublisherClosed("the publisher is closed")
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
            self.tracker.fail_where(
                lambda d: True,
                lambda d: PublisherClosed(f"message {d.message_id}: publisher closed unconfirmed"),
            )
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

    async def publish(
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
        delivery = await self.send(
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
        if delivery.status is Status.PENDING:
            await _settled(delivery)
        return delivery.result()

    async def send(self, body: Body, **options: Any) -> Delivery:
        """Hand one message to the connection; await the returned ``Delivery`` for its confirm.

        Waits only while the window is full, the broker blocks publishers, or the connection
        is being re-established (back-pressure instead of unbounded memory).
        """
        session = self._session
        if session is None or not self._can_send(session, self.window):
            session = await self._room(self.window)
        delivery = self.prepare(body, **options)
        self._write(session, delivery)
        return delivery

    async def publish_many(
        self,
        messages: Iterable[Message | Body],
        *,
        exchange: str | None = None,
        routing_key: str = "",
        mandatory: bool | None = None,
        headers: Mapping[str, Any] | None = None,
        window: int | None = None,
    ) -> list[Delivery]:
        """Publish all with at most ``window`` unconfirmed; every ``Delivery`` once settled,
        in input order. Failures are reported per message (``ok``/``error``), not raised."""
        out: list[Delivery] = []
        async for delivery in self.stream(
            messages,
            exchange=exchange,
            routing_key=routing_key,
            mandatory=mandatory,
            headers=headers,
            window=window,
        ):
            out.append(delivery)
        return out

    async def stream(
        self,
        messages: Iterable[Message | Body],
        *,
        exchange: str | None = None,
        routing_key: str = "",
        mandatory: bool | None = None,
        headers: Mapping[str, Any] | None = None,
        window: int | None = None,
    ) -> AsyncIterator[Delivery]:
        """Yield each ``Delivery`` in input order once settled, reading ``messages`` lazily."""
        limit = window or self.window
        prepare = self.prepare_item
        timeout = self.confirm_timeout
        issued: list[Delivery] = []
        head = 0
        for item in messages:
            session = self._session
            if session is None or not self._can_send(session, limit):
                while head < len(issued) and issued[head].status is not Status.PENDING:
                    yield issued[head]
                    head += 1
                session = await self._room(limit)
            delivery = prepare(
                item,
                exchange=exchange,
                routing_key=routing_key,
                mandatory=mandatory,
                headers=headers,
                deadline=None if timeout is None else time.monotonic() + timeout,
            )
            self._write(session, delivery)
            issued.append(delivery)
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

    # -- the window and the connection ----------------------------------------------------------

    def _can_send(self, session: Session, limit: int) -> bool:
        return (
            session.ready
            and not session.blocked
            and self._writable
            and (self.tracker.unsettled < limit or not self.confirms)
            and len(session.out) < _OUT_HIGH_WATER
        )

    async def _room(self, limit: int) -> Session:
        if self.closed:
            raise PublisherClosed("the publisher is closed")
        if self._session is None:
            await self.connect()
        while True:
            if self._failure is not None:
                raise self._failure
            session = self._session
            if session is not None and self._can_send(session, limit):
                return session
            if session is not None and session.out:
                self._flush()
                if self._can_send(session, limit):
                    return session
            if self.closed:
                raise PublisherClosed("the publisher is closed")
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

    def _on_data(self, wire: _Wire, data: bytes) -> None:
        session = self._session
        if wire is not self._wire or session is None:
            return
        try:
            session.receive(data, time.monotonic())
        except ConnectionRefused as exc:
            if exc.permanent:
                self._failure = BrokerError(
                    f"{self.settings.display} refused the connection: {exc}"
                )
            if session.out:
                self._flush()
            if wire.transport is not None:
                wire.transport.close()
            return
        if session.out:
            self._flush()
        if session.ready:
            ready = self._ready
            if ready is not None and not ready.done():
                ready.set_result(None)
        if self._space is not None:
            self._wake()  # the waiter checks its own window

    def _on_lost(self, wire: _Wire, exc: Exception | None) -> None:
        if wire is not self._wire:
            return
        self._wire = None
        ready = self._ready
        if ready is not None and not ready.done():
            # during the handshake: a refused client certificate ends it as a TLS alert
            refusal = self.settings.tls_failure(exc) if exc is not None else None
            if refusal is not None:
                self._failure = refusal
            ready.set_exception(ConnectionError(mask_text(str(exc)) if exc else "closed"))
            ready.exception()
        if self.closed:
            return
        logger.warning(
            "connection to %s lost: %s", self.settings.display, mask_text(str(exc or "closed"))
        )
        if self._reconnecting is None or self._reconnecting.done():
            assert self._loop is not None
            self._reconnecting = self._loop.create_task(self._connect_loop(first=False))

    async def _connect_loop(self, *, first: bool) -> None:
        assert self._loop is not None
        loop = self._loop
        backoff = self.settings.backoff
        resend = self.tracker.take_unsettled() if self.confirms else []
        if not first:
            self.reconnects += 1
        started = time.monotonic()
        attempt = 0
        try:
            while not self.closed:
                try:
                    await self._connect_once(loop, resend)
                    self._failure = None
                    if resend:
                        self._announce_republish(resend)
                    self._wake()
                    return
                except (OSError, ConnectionError, TimeoutError) as exc:
                    if self._failure is not None:
                        raise self._failure from None
                    refusal = self.settings.tls_failure(exc)
                    if refusal is not None:
                        raise refusal from None
                    elapsed = time.monotonic() - started
                    if backoff.give_up_after is not None and elapsed >= backoff.give_up_after:
                        message = (
                            f"could not connect to {self.settings.display} for {elapsed:.0f} s:"
                            f" {mask_text(str(exc))}"
                        )
                        lost = ConnectionLost(message)
                        for d in resend:
                            self.tracker.fail_detached(
                                d, ConnectionLost(f"message {d.message_id}: {message}")
                            )
                        self._failure = lost
                        raise lost from None
                    pause = backoff.delay(attempt)
                    attempt += 1
                    logger.info(
                        "connecting to %s failed (%s); retrying in %.1f s",
                        self.settings.display,
                        mask_text(str(exc)),
                        pause,
                    )
                    await asyncio.sleep(pause)
        except BaseException as exc:
            if isinstance(exc, Exception):
                self._failure = exc
            for d in resend:
                self.tracker.fail_detached(d, ConnectionLost(f"message {d.message_id}: not sent"))
            self._wake()
            raise
        finally:
            self._reconnecting = None

    async def _connect_once(self, loop: asyncio.AbstractEventLoop, resend: list[Delivery]) -> None:
        s = self.settings
        session = Session(s, self.tracker, self.builder, confirms=self.confirms, resend=resend)
        session.last_received = time.monotonic()
        self._ready = loop.create_future()
        wire = _Wire(self)

        def attach() -> _Wire:
            # before connection_made: the broker speaks first, its bytes must find the session
            self._wire = wire
            self._session = session
            self._writable = True
            return wire

        async with asyncio.timeout(s.connect_timeout):
            try:
                await loop.create_connection(
                    attach,
                    s.host,
                    s.port,
                    ssl=s.tls,
                    server_hostname=(s.server_hostname or s.host) if s.tls else None,
                )
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
            self._ticker = loop.call_later(_TICK, self._tick)

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
                logger.warning("no heartbeat from %s: reconnecting", self.settings.display)
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
