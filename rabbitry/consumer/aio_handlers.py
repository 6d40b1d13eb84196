"""The handler half of ``AsyncWorker``: deliveries dispatched under each handler's limits, its
order (single-active-consumer queues) and the worker's concurrency; a coroutine handler run
inline up to its first real wait (no task for one that never waits) and then in a task; the
time-to-run; immediate retries in process (``immediate``). The connection half (lifecycle,
the transport's events, writes) is ``aio.AsyncWorker``'s."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Coroutine, Generator
from typing import Any, cast

from rabbitry.consumer.app import Route
from rabbitry.consumer.builtins.time_limit import cancelled_at_limit
from rabbitry.consumer.engine import WorkerCore
from rabbitry.consumer.limits import Gate
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.worker_options import WorkerOptions


class _Resume:
    """Continue a coroutine that already ran up to its first suspension, inside a task.

    Running the first step inline lets handlers that never wait finish without a task; one
    that does wait is handed over here with the future it is waiting on.
    """

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        value = self.first
        while True:
            try:
                sent = yield value
            except BaseException as exc:  # cancellation and timeouts go to the handler
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


class HandlerRunner:
    """What ``AsyncWorker`` runs handlers with (a base of it: the state is the worker's)."""

    core: WorkerCore
    options: WorkerOptions
    _loop: asyncio.AbstractEventLoop | None
    _tasks: dict[asyncio.Task[Any], IncomingMessage]
    _waiting: deque[IncomingMessage]
    _ordered_busy: set[int]
    _ordered_waiting: dict[int, deque[IncomingMessage]]
    _gates: dict[int, Gate[IncomingMessage]]
    _gate_timers: dict[int, asyncio.TimerHandle]
    _pumping: set[int]
    _stopping: bool

    def _write(self, flush: bool = False) -> None:
        raise NotImplementedError  # the connection's: ``AsyncWorker._write``

    def _schedule_write(self) -> None:
        raise NotImplementedError  # the connection's: ``AsyncWorker._schedule_write``

    def take(self, message: IncomingMessage) -> None:
        """Handle one delivery as if it had just arrived, on the running loop, without a
        connection: how ``rabbitry.testing.HandlerHarness`` runs handlers the way ``run`` does
        (its handler may go on in a task; the core settles it)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._dispatch(message)

    def _dispatch(self, message: IncomingMessage) -> None:
        core = self.core
        if not core.admit(message):
            return
        if core.periodic and core.routes[message.consumer].periodic is not None:
            self._write()  # the next occurrence goes out before the run, however long it takes
        gate = self._gates.get(message.consumer) if self._gates else None
        if gate is not None:
            gate.add(message)
            self._pump(message.consumer)
            return
        self._launch(message)

    def _launch(self, message: IncomingMessage) -> None:
        route = self.core.routes[message.consumer]
        if route.ordered:
            if message.consumer in self._ordered_busy:
                self._ordered_waiting.setdefault(message.consumer, deque()).append(message)
                return
        elif route.is_async and len(self._tasks) >= self.options.concurrency:
            self._waiting.append(message)
            return
        self._run(message, route)

    def _pump(self, consumer: int) -> None:
        """Start what the handler's limits let start now; wake up when the rate allows more."""
        gate = self._gates[consumer]
        if consumer in self._pumping:
            return  # a handler that ended inline while starting: the loop below goes on
        self._pumping.add(consumer)
        try:
            while ready := gate.release(time.monotonic()):
                for message in ready:
                    self._launch(message)
        finally:
            self._pumping.discard(consumer)
        if gate.wake_at is not None and consumer not in self._gate_timers and self._loop:
            delay = max(0.0, gate.wake_at - time.monotonic())
            self._gate_timers[consumer] = self._loop.call_later(delay, self._wake, consumer)

    def _wake(self, consumer: int) -> None:
        self._gate_timers.pop(consumer, None)
        if not self._stopping:
            self._pump(consumer)
            self._schedule_write()

    def _cancel_gate_timers(self) -> None:
        for timer in self._gate_timers.values():
            timer.cancel()
        self._gate_timers.clear()

    def _gate_done(self, consumer: int) -> None:
        gate = self._gates.get(consumer)
        if gate is not None:
            gate.done()
            if not self._stopping:
                self._pump(consumer)

    def _run(self, message: IncomingMessage, route: Route) -> None:
        token = self.core.enter(message)  # its span current: the task below copies it too
        try:
            running = self._start(message, route)
        finally:
            self.core.leave(token)
        if not running and self._gates:
            self._gate_done(message.consumer)

    def _start(self, message: IncomingMessage, route: Route) -> bool:
        """Run the handler up to its first real wait; True when it goes on in a task."""
        if self.core.switches and self.core.hold(message):
            return False  # its queue's kill switch is open
        if self.core.middleware and not self.core.before(message):
            return False
        started = time.perf_counter()
        if not route.is_async:
            try:
                result = route.handler(message)
            except Exception as exc:
                return self._failed(message, route, exc, started)
            else:
                self.core.conclude(message, None, time.perf_counter() - started, result=result)
            return False
        coro = cast(Coroutine[Any, Any, Any], route.handler(message))
        try:
            first = coro.send(None)
        except StopIteration as stop:
            self.core.conclude(message, None, time.perf_counter() - started, result=stop.value)
            return False
        except Exception as exc:
            return self._failed(message, route, exc, started)
        self._spawn(self._finish(coro, first, message, route, started), message, route)
        return True

    def _spawn(
        self, coro: Coroutine[Any, Any, None], message: IncomingMessage, route: Route
    ) -> None:
        """Go on with ``message``'s handling in a task (``_task_done`` frees its place)."""
        assert self._loop is not None
        if route.ordered:
            self._ordered_busy.add(message.consumer)
        task = self._loop.create_task(coro)
        self._tasks[task] = message
        task.add_done_callback(self._task_done)

    def _failed(
        self, message: IncomingMessage, route: Route, error: BaseException, started: float
    ) -> bool:
        """A first call that failed before it waited: concluded now, or called again in a task
        (``immediate``); True when a task goes on with it."""
        pause = self.core.immediate_pause(message, error, 1) if route.immediate else None
        if pause is None:
            self.core.conclude(message, error, time.perf_counter() - started)
            return False
        self._spawn(self._again(message, route, pause), message, route)
        return True

    async def _again(self, message: IncomingMessage, route: Route, pause: float) -> None:
        """Immediate retries in the handler's task: pause, call again, until a call succeeds
        or the rule stops (``immediate.next_pause``); then the verdict."""
        calls = 1
        try:
            while True:
                await asyncio.sleep(pause)
                calls += 1
                started = time.perf_counter()
                error, result = await self._call(message, route)
                following = (
                    None if error is None else self.core.immediate_pause(message, error, calls)
                )
                if following is None:
                    break
                pause = following
        except asyncio.CancelledError:
            if self._stopping:
                self.core.requeue(message)  # shutdown: returned to the queue, not failed
                return
            raise
        if message.generation != self.core.generation:
            return  # the channel is gone: the broker redelivers the message
        self.core.conclude(message, error, time.perf_counter() - started, result=result)
        self._schedule_write()

    async def _call(
        self, message: IncomingMessage, route: Route
    ) -> tuple[BaseException | None, Any]:
        """One whole call of the handler (a coroutine within its time-to-run); its error, and
        what it returned (the reply, when the message names a reply-to)."""
        try:
            result = route.handler(message)
            if route.is_async:
                async with asyncio.timeout(route.timeout):
                    result = await cast(Coroutine[Any, Any, Any], result)
        except TimeoutError as exc:
            return (cancelled_at_limit(route) if route.is_async else exc), None
        except Exception as exc:
            return exc, None
        return None, result

    async def _finish(
        self,
        coro: Coroutine[Any, Any, Any],
        first: Any,
        message: IncomingMessage,
        route: Route,
        started: float,
    ) -> None:
        error: BaseException | None = None
        result: Any = None
        try:
            if route.timeout is not None:
                remaining = route.timeout - (time.perf_counter() - started)
                async with asyncio.timeout(max(0.0, remaining)):
                    result = await _Resume(coro, first)
            else:
                result = await _Resume(coro, first)
        except asyncio.CancelledError:
            if self._stopping:
                self.core.requeue(message)  # shutdown: returned to the queue, not failed
                return
            raise
        except TimeoutError:
            error = cancelled_at_limit(route)
        except Exception as exc:
            error = exc
        if error is not None and route.immediate is not None:
            pause = self.core.immediate_pause(message, error, 1)
            if pause is not None:
                await self._again(message, route, pause)
                return
        if message.generation != self.core.generation:
            return  # the channel is gone: the broker redelivers the message
        self.core.conclude(message, error, time.perf_counter() - started, result=result)
        self._schedule_write()

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        message = self._tasks.pop(task, None)
        if message is None:
            return
        route = self.core.routes[message.consumer]
        if self._gates:
            self._gate_done(message.consumer)
        if route.ordered:
            self._ordered_busy.discard(message.consumer)
            waiting = self._ordered_waiting.get(message.consumer)
            while waiting and message.consumer not in self._ordered_busy:
                self._run(waiting.popleft(), route)
        while self._waiting and len(self._tasks) < self.options.concurrency:
            nxt = self._waiting.popleft()
            self._run(nxt, self.core.routes[nxt.consumer])
        self._schedule_write()
