"""What ``AsyncWorker`` and ``Worker`` share: from a delivery to frames on the wire.

``WorkerCore`` owns the connection's protocol session, the confirm tracker of the worker's own
publishes (retries, parking), the ack tracker of the deliveries, the stores and the counters.
A shell feeds it bytes, runs handlers, tells it how each ended (``conclude``), and writes what
``take_output`` returns. The rule it keeps: a message is acked only after whatever replaces it
(a retry, a parked copy) is confirmed by the broker; a crash in between gives a duplicate,
never a loss. Delivery tags of an older channel are never acked (the broker already requeued
those messages).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from rabbitry.amqp import tracing
from rabbitry.amqp.confirms import ConfirmTracker, Delivery, Status
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.reconnect import NodeWalk
from rabbitry.amqp.settings import Backoff, ConnectionSettings, NodeOrder, settings_for_vhost
from rabbitry.consumer.acks import AckTracker
from rabbitry.consumer.app import STREAM_OFFSET_ARGUMENT, App, Route
from rabbitry.consumer.decision import (
    ACK,
    Action,
    HandlerTimeout,
    Verdict,
    after_failure,
    after_stream_failure,
    before_handler,
    cancel_target,
)
from rabbitry.consumer.faults import FAULT_TYPE, FaultEvent, fault_event
from rabbitry.consumer.immediate import next_pause
from rabbitry.consumer.limits import Gate
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.middleware import run_after, run_before, run_decided
from rabbitry.consumer.parked_copy import with_extras
from rabbitry.consumer.periodic import (
    Occurrence,
    PeriodicQueue,
    Step,
    plan_occurrence,
    read_occurrence,
)
from rabbitry.consumer.positions import StreamPosition
from rabbitry.consumer.preflight import Need, StartCheck, TopologyLost, lost_need
from rabbitry.consumer.replies import REPLY_TO_FLAG, InvalidReply, build_reply
from rabbitry.consumer.session import ConsumerSession, Subscription
from rabbitry.consumer.switchboard import Switchboard
from rabbitry.consumer.tracking import RecordSchedule, record_body, tracking_stream
from rabbitry.uri import mask_text

logger = logging.getLogger("rabbitry.worker")

DEFAULT_PREFETCH = 300
_KEPT_PROPERTIES = (
    "content_type",
    "content_encoding",
    "correlation_id",
    "reply_to",
    "priority",
)


def header_frame_size(frames: bytes) -> int:
    """Bytes of the content header frame in a publish's ``frames`` (method frame first): what
    must fit the negotiated ``frame_max``."""
    method_size = int.from_bytes(frames[3:7], "big")
    start = 7 + method_size + 1
    return 7 + int.from_bytes(frames[start + 3 : start + 7], "big") + 1


def failure_text(error: BaseException) -> str:
    """How a handler failed, as log lines give it (secrets in URLs masked)."""
    return f"{type(error).__name__}: {mask_text(str(error))}"


def worker_settings(
    app: App,
    url: str | ConnectionSettings | None,
    keywords: WorkerKeywords,
    vhost: str | None = None,
) -> ConnectionSettings:
    """Connection settings of a worker: given ones, or from the URL (or a cluster's URLs), the
    app's, or localhost; several URLs are walked in ``node_order``, else the spec's. The vhost
    is ``vhost``, else the app's one vhost, by the rule of every client
    (``settings_for_vhost``: a URL naming another vhost is an error).

    Workers reconnect for as long as they run, so their back-off never gives up by default.
    """
    names = app.vhost_names
    return settings_for_vhost(
        url or app.url,
        vhost or (names[0] if len(names) == 1 else None),
        heartbeat=keywords.get("heartbeat"),
        connection_name=keywords.get("connection_name") or "rabbitry worker",
        backoff=keywords.get("backoff") or Backoff(give_up_after=None),
        node_order=keywords.get("node_order") or app.node_order,
    )


class WorkerKeywords(TypedDict, total=False):
    """What ``Worker`` and ``AsyncWorker`` take besides the app and the URL."""

    prefetch: int
    """Unacked deliveries the broker may have outstanding (default 300)."""
    ack_every: int
    """Send a multiple ack after this many finished messages (0: half the prefetch)."""
    shutdown_timeout: float
    """How long in-flight handlers may still run at shutdown (default 30 s)."""
    heartbeat: int | None
    connection_name: str | None
    backoff: Backoff | None
    """Reconnect timing; workers never give up by default."""
    node_order: NodeOrder | str | None
    """How several URLs (a cluster's nodes) are walked: shuffled (default) or in order."""


class AsyncWorkerKeywords(WorkerKeywords, total=False):
    concurrency: int
    """Async handlers running at once (default 64)."""


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


def vhost_parts(
    app: App, url: str | ConnectionSettings | None, keywords: AsyncWorkerKeywords
) -> list[tuple[App, ConnectionSettings]]:
    """For an app of several vhosts: one part app per vhost with handlers, each with its
    connection settings (the worker's, pointed at that vhost); empty for an app of one.

    AMQP binds a connection to one vhost, so a worker of several opens one per vhost."""
    if len(app.vhost_names) <= 1:
        return []
    parts = app.parts()
    if not parts:
        raise ValueError("the app has no handlers: add one with @app.handler(queue)")
    out: list[tuple[App, ConnectionSettings]] = []
    for part in parts:
        assert part.vhost is not None
        name = part.vhost.name
        settings = worker_settings(app, url, keywords, name)
        named = f"{settings.connection_name or 'rabbitry worker'} ({name})"
        out.append((part, replace(settings, connection_name=named)))
    return out


def combined_metrics(parts: list[tuple[str, WorkerMetrics]]) -> WorkerMetrics:
    """The counters of the workers of several vhosts in one view, keyed ``vhost/queue`` (the
    keys of the app's routes); the counters themselves stay the parts'."""
    view = WorkerMetrics(live=False)
    for vhost, metrics in parts:
        view.reconnects += metrics.reconnects
        for queue, counters in metrics.queues.items():
            view.queues[f"{vhost}/{queue}"] = counters
    return view


@dataclass(frozen=True)
class WorkerOptions:
    """Tuning shared by both workers."""

    prefetch: int = DEFAULT_PREFETCH
    """Unacked deliveries the broker may have outstanding on this connection."""
    concurrency: int = 64
    """Async handlers running at once (the async worker; sync handlers run one at a time)."""
    ack_every: int = 0
    """Send a multiple ack after this many finished messages (0: half the prefetch)."""
    shutdown_timeout: float = 30.0
    """Graceful shutdown: how long in-flight handlers may still run before their messages
    are returned to the queue."""

    def __post_init__(self) -> None:
        if not 1 <= self.prefetch <= 65535:
            raise ValueError(f"prefetch must be between 1 and 65535, got {self.prefetch}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.ack_every < 0:
            raise ValueError("ack_every must not be negative")

    @property
    def ack_batch(self) -> int:
        return self.ack_every or max(1, self.prefetch // 2)


class _Pending:
    """A worker publish (retry or park) waiting for its confirm before the ack and the log
    line that says it happened."""

    __slots__ = ("failure", "message", "verdict")

    def __init__(self, message: IncomingMessage, verdict: Verdict, failure: str) -> None:
        self.message = message
        self.verdict = verdict
        self.failure = failure
        """How the handler failed, as the log line gives it."""


class _Scheduled:
    """An occurrence the worker publishes in place of ``message``: the next one of a run, or
    one that re-delays or replaces it; ``message`` is held until it is confirmed."""

    __slots__ = ("carrier", "message", "occurrence", "ran", "tries")

    def __init__(
        self,
        message: IncomingMessage,
        occurrence: Occurrence,
        carrier: PeriodicQueue,
        ran: bool,
    ) -> None:
        self.message = message
        self.occurrence = occurrence
        self.carrier = carrier
        self.ran = ran
        """The message's job runs (its id is claimed): giving up acks it, else requeues it."""
        self.tries = 1


class _Replying:
    """A reply waiting for its confirm before its request's ack."""

    __slots__ = ("body", "content_type", "delivery", "message")

    def __init__(
        self, message: IncomingMessage, delivery: Delivery, body: bytes, content_type: str | None
    ) -> None:
        self.message = message
        self.delivery = delivery
        self.body = body
        self.content_type = content_type


_SCHEDULE_TRIES = 3
RESEED_EVERY_S = 600.0
"""How often a running worker seeds its periodic jobs again (besides when it connects): a
chain that ended (its occurrence dropped by a worker that lacked the job during a deploy, a
purged queue) starts again within this time."""
"""Publishes of a next occurrence the broker refuses before the worker gives up on it."""
_SKIPPED = {
    Step.DUPLICATE: Action.DUPLICATE,
    Step.EARLY: Action.RESCHEDULED,
    Step.RESCHEDULED: Action.RESCHEDULED,
    Step.UNKNOWN: Action.DROPPED,
}


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
        self._positions = {
            index: StreamPosition(route.consume_arguments.get(STREAM_OFFSET_ARGUMENT))
            for index, route in enumerate(self.routes)
            if route.stream
        }
        """Stream consumers by index: where each subscribes again after a reconnect."""
        self._tracked = {
            index: tracking_stream(route.queue, route.track)
            for index, route in enumerate(self.routes)
            if route.stream and route.track
        }
        """Stream consumers whose position is kept on the broker, with the stream keeping it."""
        self._records = RecordSchedule(batch=options.ack_batch)
        self._recording: dict[Delivery, int] = {}
        self._positions_read = not self._tracked
        for route in self.routes:
            if route.stream and not route.track:
                logger.info(
                    "stream %s: its position is kept in this process only; a new process starts"
                    " at offset=%s again (give the handler track=NAME to keep it on the broker)",
                    route.queue,
                    route.consume_arguments.get(STREAM_OFFSET_ARGUMENT, "next"),
                )
        self._offsets: dict[IncomingMessage, int] = {}
        """Stream deliveries not yet settled, with their offsets."""
        self.tracker = ConfirmTracker(on_settle=self._settled)
        self.builder = MessageBuilder(timestamps=False)
        self.acks = AckTracker(batch=options.ack_batch)
        self.metrics = WorkerMetrics()
        self.session: ConsumerSession | None = None
        self.generation = 0
        self._pending: dict[Delivery, _Pending] = {}
        self._faults: dict[Delivery, tuple[IncomingMessage, FaultEvent]] = {}
        """Fault events sent for parked messages, each holding its message's ack."""
        self._replies: dict[Delivery, _Replying] = {}
        """Replies to requests, each holding its request's ack until it is confirmed."""
        self._needs_idempotency = any(r.idempotent for r in self.routes)
        self._needs_headers = app.cancellation is not None
        self.middleware = tuple(app.middleware)
        self.periodic = [r.periodic for r in self.routes if r.periodic is not None]
        self._scheduling: dict[Delivery, _Scheduled] = {}
        self._holds: dict[IncomingMessage, int] = {}
        """Messages whose ack waits for more than their handler (an occurrence's next one)."""
        self.clock = time.time
        """Wall-clock seconds: when occurrences are due (tests replace it)."""
        self._next_seed = 0.0
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
        if not self._positions_read and not stopping:
            self._read_positions()  # first: a broker out of reach leaves nothing half done
        resend = self.tracker.take_unsettled()
        if not stopping:
            resend.extend(self._seeds())
            self._next_seed = time.monotonic() + RESEED_EVERY_S
        if self._positions:
            self._offsets.clear()
            self._resume_streams()
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

    def _resume_streams(self) -> None:
        """Subscribe each stream consumer where it left off (its offset, at first)."""
        for index, position in self._positions.items():
            offset = position.resume()
            if offset is None:
                continue
            sub = self.subscriptions[index]
            self.subscriptions[index] = Subscription(
                sub.queue, {**sub.arguments, STREAM_OFFSET_ARGUMENT: offset}
            )

    def _read_positions(self) -> None:
        """Start each tracked stream consumer at its stored position (once, at the first
        connect); a broker out of reach is a lost connection (the shells try again)."""
        from rabbitry.consumer.streams import StreamUnreachable
        from rabbitry.consumer.tracking import stored_positions

        try:
            stored = stored_positions(self.walk.current, self._tracked)
        except StreamUnreachable as exc:
            raise ConnectionError(str(exc)) from None
        for index, offset in stored.items():
            route = self.routes[index]
            if offset is None:
                logger.info(
                    "stream %s: no stored position for reader %r; starting at offset=%s",
                    route.queue,
                    route.track,
                    self._positions[index].start,
                )
                continue
            logger.info(
                "stream %s: reader %r resumes at offset %d", route.queue, route.track, offset
            )
            self._positions[index] = StreamPosition(offset)
            self._records.known(index, offset)
        self._positions_read = True

    def _record_positions(self, session: ConsumerSession, force: bool) -> None:
        """Publish the position of each tracked stream consumer that is due a record."""
        now = time.monotonic()
        for index, stream in self._tracked.items():
            offset = self._positions[index].committed()
            if offset is None or not self._records.due(index, offset, now, force=force):
                continue
            delivery = self.builder.build(
                record_body(offset), exchange="", routing_key=stream, mandatory=True
            )
            self._recording[delivery] = index
            session.publish(delivery)

    def sync_generation(self) -> None:
        """Forget the delivery tags of a channel that is gone (the broker requeued them)."""
        session = self.session
        if session is not None and session.generation != self.generation:
            self.generation = session.generation
            self.acks.forget()

    def log_started(self, session: ConsumerSession) -> None:
        """Say that the worker consumes, once its start-up check passed on ``session``
        (the log line, then ``on_started``)."""
        if session.checked is not None:
            logger.info(
                "the broker holds what the handlers need (%d queues and exchanges): consuming %s",
                session.checked,
                ", ".join(dict.fromkeys(route.queue for route in self.routes)),
            )
        for started in self.on_started:
            started()

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
        if self._positions and message.consumer in self._positions and not self._take(message):
            return False
        route = self.routes[message.consumer]
        counters = self.metrics.queues[route.queue]
        counters.received += 1
        tracer = tracing.tracer()
        if tracer is not None:
            message.span = tracing.start_consumer(
                tracer,
                message.headers,
                queue=route.queue,
                routing_key=message.routing_key,
                message_id=message.message_id,
                attempt=message.attempt,
                redelivered=message.redelivered,
            )
        if route.periodic is not None:
            return self._admit_occurrence(message, route, route.periodic)
        if not self._needs_headers and not (route.idempotent and self._needs_idempotency):
            return True
        headers = message.headers if self._needs_headers else None
        message_id = message.message_id
        cancelled = duplicate = False
        store = self.app.cancellation
        if store is not None:
            target = cancel_target(headers)
            if target is not None:
                store.cancel(target)
                logger.info("job %s cancelled (noted from %s)", target, route.queue)
            elif message_id is not None:
                cancelled = store.take(message_id)
        if route.idempotent and message_id is not None and not cancelled:
            duplicate = self.app.idempotency.seen(message_id)
        verdict = before_handler(headers, duplicate=duplicate, cancelled=cancelled)
        if verdict is None:
            return True
        if verdict.action is Action.DUPLICATE:
            counters.duplicates += 1
        elif verdict.action is Action.CANCELLED:
            counters.cancelled += 1
            logger.info(
                "dropped cancelled job %s from %s",
                message_id,
                route.queue,
                extra=self._log_fields(message, route.queue),
            )
        self._skip(message, verdict)
        return False

    def _take(self, message: IncomingMessage) -> bool:
        """Note a stream delivery's offset; False (and acked) for a copy below the offset the
        consumer subscribed at again, which the broker sends from the start of its chunk."""
        offset = message.headers.get(STREAM_OFFSET_ARGUMENT)
        if not isinstance(offset, int):
            return True
        if not self._positions[message.consumer].take(offset):
            self.acks.done(message.tag)
            return False
        self._offsets[message] = offset
        return True

    def _skip(self, message: IncomingMessage, verdict: Verdict) -> None:
        """Settle a delivery whose handler does not run (its ack may wait for a publish)."""
        if message.span is not None:
            tracing.finish(message.span, verdict.action.value)
        if self.middleware:
            run_decided(self.middleware, message, verdict)
        self._ack(message)

    # -- periodic jobs ----------------------------------------------------------------------------

    def _admit_occurrence(
        self, message: IncomingMessage, route: Route, carrier: PeriodicQueue
    ) -> bool:
        """Plan a delivered occurrence (``periodic.plan_occurrence``): claim its id and
        publish the next one before it runs, or settle it without running."""
        message_id = message.message_id
        store = self.app.idempotency
        now_ms = int(self.clock() * 1000)
        tick = plan_occurrence(
            carrier.jobs,
            message.headers,
            attempt=message.attempt,
            now_ms=now_ms,
            duplicate=message_id is not None and store.seen(message_id),
        )
        step = tick.step
        if step is Step.RETRY:
            return True
        if step is Step.RUN:
            if message_id is not None:
                store.remember(message_id)
            assert tick.publish is not None
            if tick.behind:  # said, so that a worker's absence shows as late runs, not as none
                assert tick.occurrence is not None
                logger.info(
                    "occurrence %s on %s runs late: %s",
                    tick.occurrence.label,
                    route.queue,
                    tick.reason,
                    extra=self._log_fields(message, route.queue),
                )
            self._holds[message] = 2  # the handler's end and the next occurrence's confirm
            self._schedule(message, tick.publish, carrier, now_ms, ran=True)
            return True
        counters = self.metrics.queues[route.queue]
        if step is Step.DUPLICATE:
            counters.duplicates += 1
        log = {Step.UNKNOWN: logger.warning, Step.DUPLICATE: logger.debug}.get(step, logger.info)
        log(
            "occurrence %s on %s not run: %s",
            message_id,
            route.queue,
            tick.reason,
            extra=self._log_fields(message, route.queue),
        )
        if tick.publish is not None:
            self._holds[message] = 2  # acked once the occurrence that replaces it is confirmed
            self._schedule(message, tick.publish, carrier, now_ms, ran=False)
        self._skip(message, Verdict(_SKIPPED[step], reason=tick.reason))
        return False

    def _seeds(self) -> list[Delivery]:
        """The first occurrence of every periodic job after now, with its deterministic id:
        each worker publishes them when it connects; copies from several are skipped."""
        seeds: list[Delivery] = []
        if not self.periodic:
            return seeds
        now_ms = int(self.clock() * 1000)
        for carrier in self.periodic:
            for job in carrier.jobs.values():
                # untracked: a seed that is lost is made again at the next connection, by
                # this worker or another, and an existing chain carries the job meanwhile
                occurrence = job.first_after(now_ms)
                seeds.append(self._occurrence_delivery(occurrence, carrier, now_ms))
        return seeds

    def reseed(self, now: float) -> None:
        """Publish the seeds again when ``RESEED_EVERY_S`` passed (``now``: monotonic); the
        shells call it on their tick."""
        if not self.periodic or now < self._next_seed:
            return
        self._next_seed = now + RESEED_EVERY_S
        session = self.session
        if session is not None and session.ready:
            for delivery in self._seeds():
                session.publish(delivery)

    def _occurrence_delivery(
        self, occurrence: Occurrence, carrier: PeriodicQueue, now_ms: int
    ) -> Delivery:
        route = carrier.route(occurrence, now_ms)
        return self.builder.build(
            occurrence.body(),
            exchange=route.exchange,
            routing_key=route.routing_key,
            mandatory=True,
            headers=occurrence.headers,
            message_id=occurrence.id,
            content_type="application/json",
        )

    def _schedule(
        self,
        message: IncomingMessage,
        occurrence: Occurrence,
        carrier: PeriodicQueue,
        now_ms: int,
        *,
        ran: bool,
    ) -> _Scheduled:
        delivery = self._occurrence_delivery(occurrence, carrier, now_ms)
        scheduled = self._scheduling[delivery] = _Scheduled(message, occurrence, carrier, ran)
        self._send(delivery)
        return scheduled

    def _scheduled(self, delivery: Delivery, scheduled: _Scheduled) -> None:
        """An occurrence publish settled: release its message, or try again."""
        message = scheduled.message
        if message not in self._holds:
            return  # settled already: rejected, requeued, or its channel is gone
        if delivery.status is Status.CONFIRMED:
            self._ack(message)
            return
        occurrence = scheduled.occurrence
        carrier = scheduled.carrier
        why = f"delay levels carrying occurrences of {carrier.queue!r}"
        need = lost_need(delivery.error, delivery.exchange, delivery.routing_key, why)
        if need is not None:
            # not published again nor given up (which ends the chain): the worker stops and
            # the occurrence goes back to its queue, run again once the delay is back
            current = read_occurrence(message.headers)
            held = current.label if current is not None else message.message_id
            lost = self._stop_for(need, carrier.queue, f"occurrence {held}")
            logger.error(
                "could not store occurrence %s (published for %s): %s",
                occurrence.label,
                held,
                lost,
            )
            if not scheduled.ran:
                self.requeue(message)
            # a run keeps the hold this publish would have released: never acked, it goes
            # back to its queue when the worker closes its channel
            return
        if scheduled.tries < _SCHEDULE_TRIES:
            logger.warning(
                "could not store occurrence %s (try %d): %s; publishing it again",
                occurrence.id,
                scheduled.tries,
                delivery.error,
            )
            now_ms = int(self.clock() * 1000)
            again = self._schedule(
                message, occurrence, scheduled.carrier, now_ms, ran=scheduled.ran
            )
            again.tries = scheduled.tries + 1
            return
        if not scheduled.ran:
            self.requeue(message)  # not run: the occurrence comes back as it was
            return
        logger.error(
            "could not store occurrence %s of periodic job %s: %s; the job is seeded again"
            " when a worker connects",
            occurrence.id,
            occurrence.job,
            delivery.error,
        )
        self._ack(message)

    def enter(self, message: IncomingMessage) -> object | None:
        """Make the delivery's span current while its handler runs (None: no tracing)."""
        return tracing.activate(message.span) if message.span is not None else None

    def leave(self, token: object | None) -> None:
        if token is not None:
            tracing.deactivate(token)

    def _log_fields(self, message: IncomingMessage, queue: str) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "queue": queue,
            "message_id": message.message_id,
            "attempt": message.attempt,
        }
        trace = tracing.trace_id(message.span)
        if trace is not None:
            fields["trace_id"] = trace
        return fields

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
        """Act on how the handler ended: ack, or publish a retry/parked copy then ack.
        A delivery that names a ``reply_to`` gets the handler's ``result`` as its reply first.

        The ``after``/``on_error`` hooks of the ``entered`` middlewares (all of them unless a
        ``before`` hook failed) run first and may change the error; the verdict follows."""
        route = self.routes[message.consumer]
        counters = self.metrics.queues[route.queue]
        counters.observe(elapsed)
        if error is None and route.timeout is not None and elapsed > route.timeout:
            error = HandlerTimeout(
                f"handler of {route.queue} ran {elapsed:.3f} s, longer than its"
                f" time-to-run of {route.timeout:g} s"
            )
        reply = None
        if error is None and message._flags & REPLY_TO_FLAG and message.reply_to:
            try:
                reply = _Replying(message, *build_reply(self.builder, message, result, route.codec))
            except InvalidReply as exc:
                error = exc
        chain = self.middleware
        if chain:
            error = run_after(chain, len(chain) if entered is None else entered, message, error)
        if self.switches:
            self.switchboard.record(route.queue, error is not None, self.session)
        if error is None:
            if route.idempotent:
                mid = message.message_id
                if mid is not None:
                    self.app.idempotency.remember(mid)
            if message.span is not None:
                tracing.finish(message.span, "acked")
            if chain:
                run_decided(chain, message, ACK)
            if reply is not None:
                # The reply first, the ack once the broker confirmed it: a crash in between
                # redelivers the request and gives a duplicate reply, never a lost one (the
                # requester drops a reply whose correlation id no longer waits).
                self._replies[reply.delivery] = reply
                self._send(reply.delivery)
            else:
                self._ack(message)
            return ACK
        counters.failed += 1
        if isinstance(error, HandlerTimeout):
            counters.timeouts += 1
        if route.stream:
            return self._skip_failed(message, route, error)
        verdict = after_failure(
            route.retry, route.queue, message.headers, error, now_ms=int(time.time() * 1000)
        )
        failure = failure_text(error)
        if not verdict.publishes:  # a retry or a parking is logged once the broker stored it
            self._log_failure(message, route, verdict, failure)
        span = message.span
        if span is not None:
            outcome = {Action.RETRY: "retried", Action.PARK: "parked"}.get(
                verdict.action, "rejected"
            )
            if verdict.action is not Action.REJECT:
                # the copy carries this attempt's context: the next attempt is its child
                verdict = replace(
                    verdict, headers={**(verdict.headers or {}), **tracing.carrier_of(span)}
                )
            tracing.finish(
                span,
                outcome,
                error,
                attempt=verdict.attempt,
                tier=verdict.tier_label if verdict.action is Action.RETRY else None,
                reason=verdict.reason or None,
            )
        if verdict.action is Action.PARK and verdict.publishes:
            verdict = self._parked_copy(message, route, verdict, error)
        if chain:
            run_decided(chain, message, verdict)
        if verdict.action is Action.REJECT:
            counters.rejected += 1
            if self._holds:
                self._holds.pop(message, None)
            if message.generation == self.generation:
                self.acks.reject(message.tag, requeue=False)
            return verdict
        if verdict.requeue is not None:
            self._return_failed(message, verdict, verdict.requeue)
            return verdict
        self._republish(message, verdict, failure)
        return verdict

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
                extra={**self._log_fields(message, route.queue), "action": "call-again"},
            )
        return pause

    def _parked_copy(
        self, message: IncomingMessage, route: Route, verdict: Verdict, error: BaseException
    ) -> Verdict:
        """The parked copy with the stack trace and the handler's own headers, within the
        negotiated frame size (``parked_copy``)."""

        def room(headers: Mapping[str, Any]) -> int:
            copy = self._copy(message, replace(verdict, headers=headers))
            return self.builder.frame_max - header_frame_size(copy.frames)

        headers = with_extras(verdict.headers or {}, message, error, route.parked_headers, room)
        return replace(verdict, headers=headers)

    def _announce(self, message: IncomingMessage, verdict: Verdict, exchange: str) -> None:
        """Publish the fault event of a parked message (``faults``); its confirm acks it."""
        event = fault_event(
            exchange, message.queue, message.message_id, verdict, int(time.time() * 1000)
        )
        delivery = self.builder.build(
            event.encoded(),
            exchange=event.exchange,
            routing_key=event.routing_key,
            content_type="application/json",
            correlation_id=event.correlation_id,
            message_type=FAULT_TYPE,
        )
        self._faults[delivery] = (message, event)
        self._send(delivery)

    def _announced(self, delivery: Delivery, message: IncomingMessage) -> None:
        if delivery.status is not Status.CONFIRMED:
            logger.error(
                "message %s of %s is parked, but its fault event to %r could not be stored: %s",
                message.message_id,
                message.queue,
                delivery.exchange,
                delivery.error,
                extra=self._log_fields(message, message.queue),
            )
        self._ack(message)

    def _skip_failed(self, message: IncomingMessage, route: Route, error: BaseException) -> Verdict:
        """A stream's failed delivery: logged with its offset and acked (credit only)."""
        offset = self._offsets.get(message)
        verdict = after_stream_failure(route.queue, offset, error)
        self.metrics.queues[route.queue].skipped += 1
        self._log_failure(message, route, verdict, failure_text(error))
        if message.span is not None:
            tracing.finish(message.span, "skipped", error, attempt=1, reason=verdict.reason)
        if self.middleware:
            run_decided(self.middleware, message, verdict)
        self._ack(message)
        return verdict

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
        if message.span is not None and message.span.is_recording():
            tracing.finish(message.span, "requeued")
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
                offset = self._offsets.pop(message, None)
                if offset is not None:
                    self._positions[message.consumer].handled(offset)

    def _republish(self, message: IncomingMessage, verdict: Verdict, failure: str) -> None:
        delivery = self._copy(message, verdict)
        self._pending[delivery] = _Pending(message, verdict, failure)
        self._send(delivery)

    def _copy(self, message: IncomingMessage, verdict: Verdict) -> Delivery:
        """The retry or parked copy of ``message`` as ``verdict`` says, built to send."""
        props: dict[str, Any] = {}
        if message._flags:
            all_props = message.properties
            for name in _KEPT_PROPERTIES:
                value = all_props.get(name)
                if value is not None:
                    props[name] = value
            if "type" in all_props:
                props["message_type"] = all_props["type"]
            if "timestamp" in all_props:
                props["timestamp"] = all_props["timestamp"]
        return self.builder.build(
            message.body,
            exchange=verdict.exchange,
            routing_key=verdict.routing_key,
            mandatory=True,
            headers=verdict.headers,
            message_id=message.message_id,
            **props,
        )

    def _send(self, delivery: Delivery) -> None:
        session = self.session
        if session is not None and session.ready:
            session.publish(delivery)
        else:
            # sent on the next connection with whatever else is unconfirmed
            self.tracker.add(delivery)

    def _settled(self, delivery: Delivery) -> None:
        pending = self._pending.pop(delivery, None)
        if pending is None:
            if self._replies:
                reply = self._replies.pop(delivery, None)
                if reply is not None:
                    self._replied(delivery, reply)
                    return
            if self._recording:
                index = self._recording.pop(delivery, None)
                if index is not None:
                    if delivery.status is not Status.CONFIRMED:
                        logger.warning(
                            "could not store the position of stream %s: %s; writing it again",
                            self.routes[index].queue,
                            delivery.error,
                        )
                        self._records.failed(index, time.monotonic())
                    return
            scheduled = self._scheduling.pop(delivery, None) if self._scheduling else None
            if scheduled is not None:
                self._scheduled(delivery, scheduled)
            parked = self._faults.pop(delivery, None) if self._faults else None
            if parked is not None:
                self._announced(delivery, parked[0])
            return
        message, verdict = pending.message, pending.verdict
        counters = self.metrics.queues[message.queue]
        if delivery.status is Status.CONFIRMED:
            if verdict.action is Action.PARK:
                counters.parked += 1
            else:
                counters.retried[verdict.tier_label] += 1
            route = self.routes[message.consumer]
            self._log_failure(message, route, verdict, pending.failure)
            faults = route.retry.fault_exchange if route.retry is not None else None
            if faults is not None and verdict.action is Action.PARK:
                self._announce(message, verdict, faults)
            else:
                self._ack(message)
            return
        route = self.routes[message.consumer]
        if self._gone(message, route, verdict, delivery, pending.failure):
            return
        parks = verdict.action is Action.RETRY and route.retry is not None
        logger.error(
            "handler of %s failed on message %s (attempt %d): %s; could not store its %s copy"
            " (%s): %s",
            message.queue,
            message.message_id,
            verdict.attempt,
            pending.failure,
            verdict.action.value,
            delivery.error,
            "parking it instead" if parks else "returned to its queue",
            extra={
                **self._log_fields(message, message.queue),
                "attempt": verdict.attempt,
                "action": "park" if parks else "requeue",
            },
        )
        if parks:
            assert route.retry is not None
            park = Verdict(
                Action.PARK,
                attempt=verdict.attempt,
                routing_key=route.retry.parking_queue,
                headers={**(verdict.headers or {}), "x-rabbitry-parked-reason": "retry failed"},
                reason=f"the retry could not be published: {delivery.error}",
            )
            self._republish(message, park, pending.failure)
        else:
            self.requeue(message)

    def _gone(
        self,
        message: IncomingMessage,
        route: Route,
        verdict: Verdict,
        delivery: Delivery,
        failure: str,
    ) -> bool:
        """A retry or parked copy that found its queue or exchange gone (unroutable, 404):
        the message goes back to its queue and the worker stops (``lost``), the way it
        refuses to start without that object. Redelivered at once, the message would only
        fail the same way again and again. False for any other failure."""
        if verdict.action is Action.PARK:
            why = f"parking lot of {route.queue!r}"
        elif route.retry is not None and route.retry.delay is not None:
            why = f"delay levels carrying retries of {route.queue!r}"
        else:
            why = f"retry tier of {route.queue!r}, {verdict.delay_ms} ms"
        need = lost_need(delivery.error, verdict.exchange, verdict.routing_key, why)
        if need is None:
            return False
        lost = self._stop_for(need, route.queue, "the failed message")
        logger.error(
            "handler of %s failed on message %s (attempt %d): %s; its %s copy came back (%s): %s",
            route.queue,
            message.message_id,
            verdict.attempt,
            failure,
            verdict.action.value,
            delivery.error,
            lost,
            extra={
                **self._log_fields(message, route.queue),
                "attempt": verdict.attempt,
                "action": "requeue",
            },
        )
        self.requeue(message)
        return True

    def _stop_for(self, need: Need, queue: str, held: str) -> TopologyLost:
        """Note that ``need`` went away (the first one is what the worker stops with)."""
        broker = self.settings.display.rsplit("/", 1)[0]  # the vhost is named apart
        where = f"vhost {self.settings.vhost!r} on {broker}"
        lost = TopologyLost([need], where, self.app.spec_file, queue, held)
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

    def _replied(self, delivery: Delivery, reply: _Replying) -> None:
        """A reply settled: the request is done either way (its handler succeeded)."""
        message = reply.message
        if delivery.status is not Status.CONFIRMED:
            logger.warning(
                "the reply to message %s from %s was not delivered (%s); a returned reply means"
                " the requester is gone or stopped waiting",
                message.message_id,
                message.queue,
                delivery.error,
                extra=self._log_fields(message, message.queue),
            )
        self._ack(message)

    def _log_failure(
        self, message: IncomingMessage, route: Route, verdict: Verdict, what: str
    ) -> None:
        """The line of a failure, once its outcome happened (a retry or parked copy is
        confirmed; a reject or a via-broker return is sent)."""
        if verdict.requeue is not None:
            self._log_returned(message, route, verdict, what)
            return
        if verdict.action is Action.RETRY:
            logger.warning(
                "handler of %s failed on message %s (attempt %d): %s; retry in %d ms",
                route.queue,
                message.message_id,
                verdict.attempt,
                what,
                verdict.delay_ms,
                extra={
                    **self._log_fields(message, route.queue),
                    "attempt": verdict.attempt,
                    "action": "retry",
                    "delay_ms": verdict.delay_ms,
                },
            )
        else:
            logger.error(
                "handler of %s failed on message %s (attempt %d): %s; %s (%s)",
                route.queue,
                message.message_id,
                verdict.attempt,
                what,
                {Action.PARK: "parked", Action.SKIPPED: "skipped"}.get(verdict.action, "rejected"),
                verdict.reason,
                extra={
                    **self._log_fields(message, route.queue),
                    "attempt": verdict.attempt,
                    "action": verdict.action.value,
                },
            )

    def _log_returned(
        self, message: IncomingMessage, route: Route, verdict: Verdict, what: str
    ) -> None:
        """A ``via: broker`` failure: the worker only hands the message back (reject, with or
        without requeue); the delay and the dead-lettering are the broker's to do, so the
        line says what the worker did, not what the broker is expected to do next."""
        if verdict.requeue and verdict.action is Action.RETRY:
            done = "returned to the broker for retry (reject with requeue)"
        elif verdict.requeue:
            done = (
                "returned to the broker (reject with requeue) at its last attempt, for the"
                " broker to dead-letter past the queue's delivery limit"
            )
        else:
            done = f"rejected without requeue, for the broker to dead-letter ({verdict.reason})"
        log = logger.warning if verdict.action is Action.RETRY else logger.error
        log(
            "handler of %s failed on message %s (attempt %d): %s; %s",
            route.queue,
            message.message_id,
            verdict.attempt,
            what,
            done,
            extra={
                **self._log_fields(message, route.queue),
                "attempt": verdict.attempt,
                "action": "requeue" if verdict.requeue else "reject",
            },
        )

    # -- output -----------------------------------------------------------------------------------

    @property
    def publishing(self) -> int:
        return (
            len(self._pending)
            + len(self._scheduling)
            + len(self._recording)
            + len(self._faults)
            + len(self._replies)
        )

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
        if self._tracked and session.ready:
            self._record_positions(session, flush or session.stopping)
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
