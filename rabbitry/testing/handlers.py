"""Handler tests without a broker: run an ``App``'s handlers on messages you give, and see what
the worker would do with each (acked, retried at which tier and delay, parked and why).

``HandlerHarness`` drives the worker's own core (``rabbitry.consumer.engine.WorkerCore``) the
way the blocking ``Worker`` does, through the same function (``handle_blocking``): admission
(duplicates, cancellations), the middlewares, the typed body, the handler, the pure retry
decision, the republished copy and its ack. Only the socket is missing: the copies the worker
publishes are taken as confirmed. So an outcome here is the outcome on a broker, by
construction; the broker fixtures of ``rabbitry.testing.plugin`` stay for integration tests.

    harness = HandlerHarness(app)
    outcome = harness.deliver("orders.work", {"id": 7, "amount": 12})
    assert outcome.acked
    assert harness.deliver("orders.work", {"id": "x"}).parked

Coroutine handlers run on a private event loop, as in ``Worker``: call ``deliver`` from a
plain (not ``async``) test.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.message import Body, encode_body
from rabbitry.consumer.app import App, AppError, Route
from rabbitry.consumer.decision import Action, Verdict
from rabbitry.consumer.engine import worker_core
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.middleware import Middleware
from rabbitry.consumer.sync import handle_blocking

FOLLOW_LIMIT = 100
"""``follow`` stops after this many deliveries of one message (a ladder that never ends)."""


@dataclass(frozen=True)
class Outcome:
    """What the worker did with one delivery: the ``verdict`` (``Action`` and where a copy
    went), the ``error`` the handler ended with (after the middlewares), the ``message`` as
    the handler saw it, and the ``copy`` the worker published for a retry or a park."""

    verdict: Verdict
    message: IncomingMessage
    error: BaseException | None = None
    copy: Delivery | None = None

    @property
    def action(self) -> Action:
        return self.verdict.action

    @property
    def acked(self) -> bool:
        """The handler succeeded and the message was acked."""
        return self.verdict.action is Action.ACK

    @property
    def retried(self) -> bool:
        return self.verdict.action is Action.RETRY

    @property
    def parked(self) -> bool:
        return self.verdict.action is Action.PARK

    @property
    def rejected(self) -> bool:
        """No retry set-up: rejected, the broker dead-letters it by the queue's arguments."""
        return self.verdict.action is Action.REJECT

    @property
    def skipped(self) -> bool:
        """Acked without running the handler (a duplicate, a cancelled job, a cancel order)."""
        return self.verdict.action in (Action.DUPLICATE, Action.CANCELLED, Action.CANCEL_NOTED)

    @property
    def attempt(self) -> int:
        """The delivery's attempt number (1 for a first delivery)."""
        return self.message.attempt

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
        """Where the copy went: the tier queue, the delay-level key, or the parking lot."""
        return self.verdict.routing_key

    @property
    def headers(self) -> Mapping[str, Any]:
        """The copy's headers (``x-rabbitry-attempt``, ``-last-error``, ``-parked-reason``...)."""
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
        self.error: BaseException | None = None
        self.verdict: Verdict | None = None

    def on_error(self, message: IncomingMessage, error: BaseException) -> None:
        self.error = error

    def decided(self, message: IncomingMessage, verdict: Verdict) -> None:
        self.verdict = verdict


class HandlerHarness:
    """Runs the handlers of ``app`` in memory; ``deliver`` one message, ``follow`` one along its
    retry ladder. ``metrics`` are the worker's counters for what was delivered."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.core = worker_core(app, None, {"concurrency": 1})
        self._recorder = _Recorder()
        self.core.middleware = (self._recorder, *self.core.middleware)
        self._queues = {route.queue: index for index, route in enumerate(self.core.routes)}
        self._tags = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def metrics(self) -> WorkerMetrics:
        return self.core.metrics

    def close(self) -> None:
        """Close the private event loop of coroutine handlers (if one was needed)."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __enter__(self) -> HandlerHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def deliver(
        self,
        queue: str,
        body: Body = b"",
        *,
        headers: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        content_type: str | None = None,
        redelivered: bool = False,
        **properties: Any,
    ) -> Outcome:
        """Deliver one message to the handler of ``queue`` and settle it as the worker does.

        ``body`` is sent as a publisher would send it: bytes as they are, text as UTF-8, dicts
        and models by the handler's codec. ``headers`` are the message's own (pass an
        outcome's ``headers`` to deliver its retry), ``properties`` other AMQP properties by
        their names (``correlation_id``, ``timestamp``, ``type``...). A message without a
        ``message_id`` gets a fresh one, as from rabbitry's publisher."""
        route = self._route(queue)
        data, ctype = encode_body(body, content_type, route.codec)
        tag = next(self._tags)
        message = IncomingMessage.build(
            data,
            queue=queue,
            consumer=self._queues[queue],
            tag=tag,
            redelivered=redelivered,
            headers=dict(headers) if headers else None,
            message_id=message_id or f"harness-{tag}",
            content_type=ctype,
            **properties,
        )
        recorder = self._recorder
        recorder.error = recorder.verdict = None
        core = self.core
        if core.admit(message):
            handle_blocking(core, message, self._event_loop)
        copy = self._confirm_copies()
        verdict = recorder.verdict
        assert verdict is not None, "every delivery reaches a verdict"
        return Outcome(verdict=verdict, message=message, error=recorder.error, copy=copy)

    def follow(
        self, queue: str, body: Body = b"", *, limit: int = FOLLOW_LIMIT, **options: Any
    ) -> list[Outcome]:
        """Deliver a message, then each retry the worker publishes for it (at once: delays are
        the broker's business), until it is acked, parked or rejected; every outcome, in order.
        Takes ``deliver``'s keywords."""
        outcomes = [self.deliver(queue, body, **options)]
        while outcomes[-1].retried:
            if len(outcomes) >= limit:
                raise AssertionError(f"still retrying after {limit} deliveries: {outcomes[-1]}")
            last = outcomes[-1]
            options = {
                **options,
                "headers": last.headers,
                "message_id": last.message.message_id,
                "content_type": last.message.content_type,
            }
            outcomes.append(self.deliver(queue, last.message.body, **options))
        return outcomes

    # -- internals ----------------------------------------------------------------------------

    def _route(self, queue: str) -> Route:
        if queue not in self._queues:
            known = ", ".join(self._queues) or "none"
            raise AppError(f"the app has no handler for {queue!r} (handlers: {known})")
        return self.core.routes[self._queues[queue]]

    def _confirm_copies(self) -> Delivery | None:
        """Take the worker's retry or park publish as confirmed by the broker (then the worker
        acks the original, as after a real confirm); the copy published, if any."""
        tracker = self.core.tracker
        pending = tracker.pending()
        if not pending:
            return None
        tracker.ack(tracker.next_tag - 1, multiple=True)
        return pending[-1]

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop
