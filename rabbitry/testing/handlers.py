"""Handler tests without a broker: run an ``App``'s handlers on messages you give, and see what
the worker would do with each (acked, retried at which tier and delay, parked and why).

``HandlerHarness`` drives the worker's own core (``rabbitry.consumer.engine.WorkerCore``) the
way the blocking ``Worker`` does, through the same function (``handle_blocking``), or through
``AsyncWorker``'s dispatch (``deliver_async``): admission (duplicates, cancellations), the
middlewares, the typed body, the handler, the pure retry
decision, the republished copy and its ack. Only the socket is missing: the copies the worker
publishes are taken as confirmed. So an outcome here is the outcome on a broker, by
construction; the broker fixtures of ``rabbitry.testing.plugin`` stay for integration tests.

    harness = HandlerHarness(app)
    outcome = harness.deliver("orders.work", {"id": 7, "amount": 12})
    assert outcome.acked
    assert harness.deliver("orders.work", {"id": "x"}).parked

``occurrence(job, scheduled)`` delivers an occurrence of a periodic job as a worker publishes
it; its outcome's ``scheduled`` is the occurrence the run published before its ack
(``schedule(job, count)`` follows the chain).

A handler with a kill switch (``kill_switch=KillSwitch(...)``) trips it here as in a worker:
``kill_switch(queue)`` says its state, a message delivered while it is open is ``held`` (its
handler does not run), and ``advance(seconds)`` moves the switches' clock past the cool-down:
the switch half-opens and the held messages are handled, first, as a worker handles them.
A message delivered with ``reply_to=`` (as ``Publisher.request`` sends it) gets the handler's
return value as its reply before the ack, as on a worker: the outcome's ``reply``.

``deliver`` runs coroutine handlers on a private event loop, as ``Worker`` does: call it from a
plain test. From an async test, ``await harness.deliver_async(...)`` goes through
``AsyncWorker``'s own dispatch on the test's loop instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, overload

from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.message import Body, encode_body
from rabbitry.consumer.aio import AsyncWorker
from rabbitry.consumer.app import App
from rabbitry.consumer.decision import Action, Verdict, broker_failures
from rabbitry.consumer.kill_switch import SwitchState
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.middleware import Middleware
from rabbitry.consumer.periodic import Occurrence
from rabbitry.consumer.sync import handle_blocking
from rabbitry.errors import AppError
from rabbitry.publisher import Reply

FOLLOW_LIMIT = 100
"""``follow`` stops after this many deliveries of one message (a ladder that never ends)."""


class _ActionIn:
    """A flag of ``Outcome``: whether the verdict's action is one of ``actions``."""

    def __init__(self, *actions: Action) -> None:
        self.actions = frozenset(actions)

    @overload
    def __get__(self, outcome: None, owner: type[Outcome]) -> _ActionIn: ...
    @overload
    def __get__(self, outcome: Outcome, owner: type[Outcome]) -> bool: ...
    def __get__(self, outcome: Outcome | None, owner: type[Outcome]) -> _ActionIn | bool:
        if outcome is None:
            return self
        return outcome.verdict.action in self.actions


@dataclass(frozen=True)
class Outcome:
    """What the worker did with one delivery: the ``verdict`` (``Action`` and where a copy
    went), the ``error`` the handler ended with (after the middlewares), the ``message`` as
    the handler saw it, and the ``copy`` the worker published for a retry or a park."""

    verdict: Verdict
    message: IncomingMessage
    error: BaseException | None = None
    copy: Delivery | None = None
    scheduled: Occurrence | None = None
    """The occurrence of a periodic job published before the ack: the next one after a run,
    the same one delayed again, or the one that replaces it under a changed schedule."""
    fault: Mapping[str, Any] | None = None
    """The fault event published for a parked message (``retry.faults``): its JSON fields."""
    reply: Reply | None = None
    """The reply sent before the ack (a message delivered with ``reply_to=``): the handler's
    return value as the requester's ``request`` gets it."""

    @property
    def action(self) -> Action:
        return self.verdict.action

    acked = _ActionIn(Action.ACK)
    """The handler succeeded and the message was acked."""
    retried = _ActionIn(Action.RETRY)
    parked = _ActionIn(Action.PARK)
    held = _ActionIn(Action.HELD)
    """The queue's kill switch was open: the handler did not run; the message waits for
    the switch to half-open (``HandlerHarness.advance``)."""
    rejected = _ActionIn(Action.REJECT)
    """No retry set-up: rejected, the broker dead-letters it by the queue's arguments."""
    skipped = _ActionIn(
        Action.DUPLICATE,
        Action.CANCELLED,
        Action.CANCEL_NOTED,
        Action.RESCHEDULED,
        Action.DROPPED,
    )
    """Acked without running the handler (a duplicate, a cancelled job, a cancel order,
    an occurrence that was rescheduled or whose job is gone)."""

    @property
    def attempt(self) -> int:
        """The delivery's attempt number (1 for a first delivery): from rabbitry's headers,
        or the broker's count of failed deliveries (``retry: {via: broker}``)."""
        return max(self.message.attempt, 1 + broker_failures(self.message.headers))

    @property
    def delay_ms(self) -> int:
        """A retry's delay (0 otherwise)."""
        return self.verdict.delay_ms

    @property
    def tier(self) -> str | None:
        """A retry's tier as the metrics label it (``1s``, ``250ms``); None otherwise."""
        return self.verdict.tier_label if self.retried else None

    @property
    def routing_key(self) -> str:
        """Where the copy went: the tier queue, the delay-level key, or the parking lot (with
        ``retry: {via: broker}``, where the broker takes the message: the queue itself, or
        the parking lot it dead-letters to)."""
        return self.verdict.routing_key

    @property
    def headers(self) -> Mapping[str, Any]:
        """The copy's headers (``x-rabbitry-attempt``, ``-last-error``, ``-parked-reason``...);
        with ``retry: {via: broker}``, those the broker delivers the message with next
        (``x-delivery-count``)."""
        return self.verdict.headers or {}

    @property
    def reason(self) -> str:
        return self.verdict.reason

    def __repr__(self) -> str:
        where = f" -> {self.routing_key}" if self.verdict.publishes else ""
        return f"<Outcome {self.action.value} attempt={self.attempt}{where}>"


class _Recorder(Middleware):
    """The outermost middleware: sees the final error and the verdict, changes nothing."""

    def __init__(self) -> None:
        self.errors: dict[int, BaseException] = {}
        self.verdicts: dict[int, Verdict] = {}
        self.waiters: dict[int, asyncio.Event] = {}

    def on_error(self, message: IncomingMessage, error: BaseException) -> None:
        self.errors[id(message)] = error

    def decided(self, message: IncomingMessage, verdict: Verdict) -> None:
        self.verdicts[id(message)] = verdict
        waiter = self.waiters.pop(id(message), None)
        if waiter is not None:
            waiter.set()


def _part_of(app: App, vhost: str | None) -> App:
    """The app of one vhost's handlers in an app of several (what one connection runs)."""
    parts = {part.vhosts[0].name: part for part in app.parts() if part.vhosts}
    if vhost is None or vhost not in parts:
        names = ", ".join(parts) or "none"
        raise AppError(
            f"HandlerHarness runs the handlers of one vhost: pass vhost= one of the vhosts with"
            f" handlers ({names})" + (f", not {vhost!r}" if vhost is not None else "")
        )
    return parts[vhost]


_Arguments = ParamSpec("_Arguments")
_Result = TypeVar("_Result")


def _takes_arguments_of(
    model: Callable[_Arguments, object],
) -> Callable[[Callable[..., _Result]], Callable[_Arguments, _Result]]:
    """Gives the decorated function ``model``'s parameters, for type checkers and ``help()``
    alike: ``deliver`` and ``deliver_async`` take what ``_message`` takes, written once."""

    def typed(function: Callable[..., _Result]) -> Callable[_Arguments, _Result]:
        own = inspect.signature(function).return_annotation
        function.__signature__ = inspect.signature(model).replace(  # type: ignore[attr-defined]
            return_annotation=own
        )
        return function

    return typed


