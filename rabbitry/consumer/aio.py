"""``AsyncWorker``: consume, run handlers, retry and park, from asyncio.

The connection is an ``asyncio.Protocol`` feeding ``ConsumerSession`` (the I/O-free core shared
with the publisher) instead of aio-pika's channel: aio-pika wraps every delivery in a message
object, a task and a future-returning ``ack`` that writes a frame of its own, which holds it
near 5,000 msg/s here. This worker parses deliveries by offset, runs a coroutine handler inline
until its first real suspension (no task at all for a handler that does not wait), and settles
each read batch with one multiple ack.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import deque
from collections.abc import Generator
from typing import Any, Self, Unpack, cast

from rabbitry.amqp.aio import Wire, connect_async, open_wire
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer import shells
from rabbitry.consumer.aio_handlers import HandlerRunner
from rabbitry.consumer.app import App
from rabbitry.consumer.engine import (
    logger,
)
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.worker_options import AsyncWorkerKeywords
from rabbitry.errors import BrokerError, FrameError
from rabbitry.uri import mask_text

_TICK = 0.1


class Stopping:
    """What ``AsyncWorker.stop()`` returns: the shutdown has begun; awaiting it waits until
    the worker's ``run`` has returned. Not awaiting it is fine (no coroutine is left)."""

    __slots__ = ("worker",)

    def __init__(self, worker: AsyncWorker) -> None:
        self.worker = worker

    def __await__(self) -> Generator[Any, None, None]:
        return self.worker.wait_stopped().__await__()


