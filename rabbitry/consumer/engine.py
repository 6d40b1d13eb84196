"""What ``AsyncWorker`` and ``Worker`` share: from a delivery to frames on the wire.

``WorkerCore`` owns the connection's protocol session, the confirm tracker of the worker's own
publishes, the ack tracker of the deliveries, the stores and the counters. A shell feeds it
bytes, runs handlers, tells it how each ended (``conclude``), and writes what ``take_output``
returns. ``conclude`` is hooks -> verdict -> ack or republish: the built-in middleware
(``builtins``: counters, time limit, idempotency, tracing) and the app's own run their hooks,
``decision`` gives the verdict, and the core acks or hands the copy to its ``outbox``. Beside
it: ``scheduling`` (the periodic jobs' publishes), ``stream_offsets`` (where stream consumers
stand), ``failure_log`` (the lines of failures). The rule it keeps: a message is acked only
after whatever replaces it (a retry, a parked copy) is confirmed by the broker; a crash in
between gives a duplicate, never a loss. Delivery tags of an older channel are never acked
(the broker already requeued those messages).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rabbitry.amqp import tracing
from rabbitry.amqp.acks import AckTracker
from rabbitry.amqp.confirms import ConfirmTracker, Delivery
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.reconnect import NodeWalk
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.app import App, Route
from rabbitry.consumer.builtins import Hooks, builtins
from rabbitry.consumer.decision import (
    ACK,
    Action,
    Verdict,
    after_failure,
    after_stream_failure,
)
from rabbitry.consumer.failure_log import failure_text, log_failure, log_fields
from rabbitry.consumer.immediate import next_pause
from rabbitry.consumer.limits import Gate
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.middleware import run_after, run_before, run_decided
from rabbitry.consumer.outbox import Outbox, Replying
from rabbitry.consumer.preflight import Need, StartCheck, topology_lost
from rabbitry.consumer.replies import REPLY_TO_FLAG, build_reply
from rabbitry.consumer.scheduling import RESEED_EVERY_S, Scheduling
from rabbitry.consumer.session import ConsumerSession, Subscription
from rabbitry.consumer.stream_offsets import StreamOffsets
from rabbitry.consumer.switchboard import Switchboard
from rabbitry.consumer.worker_options import (
    DEFAULT_PREFETCH,
    AsyncWorkerKeywords,
    WorkerOptions,
    vhost_parts,
    worker_settings,
)
from rabbitry.errors import InvalidReply, TopologyLost

logger = logging.getLogger("rabbitry.worker")

# the worker options were first defined here; tests and shells still import these from here
__all__ = ["WorkerCore", "WorkerOptions", "vhost_parts", "worker_core", "worker_settings"]


def worker_core(
    app: App, url: str | ConnectionSettings | None, keywords: AsyncWorkerKeywords
) -> WorkerCore:
    """The core of a worker built from the keywords its shell was given."""
    settings = worker_settings(app, url, keywords)
    options = WorkerOptions(
        prefetch=keywords.get("prefetch", DEFAULT_PREFETCH),
        concurrency=keywords.get("concurrency", 1),
        ack_every=keywords.get("ack_every", 0),
        shutdown_timeout=keywords.get("shutdown_timeout", 30.0),
    )
    return WorkerCore(app, settings, options)


class WorkerCore:
    def __init__(self, app: App, settings: ConnectionSettings, options: WorkerOptions) -> None:
        if not app.routes:
            raise ValueError("the app has no handlers: add one with @app.handler(queue)")
        self.app = app
        self.settings = settings
        self.walk = NodeWalk(settings)
        """Which of the cluster's nodes (one or more) the next connect goes to."""
        self.options = options
        self.routes: list[Route] = [r for r in app.routes.values() for _ in range(r.consumers)]
        """By consumer index: a route with several consumers (plugin shards) has several."""
        self.subscriptions = [Subscription(r.queue, dict(r.consume_arguments)) for r in self.routes]
        self.tracker = ConfirmTracker(on_settle=self._settled)
        self.builder = MessageBuilder(timestamps=False)
        self.streams = StreamOffsets(self.routes, self.builder, batch=options.ack_batch)
        """Where the stream consumers stand (``stream_offsets``)."""
        self._positions = self.streams.positions
        self._offsets = self.streams.offsets
        self.acks = AckTracker(batch=options.ack_batch)
        self.metrics = WorkerMetrics(vhost=settings.vhost)
        self.session: ConsumerSession | None = None
        self.generation = 0
        self.outbox = Outbox(self)
        """Retry and parked copies, fault events and replies waiting for confirms (``outbox``)."""
        self._faults = self.outbox.faults
        self._replies = self.outbox.replies
        self.middleware = tuple(app.middleware)
        """The app's own middleware, outermost first."""
        self.builtins = builtins(app, self.metrics)
        """The built-in middleware (``builtins``): counters, time limit, idempotency, tracing."""
        self.hooks = [Hooks.of(self.builtins, route, span=False) for route in self.routes]
        """The built-ins' hooks by consumer index, for a delivery without a span..."""
        self.spanned = [Hooks.of(self.builtins, route, span=True) for route in self.routes]
        """... and for one with a span (tracing on)."""
        self.scheduling = Scheduling(self)
        """The periodic jobs' publishes (``scheduling``)."""
        self.periodic = self.scheduling.carriers
        self._scheduling = self.scheduling.publishing
        self._holds: dict[IncomingMessage, int] = {}
        """Messages whose ack waits for more than their handler (an occurrence's next one)."""
        self.clock = time.time
        """Wall-clock seconds: when occurrences are due (tests replace it)."""
        self.start_check = StartCheck(self.routes, app.spec_file)
        """What the broker must hold before the first consumer starts (``preflight``)."""
        self.on_started: list[Callable[[], None]] = []
        """Called each time a connection consumes (the process pool learns its child is up)."""
        self.lost: TopologyLost | None = None
        """A retry tier, parking lot or delay the worker published into went away while it
        ran: the shells stop consuming and raise it once they shut down (``_gone``)."""
        self.switchboard = Switchboard(self.routes, self.metrics)
        """The kill switches of the handlers that have one (``switchboard``)."""
        self.switches = self.switchboard.switches
        self._returning = self.switchboard.returning

    # -- the connection ---------------------------------------------------------------------------

    def new_session(self, *, stopping: bool = False) -> ConsumerSession:
        if not self.streams.read and not stopping:
            # first: a broker out of reach leaves nothing half done
            self.streams.read_stored(self.walk.current)
        resend = self.tracker.take_unsettled()
        if not stopping:
            resend.extend(self.scheduling.seeds())
            self.scheduling.next_seed = time.monotonic() + RESEED_EVERY_S
        if self._positions:
            self.streams.resume(self.subscriptions)
        session = ConsumerSession(
            self.walk.current,
            self.tracker,
            self.builder,
            subscriptions=self.subscriptions,
            prefetch=self.options.prefetch,
            resend=resend,
            generation=self.generation,
            start_check=self.start_check,
        )
        session.stopping = stopping
        if self.switches:
            session.paused = self.switchboard.paused_consumers()
        self.session = session
        return session

    def sync_generation(self) -> None:
        """Forget the delivery tags of a channel that is gone (the broker requeued them)."""
        session = self.session
        if session is not None and session.generation != self.generation:
            self.generation = session.generation
            self.acks.forget()

    def connection_lost(self) -> None:
        self.acks.forget()
        if self.switches:
            self.switchboard.forget()  # the broker requeued them with the channel
        self._holds.clear()  # their messages go back to the queue with the channel
        self.generation += 1
        self.session = None

    def gates(self) -> dict[int, Gate[IncomingMessage]]:
        """A fresh ``Gate`` per limited handler, by consumer index (each shell holds its own)."""
        now = time.monotonic()
        return {
            index: Gate(route.limits, now)
            for index, route in enumerate(self.routes)
            if route.limits is not None
        }

    def route_of(self, message: IncomingMessage) -> Route:
        return self.routes[message.consumer]

    # -- messages -------------------------------------------------------------------------------

    def admit(self, message: IncomingMessage) -> bool:
        """Count a new delivery; False when it was settled without its handler."""
        if self._returning and message in self._returning:
            self._returning.discard(message)
            return True  # held by a kill switch: counted and admitted when it first came
        self.acks.received(message.tag)
        if (
            self._positions
            and message.consumer in self._positions
            and not self.streams.take(message)
        ):
            self.acks.done(message.tag)
            return False
        route = self.routes[message.consumer]
        self.metrics.queues[route.queue].received += 1  # inline, as builtins.metrics says
        hooks = self.hooks[message.consumer]
        for received in hooks.received:
            received(message, route)
        if route.periodic is not None:
            return self.scheduling.admit(message, route, route.periodic)
        if message.span is not None:
            hooks = self.spanned[message.consumer]
        for screen in hooks.screen:
            verdict = screen(message, route)
            if verdict is not None:
                self._skip(message, verdict)
                return False
        return True

    def _skip(self, message: IncomingMessage, verdict: Verdict) -> None:
        """Settle a delivery whose handler does not run (its ack may wait for a publish)."""
        hooks = self.hooks if message.span is None else self.spanned
        for skipped in hooks[message.consumer].skipped:
            skipped(message, verdict)
        if self.middleware:
            run_decided(self.middleware, message, verdict)
        self._ack(message)

    def reseed(self, now: float) -> None:
        """Publish the periodic jobs' seeds again when ``RESEED_EVERY_S`` passed (``now``:
        monotonic); the shells call it on their tick."""
        self.scheduling.reseed(now)

    # -- handlers ---------------------------------------------------------------------------------

    def enter(self, message: IncomingMessage) -> object | None:
        """Make the delivery's span current while its handler runs (None: no tracing)."""
        return tracing.activate(message.span) if message.span is not None else None

    def leave(self, token: object | None) -> None:
        if token is not None:
            tracing.deactivate(token)

    def before(self, message: IncomingMessage) -> bool:
        """Run the middlewares' ``before`` hooks (the span already current); False when one
        raised: the message is then concluded as failed and its handler must not run."""
        entered, error = run_before(self.middleware, message)
        if error is None:
            return True
        self.conclude(message, error, 0.0, entered=entered)
        return False

    def conclude(
        self,
        message: IncomingMessage,
        error: BaseException | None,
        elapsed: float,
        *,
        entered: int | None = None,
        result: Any = None,
    ) -> Verdict:
        """Act on how the handler ended: the hooks, then the verdict, then the ack or the
        publish that replaces the message (a retry or parked copy, whose confirm acks it).
        A delivery that names a ``reply_to`` gets the handler's ``result`` as its reply first.

        The built-ins' ``ended`` hooks (``builtins``: the time limit) run first,
        then the ``after``/``on_error`` hooks of the ``entered`` middlewares (all of them unless
        a ``before`` hook failed), which may change the error; the verdict follows."""
        route = self.routes[message.consumer]
        self.metrics.queues[route.queue].observe(elapsed)  # inline, as builtins.metrics says
        hooks = (self.hooks if message.span is None else self.spanned)[message.consumer]
        for ended in hooks.ended:
            error = ended(message, route, error, elapsed)
        reply = None
        if error is None and message._flags & REPLY_TO_FLAG and message.reply_to:
            try:
                reply = Replying(message, *build_reply(self.builder, message, result, route.codec))
            except InvalidReply as exc:
                error = exc
        chain = self.middleware
        if chain:
            error = run_after(chain, len(chain) if entered is None else entered, message, error)
        if self.switches:
            self.switchboard.record(route.queue, error is not None, self.session)
        if error is None:
            for succeeded in hooks.succeeded:
                succeeded(message, route)
            if chain:
                run_decided(chain, message, ACK)
            if reply is not None:
                # The reply first, the ack once the broker confirmed it: a crash in between
                # redelivers the request and gives a duplicate reply, never a lost one (the
                # requester drops a reply whose correlation id no longer waits).
                self.outbox.reply(reply)
            else:
                self._ack(message)
            return ACK
        verdict = self._verdict(message, route, error)
        self._act(message, verdict, error)
        return verdict

    def _verdict(self, message: IncomingMessage, route: Route, error: BaseException) -> Verdict:
        """The verdict on a failure (``decision``), logged unless a publish must happen first,
        as the built-ins' ``failed`` hooks leave it; the app's ``decided`` hooks see it."""
        if route.stream:
            verdict = after_stream_failure(route.queue, self._offsets.get(message), error)
        else:
            verdict = after_failure(
                route.retry, route.queue, message.headers, error, now_ms=int(time.time() * 1000)
            )
        if not verdict.publishes:  # a retry or a parking is logged once the broker stored it
            log_failure(message, route, verdict, failure_text(error))
        hooks = self.hooks if message.span is None else self.spanned
        for failed in hooks[message.consumer].failed:
            verdict = failed(message, route, error, verdict)
        if verdict.action is Action.PARK and verdict.publishes:
            verdict = self.outbox.parked_copy(message, route, verdict, error)
        if self.middleware:
            run_decided(self.middleware, message, verdict)
        return verdict

    def _act(self, message: IncomingMessage, verdict: Verdict, error: BaseException) -> None:
        """Do what a failure's ``verdict`` says: ack a stream's skipped delivery, reject, hand
        it back to the broker (``via: broker``), or publish its retry or parked copy."""
        action = verdict.action
        if action is Action.SKIPPED:
            self._ack(message)  # a stream's: the ack only returns credit
        elif action is Action.REJECT:
            self.metrics.queues[message.queue].rejected += 1
            if self._holds:
                self._holds.pop(message, None)
            if message.generation == self.generation:
                self.acks.reject(message.tag, requeue=False)
        elif verdict.requeue is not None:
            self._return_failed(message, verdict, verdict.requeue)
        else:
            self.outbox.republish(message, verdict, failure_text(error))

    def immediate_pause(
        self, message: IncomingMessage, error: BaseException, calls: int
    ) -> float | None:
        """Seconds before the handler is called again in process after its ``calls``-th call
        failed (``immediate``), None when the failure goes on to its verdict."""
        route = self.routes[message.consumer]
        pause = next_pause(route, error, calls)
        if pause is not None:
            self.metrics.queues[route.queue].immediate_retries += 1
            logger.info(
                "handler of %s failed on message %s (call %d): %s; calling it again in %d ms",
                route.queue,
                message.message_id,
                calls,
                failure_text(error),
                round(pause * 1000),
                extra={**log_fields(message, route.queue), "action": "call-again"},
            )
        return pause

    def _return_failed(self, message: IncomingMessage, verdict: Verdict, requeue: bool) -> None:
        """Leave a ``via: broker`` verdict to the broker: a failed delivery it retries after
        its delay or dead-letters (past the delivery limit, or at once without requeue)."""
        counters = self.metrics.queues[message.queue]
        if verdict.action is Action.RETRY:
            counters.retried[verdict.tier_label] += 1
        else:
            counters.parked += 1
        if self._holds:
            self._holds.pop(message, None)
        if message.generation == self.generation:
            self.acks.fail(message.tag, requeue)

    def requeue(self, message: IncomingMessage) -> None:
        """Give a message back to the queue (shutdown, or its replacement could not be stored)."""
        self.metrics.queues[message.queue].requeued += 1
        if self._holds:
            self._holds.pop(message, None)
        hooks = self.hooks if message.span is None else self.spanned
        for requeued in hooks[message.consumer].requeued:
            requeued(message)
        if message.generation == self.generation and self.session is not None:
            self.acks.reject(message.tag, requeue=True)

    def _ack(self, message: IncomingMessage) -> None:
        holds = self._holds
        if holds and message in holds:
            left = holds.pop(message) - 1
            if left:
                holds[message] = left
                return
        if message.generation == self.generation:
            self.acks.done(message.tag)
            self.metrics.queues[message.queue].acked += 1
            if self._offsets:
                self.streams.handled(message)

    def _send(self, delivery: Delivery) -> None:
        session = self.session
        if session is not None and session.ready:
            session.publish(delivery)
        else:
            # sent on the next connection with whatever else is unconfirmed
            self.tracker.add(delivery)

    def _settled(self, delivery: Delivery) -> None:
        if self.outbox.settled(delivery):
            return
        if self.streams.recording and self.streams.settled(delivery):
            return
        scheduled = self._scheduling.pop(delivery, None) if self._scheduling else None
        if scheduled is not None:
            self.scheduling.settled(delivery, scheduled)

    def _stop_for(self, need: Need, queue: str, held: str) -> TopologyLost:
        """Note that ``need`` went away (the first one is what the worker stops with)."""
        broker = self.settings.display.rsplit("/", 1)[0]  # the vhost is named apart
        where = f"vhost {self.settings.vhost!r} on {broker}"
        lost = topology_lost([need], where, self.app.spec_file, queue, held)
        if self.lost is None:
            self.lost = lost
        return lost

    def take_lost(self) -> TopologyLost | None:
        """What the worker stopped for (None: nothing went away); the next run checks the
        broker again before it consumes."""
        lost, self.lost = self.lost, None
        if lost is not None:
            self.start_check.passed = False
        return lost

    # -- output -----------------------------------------------------------------------------------

    @property
    def publishing(self) -> int:
        return len(self.outbox) + len(self._scheduling) + len(self.streams.recording)

    def take_output(self, flush: bool = False) -> bytes:
        """Ack/nack frames due now, then whatever the session queued."""
        session = self.session
        if session is None:
            return b""
        if self.switches and session.ready:
            self._settle_switches(session)
        acks = self.acks
        if session.ready and (flush or acks._since or acks._singles):
            frames = acks.take_frames(flush)
            if frames:
                session.out += frames
        if self.streams.tracked and session.ready:
            self.streams.record(session, flush or session.stopping)
        if not session.out:
            return b""
        return session.take_output()

    # -- kill switches ----------------------------------------------------------------------------

    def hold(self, message: IncomingMessage) -> bool:
        """True when the message's queue is paused by its kill switch: its handler must not
        run; the delivery waits, unacked, to be handled first when the switch half-opens."""
        return self.switchboard.hold(message)

    def resume_due(self) -> list[IncomingMessage]:
        """Half-open the kill switches whose cool-down has passed and consume their queues
        again; the deliveries that waited for them, oldest first."""
        released = self.switchboard.resume_due(self.session)
        return [m for m in released if m.generation == self.generation]

    def _settle_switches(self, session: ConsumerSession) -> None:
        """Return what the switches held too long (or all of it at shutdown); consume the
        queues whose cool-down has passed, their held deliveries first."""
        board = self.switchboard
        for message in board.take_all() if session.stopping else board.overdue():
            self.requeue(message)
        if session.stopping:
            returning = self._returning
            if returning:  # handed back, not handled: returned, counted once
                for message in [m for m in session.inbox if m in returning]:
                    self.requeue(message)
                session.inbox = [m for m in session.inbox if m not in returning]
                returning.clear()
            return
        released = self.resume_due()
        if board.released:
            released += [m for m in board.take_released() if m.generation == self.generation]
        if released:
            # the shells read the inbox when the broker answers (basic.consume-ok at the latest)
            self._returning.update(released)
            session.inbox[:0] = released