class HandlerHarness(contextlib.AbstractContextManager["HandlerHarness"]):
    """Runs the handlers of ``app`` in memory; ``deliver`` one message, ``follow`` one along its
    retry ladder (``deliver_async``/``follow_async`` from async tests). ``metrics`` are the
    worker's counters for what was delivered. For an app of several vhosts, ``vhost`` says whose
    handlers (a worker runs them over a connection each)."""

    def __init__(self, app: App, *, vhost: str | None = None) -> None:
        if len(app.vhosts) > 1 or vhost is not None:
            app = _part_of(app, vhost)
        self.app = app
        self._worker = AsyncWorker(app)  # never connects: its core, and its dispatch for async
        self.core = self._worker.core
        self._recorder = _Recorder()
        self.core.middleware = (self._recorder, *self.core.middleware)
        self._queues = {route.queue: index for index, route in enumerate(self.core.routes)}
        self._tags = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._offset = 0.0
        self.core.switchboard.clock = lambda: time.monotonic() + self._offset

    @property
    def metrics(self) -> WorkerMetrics:
        return self.core.metrics

    def kill_switch(self, queue: str) -> SwitchState:
        """Where the kill switch of ``queue``'s handler stands."""
        switch = self.core.switches.get(queue)
        if switch is None:
            with_one = ", ".join(self.core.switches) or "none"
            raise AppError(
                f"the handler of {queue!r} has no kill switch (handlers with one: {with_one});"
                " give it kill_switch=KillSwitch(...)"
            )
        return switch.state

    def advance(self, seconds: float) -> list[Outcome]:
        """Move the kill switches' clock on by ``seconds``: a switch whose cool-down has passed
        half-opens and the messages it held are handled, as a worker handles them first when
        it consumes the queue again (one at a time: the probes), as are those a half-open
        switch let go since (``advance(0)``); their outcomes, in order."""
        self._offset += seconds
        outcomes = []
        waiting = self.core.resume_due() + self.core.switchboard.take_released()
        while waiting:
            message = waiting.pop(0)
            handle_blocking(self.core, message, self._event_loop)
            outcomes.append(self._outcome(message))
            waiting += self.core.switchboard.take_released()
        return outcomes

    def close(self) -> None:
        """Close the private event loop of coroutine handlers (if one was needed)."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the message a test describes (one signature: ``_message``'s) --------------------------

    def _message(
        self,
        queue: str,
        body: Body = b"",
        *,
        headers: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        content_type: str | None = None,
        redelivered: bool = False,
        **properties: Any,
    ) -> IncomingMessage:
        if queue not in self._queues:
            known = ", ".join(self._queues) or "none"
            raise AppError(f"the app has no handler for {queue!r} (handlers: {known})")
        consumer = self._queues[queue]
        data, ctype = encode_body(body, content_type, self.core.routes[consumer].codec)
        tag = next(self._tags)
        return IncomingMessage.build(
            data,
            queue=queue,
            consumer=consumer,
            tag=tag,
            redelivered=redelivered,
            headers=dict(headers) if headers else None,
            message_id=message_id or f"harness-{tag}",
            content_type=ctype,
            **properties,
        )

    @_takes_arguments_of(_message)
    def deliver(self, *args: Any, **kwargs: Any) -> Outcome:
        """Deliver one message to the handler of ``queue`` and settle it as ``Worker`` does
        (coroutine handlers on a private event loop: call it from a plain test).

        ``body`` is sent as a publisher would send it: bytes as they are, text as UTF-8, dicts
        and models by the handler's codec. ``headers`` are the message's own (pass an
        outcome's ``headers`` to deliver its retry), ``properties`` other AMQP properties by
        their names (``correlation_id``, ``timestamp``, ``type``...). A message without a
        ``message_id`` gets a fresh one, as from rabbitry's publisher."""
        message = self._message(*args, **kwargs)
        core = self.core
        if core.admit(message):
            handle_blocking(core, message, self._event_loop)
        return self._outcome(message)

    @_takes_arguments_of(_message)
    async def deliver_async(self, *args: Any, **kwargs: Any) -> Outcome:
        """``deliver`` for async tests: the message goes through ``AsyncWorker``'s own dispatch
        on the running loop (handlers may use the test's loop-bound resources; per-handler
        limits apply, so a rate-limited handler's message waits its turn)."""
        message = self._message(*args, **kwargs)
        settled = self._recorder.waiters[id(message)] = asyncio.Event()
        self._worker.take(message)
        if self._held(message):
            self._recorder.waiters.pop(id(message), None)
        else:
            await settled.wait()
        return self._outcome(message)

    def follow(
        self, queue: str, body: Body = b"", *, limit: int = FOLLOW_LIMIT, **options: Any
    ) -> list[Outcome]:
        """Deliver a message, then each retry the worker publishes for it (at once: delays are
        the broker's business), until it is acked, parked or rejected; every outcome, in order.
        Takes ``deliver``'s keywords."""
        outcomes = [self.deliver(queue, body, **options)]
        while (again := _retry_of(outcomes, limit, options)) is not None:
            outcomes.append(self.deliver(queue, outcomes[-1].message.body, **again))
        return outcomes

    async def follow_async(
        self, queue: str, body: Body = b"", *, limit: int = FOLLOW_LIMIT, **options: Any
    ) -> list[Outcome]:
        """``follow`` for async tests (through ``deliver_async``)."""
        outcomes = [await self.deliver_async(queue, body, **options)]
        while (again := _retry_of(outcomes, limit, options)) is not None:
            outcomes.append(await self.deliver_async(queue, outcomes[-1].message.body, **again))
        return outcomes

    def occurrence(
        self,
        job: str,
        scheduled: datetime | int | None = None,
        *,
        received: datetime | int | None = None,
        schedule: str | None = None,
        redelivered: bool = False,
        headers: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """Deliver an occurrence of the periodic job ``job`` as the worker publishes it, due
        at ``scheduled`` (an aware ``datetime`` or ms since the epoch; default: the job's
        first occurrence from now on), received at ``received`` (default: when due). The
        outcome's ``scheduled`` is the occurrence published before the ack. ``schedule``
        makes it as an older schedule (its text, ``every 5m``) would have; ``headers`` are
        added (pass a retry's headers to deliver that retry)."""
        found = self.app.periodic_jobs.get(job)
        if found is None:
            known = ", ".join(self.app.periodic_jobs) or "none"
            raise AppError(f"the app has no periodic job {job!r} (periodic jobs: {known})")
        now_ms = _ms(received)
        if scheduled is None:
            at = found.first_after(int(time.time() * 1000))
        else:
            at = Occurrence(job, _ms(scheduled) or 0, found.schedule.text)
        if schedule is not None:
            at = Occurrence(job, at.scheduled_ms, schedule)
        carrier = next(r.periodic for r in self.core.routes if r.periodic is not None)
        clock = self.core.clock
        when_ms = at.scheduled_ms if now_ms is None else now_ms
        self.core.clock = lambda: when_ms / 1000
        try:
            return self.deliver(
                carrier.queue,
                at.body(),
                headers={**at.headers, **(headers or {})},
                message_id=at.id,
                content_type="application/json",
                redelivered=redelivered,
            )
        finally:
            self.core.clock = clock

    def schedule(
        self, job: str, count: int, *, start: datetime | int | None = None
    ) -> list[Outcome]:
        """Deliver ``count`` occurrences of ``job`` one after the other, each the one the
        previous run published, from the first after ``start`` (default: now); every outcome."""
        found = self.app.periodic_jobs.get(job)
        base = _ms(start)
        first = None
        if found is not None:
            first = found.first_after(base if base is not None else int(time.time() * 1000))
        outcomes = [self.occurrence(job, first.scheduled_ms if first else None)]
        while len(outcomes) < count:
            following = outcomes[-1].scheduled
            if following is None:
                break
            outcomes.append(self.occurrence(job, following.scheduled_ms))
        return outcomes

    # -- internals ----------------------------------------------------------------------------

    def _outcome(self, message: IncomingMessage) -> Outcome:
        """The verdict reached for ``message``; its copy (retry or park), if any, is taken as
        confirmed by the broker, so the worker acks the original as after a real confirm."""
        recorder = self._recorder
        verdict = recorder.verdicts.pop(id(message), None)
        if verdict is None:
            assert self._held(message), "a delivery settles with a verdict or is held"
            verdict = Verdict(Action.HELD, reason=f"the kill switch of {message.queue} is open")
        error = recorder.errors.pop(id(message), None)
        copy = None
        scheduled = None
        core = self.core
        for delivery, entry in list(core._scheduling.items()):
            if entry.message is message:
                scheduled = entry.occurrence
                core.tracker.ack(delivery.tag, multiple=False)
        reply = None
        for delivery, replying in list(core._replies.items()):
            if replying.message is message:
                reply = Reply(
                    body=replying.body,
                    correlation_id=message.correlation_id or message.message_id or "",
                    content_type=replying.content_type,
                    message_id=delivery.message_id,
                )
                core.tracker.ack(delivery.tag, multiple=False)
        if verdict.publishes:
            tracker = self.core.tracker
            copy = next(
                d
                for d in tracker.pending()
                if d.message_id == message.message_id and d.routing_key == verdict.routing_key
            )
            tracker.ack(copy.tag, multiple=False)
        fault = None
        for delivery, (parked, event) in list(core._faults.items()):
            if parked is message:
                fault = event.body
                core.tracker.ack(delivery.tag, multiple=False)
        return Outcome(
            verdict=verdict,
            message=message,
            error=error,
            copy=copy,
            scheduled=scheduled,
            fault=fault,
            reply=reply,
        )

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _held(self, message: IncomingMessage) -> bool:
        held = self.core.switchboard.held.get(self.core.routes[message.consumer].queue, ())
        return any(m is message for m in held)


def _ms(at: datetime | int | None) -> int | None:
    if at is None or isinstance(at, int):
        return at
    return int(at.timestamp() * 1000)


def _retry_of(
    outcomes: list[Outcome], limit: int, options: dict[str, Any]
) -> dict[str, Any] | None:
    """``deliver``'s keywords for the retry of the last outcome (None: it was not retried)."""
    last = outcomes[-1]
    if not last.retried:
        return None
    if len(outcomes) >= limit:
        raise AssertionError(f"still retrying after {limit} deliveries: {last}")
    return {
        **options,
        "headers": last.headers,
        "message_id": last.message.message_id,
        "content_type": last.message.content_type,
    }