class AsyncWorker(shells.Shell, HandlerRunner):
    """Runs the handlers of an ``App`` until stopped: ``await AsyncWorker(app, url).run()``.

    ``run`` returns after ``stop()`` (or SIGTERM/SIGINT with ``handle_signals=True``) once the
    in-flight messages are settled or returned, within ``shutdown_timeout``; ``await
    worker.stop()`` waits for that. ``async with AsyncWorker(app, url) as worker:`` runs it in
    a task for the block: entered once it consumes, left once it stopped. An app of several
    vhosts runs one connection per vhost on the same loop (``workers``; ``concurrency`` and
    ``prefetch`` hold for each), and ``metrics`` are keyed ``vhost/queue``.
    """

    def __init__(
        self,
        app: App,
        url: str | ConnectionSettings | None = None,
        **keywords: Unpack[AsyncWorkerKeywords],
    ) -> None:
        own: AsyncWorkerKeywords = {"concurrency": 64, **keywords}
        self.workers: list[AsyncWorker] = self._parts(
            app, url, own, lambda part, settings: AsyncWorker(part, settings, **keywords)
        )
        """One worker per vhost, for an app of several (empty otherwise)."""
        self._wire: Wire | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[asyncio.Task[Any], IncomingMessage] = {}
        self._waiting: deque[IncomingMessage] = deque()
        self._ordered_busy: set[int] = set()
        self._ordered_waiting: dict[int, deque[IncomingMessage]] = {}
        self._gates = self.core.gates()
        self._gate_timers: dict[int, asyncio.TimerHandle] = {}
        self._pumping: set[int] = set()
        self._stopping = False
        self._stopped: asyncio.Event | None = None
        self._ready: asyncio.Future[None] | None = None
        self._lost: asyncio.Event | None = None
        self._write_scheduled = False
        self._ticker: asyncio.TimerHandle | None = None
        self._failure: BaseException | None = None
        self._finished: asyncio.Event | None = None
        """Set when ``run`` returns (``wait_stopped``)."""
        self._task: asyncio.Future[None] | None = None
        """``run``, when started by ``async with``."""

    @property
    def in_flight(self) -> int:
        """Deliveries not yet settled (running, waiting, or waiting for a retry's confirm)."""
        if self.workers:
            return sum(w.in_flight for w in self.workers)
        return self.core.acks.outstanding

    # -- lifecycle --------------------------------------------------------------------------------

    def stop(self) -> Stopping:
        """Begin a graceful shutdown (safe to call from a signal handler or a plain function);
        ``await worker.stop()`` also waits until ``run`` has returned. Not from a handler:
        the shutdown waits for the handlers."""
        if not self._stopping:
            self._stopping = True
            for worker in self.workers:
                worker.stop()
            if not self.workers:
                logger.info("stopping: no new messages; finishing %d in flight", self.in_flight)
                if self._stopped is not None:
                    self._stopped.set()
        return Stopping(self)

    async def wait_stopped(self) -> None:
        """Wait until ``run`` has returned (at once when it is not running)."""
        finished = self._finished
        if finished is not None:
            await finished.wait()

    async def __aenter__(self) -> Self:
        """Start ``run`` in a task and return once the worker consumes (its start-up check
        passed); its error if it cannot start."""
        ready = asyncio.Event()
        task = self._task = asyncio.ensure_future(self.run(ready=ready))
        waiting = asyncio.ensure_future(ready.wait())
        try:
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        if task.done():
            task.result()  # the refusal, or the error it stopped on
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop gracefully and wait for ``run`` to return; its error, if the block had none."""
        await self.stop()
        task, self._task = self._task, None
        if task is not None:
            await asyncio.wait({task})
            if exc_info[0] is None:
                task.result()

    async def run(
        self, *, handle_signals: bool = False, ready: asyncio.Event | None = None
    ) -> None:
        """Consume until ``stop()``; reconnects with back-off whenever the connection drops.

        On its first connection it checks that the broker holds what the handlers need
        (``rabbitry.consumer.preflight``) and raises ``TopologyMissing`` if not, before it
        consumes anything."""
        self._finished = asyncio.Event()
        try:
            if self.workers:
                await self._run_workers(handle_signals=handle_signals, ready=ready)
            else:
                await self._run_one(handle_signals=handle_signals, ready=ready)
        finally:
            self._finished.set()

    async def _run_one(self, *, handle_signals: bool, ready: asyncio.Event | None) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self._stopping:
            self._stopped.set()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        self._ticker = loop.call_later(_TICK, self._tick)
        try:
            after_loss = False
            while not self._stopping:
                await self._connect(after_loss=after_loss)
                after_loss = True
                if ready is not None:
                    ready.set()
                assert self._lost is not None
                stop_wait = asyncio.ensure_future(self._stopped.wait())
                lost_wait = asyncio.ensure_future(self._lost.wait())
                try:
                    await asyncio.wait({stop_wait, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop_wait.cancel()
                    lost_wait.cancel()
                if self._failure is not None:
                    raise self._failure
            await self._shutdown()
            gone = self.core.take_lost()
            if gone is not None:
                raise gone
        finally:
            if self._ticker is not None:
                self._ticker.cancel()
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

    async def _run_workers(self, *, handle_signals: bool, ready: asyncio.Event | None) -> None:
        """Run the worker of each vhost until ``stop()``; ``ready`` once all are connected.
        When one fails (the broker refused it), the others stop and its error is raised."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        events = [asyncio.Event() for _ in self.workers]
        tasks = [
            asyncio.ensure_future(worker.run(ready=event))
            for worker, event in zip(self.workers, events, strict=True)
        ]

        async def all_ready() -> None:
            await asyncio.gather(*(event.wait() for event in events))
            if ready is not None:
                ready.set()

        waiting = asyncio.ensure_future(all_ready())
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = next((t for t in done if t.exception() is not None), None)
            if failed is not None:
                self.stop()
                await asyncio.wait(tasks)
                raise cast(BaseException, failed.exception())
        finally:
            waiting.cancel()
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

    async def _connect(self, *, after_loss: bool) -> None:
        core = self.core
        outage = shells.worker_outage(core, after_loss, self._failed_try, lambda: self._stopping)
        await connect_async(outage, self._connect_once)

    async def _connect_once(self, s: ConnectionSettings) -> None:
        session = self.core.new_session()
        self._ready = asyncio.get_running_loop().create_future()
        self._lost = asyncio.Event()
        wire = Wire(self)

        def attach(wire: Wire = wire) -> Wire:
            self._wire = wire
            return wire

        async with asyncio.timeout(s.connect_timeout):
            await open_wire(s, attach)
            try:
                await self._ready
            except ConnectionError:
                if session.start_refused is not None:  # the start-up check closed the connection
                    raise session.start_refused from None
                raise
        session.last_received = time.monotonic()
        shells.log_started(self.core, session)

    def _failed_try(self, exc: BaseException) -> None:
        """A try that did not connect: forget it; a refusal the transport reported is final."""
        if self._failure is not None:
            raise self._failure from None
        if self._wire is not None:
            self._wire.abort()
        self._wire = None
        self.core.connection_lost()

    async def _shutdown(self) -> None:
        """Stop consuming, let running handlers finish (up to the deadline), settle, close."""
        core = self.core
        session = core.session
        deadline = time.monotonic() + self.options.shutdown_timeout
        if session is not None:
            session.cancel_consumers()
        self._return_waiting()
        self._write()
        if self._tasks:
            _, running = await asyncio.wait(
                set(self._tasks), timeout=max(0.0, deadline - time.monotonic())
            )
            for task in running:
                task.cancel(msg="shutdown")
            if running:
                await asyncio.wait(running, timeout=1.0)
        while core.publishing and time.monotonic() < deadline and core.session is not None:
            self._write(flush=True)
            await asyncio.sleep(0.01)
        self._write(flush=True)
        session = core.session
        wire = self._wire
        if session is not None and wire is not None and wire.transport is not None:
            for message in list(self._tasks.values()):
                core.requeue(message)
            self._write(flush=True)
            session.close()
            self._write()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    assert self._lost is not None
                    await self._lost.wait()
            if wire.transport is not None:
                wire.transport.close()
        shells.log_stopped(core)

    def _return_waiting(self) -> None:
        core = self.core
        for message in self._waiting:
            core.requeue(message)
        self._waiting.clear()
        for waiting in self._ordered_waiting.values():
            for message in waiting:
                core.requeue(message)
            waiting.clear()
        for gate in self._gates.values():
            for message in gate.take_waiting():
                core.requeue(message)
        self._cancel_gate_timers()

    # -- I/O --------------------------------------------------------------------------------------

    # -- the transport's events (``rabbitry.amqp.aio.WireOwner``) ---------------------------------

    def wire_made(self, wire: Wire) -> None:
        self._write()

    def wire_writable(self, wire: Wire, writable: bool) -> None:
        pass  # acks and retries are small; the prefetch bounds what is in flight

    def wire_refused(self, wire: Wire, error: BrokerError) -> None:
        self._failure = error

    def wire_data(self, wire: Wire, data: bytes) -> None:
        core = self.core
        session = core.session
        if wire is not self._wire or session is None or not wire.feed(session, data):
            return
        core.sync_generation()
        if core.lost is not None and not self._stopping:
            self.stop()  # a queue or exchange the handlers need is gone: stop
        if session.state is State.CLOSED:
            self._write()
            if wire.transport is not None:
                wire.transport.close()
            return
        if session.ready:
            ready = self._ready
            if ready is not None and not ready.done():
                ready.set_result(None)
        shells.log_broker_cancels(session)
        inbox = session.inbox
        if inbox:
            session.inbox = []
            if self._stopping:
                shells.return_unhandled(core, inbox)
            else:
                dispatch = self._dispatch
                for message in inbox:
                    dispatch(message)
        self._write()

    def wire_lost(self, wire: Wire, exc: Exception | None) -> None:
        if wire is not self._wire:
            return
        self._wire = None
        ready = self._ready
        handshaking = ready is not None and not ready.done()
        if ready is not None and handshaking:
            # _connect retries (or stops, on a refusal) and says so: not a lost connection
            ready.set_exception(
                exc  # a garbled answer is for the rule to judge, not a plain failed connection
                if isinstance(exc, FrameError)
                else ConnectionError(mask_text(str(exc)) if exc else "closed")
            )
            ready.exception()
        self.core.connection_lost()
        self._waiting.clear()
        for waiting in self._ordered_waiting.values():
            waiting.clear()
        self._ordered_busy.clear()
        for gate in self._gates.values():
            gate.take_waiting()  # the broker requeued them with the channel
        self._cancel_gate_timers()
        if not (self._stopping or handshaking):
            shells.note_lost(
                self.core, self.core.walk.current.display, exc or "closed by the broker"
            )
        if self._lost is not None:
            self._lost.set()

    def _write(self, flush: bool = False) -> None:
        self._write_scheduled = False
        wire = self._wire
        if wire is None or wire.transport is None:
            return
        data = self.core.take_output(flush)
        if data:
            wire.transport.write(data)
            session = self.core.session
            if session is not None:
                session.last_sent = time.monotonic()

    def _schedule_write(self) -> None:
        if not self._write_scheduled and self._loop is not None:
            self._write_scheduled = True
            self._loop.call_soon(self._write)

    def _tick(self) -> None:
        self._ticker = None
        loop = self._loop
        if loop is None:
            return
        session, wire = self.core.session, self._wire
        if session is not None and wire is not None and wire.transport is not None:
            if not session.tick(time.monotonic()):
                logger.warning("no heartbeat from %s: reconnecting", self.core.walk.current.display)
                wire.transport.abort()
            else:
                self.core.reseed(time.monotonic())
                self._write(flush=True)
                if session.inbox and not self._stopping:  # held deliveries a kill switch let go
                    inbox, session.inbox = session.inbox, []
                    for message in inbox:
                        self._dispatch(message)
                    self._write()
        self._ticker = loop.call_later(_TICK, self._tick)
