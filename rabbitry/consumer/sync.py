"""``Worker``: the blocking twin of ``AsyncWorker``, over the same core.

One socket, a ``select`` loop, handlers run one at a time in the calling thread (coroutine
handlers run on a private event loop). It is the worker for code that is not asyncio;
throughput comes from the same place as the async one: deliveries parsed by offset and one
multiple ack per read batch instead of pika's per-message callbacks and ack frames.
asyncio is imported by the first coroutine handler to run: a worker of plain functions does
not carry the event loop machinery.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import TYPE_CHECKING, Any, Unpack

from rabbitry.amqp.blocking import Disconnected, SocketWire
from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.connector import connect
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer import shells
from rabbitry.consumer.app import App, Route
from rabbitry.consumer.builtins.time_limit import cancelled_at_limit
from rabbitry.consumer.decision import CANCEL_HEADER
from rabbitry.consumer.engine import (
    WorkerCore,
)
from rabbitry.consumer.immediate import call_again
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.session import ConsumerSession
from rabbitry.consumer.worker_options import (
    AsyncWorkerKeywords,
    WorkerKeywords,
)
from rabbitry.errors import BrokerError, FrameError

if TYPE_CHECKING:
    import asyncio

    from rabbitry.publisher import Publisher

_TICK = 0.1


def cancel_job(publisher: Publisher, queue: str, job_id: str, *, exchange: str = "") -> Delivery:
    """Withdraw the delayed job ``job_id`` (a message id): a confirmed control message to
    ``queue``; the worker that receives it drops ``job_id`` when it arrives. With several
    workers, give the app a shared ``CancelStore``."""
    return publisher.publish(
        b"", exchange=exchange, routing_key=queue, headers={CANCEL_HEADER: job_id}
    )


def call_handler(
    route: Route,
    message: IncomingMessage,
    loop: Callable[[], asyncio.AbstractEventLoop],
) -> tuple[BaseException | None, Any]:
    """Run ``route``'s handler to its end in this thread (a coroutine handler on ``loop()``,
    cancelled at its time-to-run); the exception it ended with (None on success) and what it
    returned (the reply, when the message names a reply-to)."""
    try:
        result = route.handler(message)
        if route.is_async:
            assert isinstance(result, Coroutine)
            coro: Coroutine[Any, Any, Any] = result
            if route.timeout is not None:
                import asyncio

                coro = asyncio.wait_for(result, route.timeout)
            result = loop().run_until_complete(coro)
    except TimeoutError as exc:
        if not route.is_async:
            return exc, None
        return cancelled_at_limit(route), None
    except Exception as exc:
        return exc, None
    return None, result


def handle_blocking(
    core: WorkerCore, message: IncomingMessage, loop: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    """Handle an admitted delivery in this thread: its span current, the middlewares'
    ``before`` hooks, the handler (called again in place while ``immediate`` says so, pausing
    this thread), then ``core.conclude`` (hooks, verdict, ack or republish)."""
    if core.switches and core.hold(message):
        return  # its queue's kill switch is open
    token = core.enter(message)
    try:
        if core.middleware and not core.before(message):
            return
        started = time.perf_counter()
        route = core.routes[message.consumer]
        error, result = call_handler(route, message, loop)
        if error is not None and route.immediate is not None:
            last: list[Any] = [None]  # what the last call returned: the reply, on success

            def again() -> BaseException | None:
                failed, last[0] = call_handler(route, message, loop)
                return failed

            error, started = call_again(
                error,
                started,
                again,
                lambda failed, calls: core.immediate_pause(message, failed, calls),
            )
            result = last[0]
        core.conclude(message, error, time.perf_counter() - started, result=result)
    finally:
        core.leave(token)


class Worker(shells.Shell):
    """Runs the handlers of an ``App`` until stopped: ``Worker(app, url).run()``.

    An app of several vhosts runs one connection per vhost, each in a thread of its own
    (``workers``): handlers of different vhosts may then run at the same time."""

    def __init__(
        self,
        app: App,
        url: str | ConnectionSettings | None = None,
        **keywords: Unpack[WorkerKeywords],
    ) -> None:
        one: AsyncWorkerKeywords = {**keywords, "concurrency": 1}  # handlers one at a time
        self.workers: list[Worker] = self._parts(
            app, url, one, lambda part, settings: Worker(part, settings, **keywords)
        )
        """One worker per vhost, for an app of several (empty otherwise)."""
        self._wire: SocketWire | None = None
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gates = self.core.gates()

    def stop(self) -> None:
        """Begin a graceful shutdown (safe from a signal handler or another thread)."""
        self._stopping = True
        for worker in self.workers:
            worker.stop()

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
            if self.workers:
                self._run_workers(max_idle)
            else:
                self._run(max_idle)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._loop is not None:
                self._loop.close()

    # -- the loop ---------------------------------------------------------------------------------

    def _run_workers(self, max_idle: float | None) -> None:
        """Each vhost's worker in a thread; this one waits (and takes the signals). When one
        fails, the others stop and its error is raised."""
        errors: list[BaseException] = []

        def run_one(worker: Worker) -> None:
            try:
                worker.run(max_idle=max_idle)
            except BaseException as exc:
                errors.append(exc)
                self.stop()

        threads = [
            threading.Thread(
                target=run_one, args=(w,), name=f"rabbitry worker {w.app.vhosts[0].name}"
            )
            for w in self.workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(_TICK)  # short waits: signals reach this thread meanwhile
        if errors:
            raise errors[0]

    def _run(self, max_idle: float | None) -> None:
        core = self.core
        after_loss = False
        while not self._stopping:
            outage = shells.worker_outage(
                core, after_loss, self._failed_try, lambda: self._stopping
            )
            session = connect(outage, self._connect)
            if session is None:
                break
            try:
                self._serve(session, max_idle)
                if max_idle is not None and not self._stopping:
                    self._stopping = True
            except (OSError, Disconnected, FrameError) as exc:  # a broken frame ends it too
                lost = core.walk.current.display
                self._failed_try(exc)
                if not self._stopping:
                    shells.note_lost(core, lost, exc)
                after_loss = True
        self._shutdown()
        gone = core.take_lost()
        if gone is not None:
            raise gone

    def _failed_try(self, exc: BaseException) -> None:
        """The connection is gone (or never came): forget it and what it held."""
        self._drop()
        self.core.connection_lost()
        for gate in self._gates.values():
            gate.take_waiting()  # the broker requeued them with the channel

    def _connect(self, target: ConnectionSettings) -> ConsumerSession:
        self._wire = wire = SocketWire(target)
        session = self.core.new_session()
        try:
            wire.handshake(session)
        except Disconnected:
            if session.start_refused is None:
                raise
            raise session.start_refused from None  # the start-up check closed the connection
        shells.log_started(self.core, session)
        return session

    def _serve(self, session: ConsumerSession, max_idle: float | None) -> None:
        core = self.core
        last_message = time.monotonic()
        while not self._stopping:
            got = self._io(self._next_wait())
            now = time.monotonic()
            if self._gates:
                got += self._pump()
            if got:
                last_message = now
            elif (
                max_idle is not None
                and now - last_message > max_idle
                and not core.publishing
                and not any(gate.waiting for gate in self._gates.values())
            ):
                return
            if not session.tick(now):
                raise Disconnected("no heartbeat from the broker")
            core.reseed(now)
            self._send(core.take_output(flush=not got))

    def _io(self, timeout: float) -> int:
        """Read what arrived (waiting up to ``timeout``), run its handlers; messages handled."""
        core = self.core
        wire, session = self._wire, core.session
        assert wire is not None and session is not None
        if not wire.exchange(session, timeout) and not session.inbox:
            return 0  # (a kill switch may hand held deliveries back without new bytes)
        core.sync_generation()
        if core.lost is not None:
            self._stopping = True  # a queue or exchange the handlers need is gone: stop
        shells.log_broker_cancels(session)
        inbox = session.inbox
        if not inbox:
            return 0
        session.inbox = []
        for message in inbox:
            if self._stopping:
                shells.return_unhandled(core, [message])
            elif core.admit(message):
                if core.periodic and core.routes[message.consumer].periodic is not None:
                    self._send(core.take_output())  # the next occurrence goes out before the run
                gate = self._gates.get(message.consumer) if self._gates else None
                if gate is None:
                    handle_blocking(core, message, self._event_loop)
                else:
                    gate.add(message)
                    self._pump()
        self._send(core.take_output())
        return len(inbox)

    def _pump(self) -> int:
        """Run the held-back deliveries of limited handlers whose rate allows them now."""
        handled = 0
        for gate in self._gates.values():
            while not self._stopping and (ready := gate.release(time.monotonic())):
                for message in ready:
                    handle_blocking(self.core, message, self._event_loop)
                    gate.done()
                    handled += 1
        return handled

    def _next_wait(self) -> float:
        """How long the socket may be waited on: a tick, or less when a rate releases sooner."""
        wake = [gate.wake_at for gate in self._gates.values() if gate.wake_at is not None]
        if not wake:
            return _TICK
        return max(0.0, min(_TICK, min(wake) - time.monotonic()))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            import asyncio

            self._loop = asyncio.new_event_loop()
        return self._loop

    def _send(self, data: bytes) -> None:
        wire, session = self._wire, self.core.session
        if data and wire is not None and session is not None:
            wire.send_all(session, data)

    def _drop(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()

    def _shutdown(self) -> None:
        core = self.core
        session = core.session
        if session is None or self._wire is None:
            self._drop()
            return
        deadline = time.monotonic() + self.options.shutdown_timeout
        for gate in self._gates.values():
            for message in gate.take_waiting():
                core.requeue(message)
        with contextlib.suppress(OSError, Disconnected, BrokerError):
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
        shells.log_stopped(core)
