"""The occurrences of periodic jobs a worker publishes: the seeds when it connects (and every
``RESEED_EVERY_S``), the next occurrence of a run before the run starts, an occurrence that
re-delays or replaces one not run. What to publish is ``periodic.plan_occurrence``'s (pure);
this keeps each publish until its confirm releases the delivery it replaces, and publishes it
again (``SCHEDULE_TRIES``) or stops the worker when the broker lost what carries it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.consumer.app import Route
from rabbitry.consumer.decision import Action, Verdict
from rabbitry.consumer.failure_log import log_fields
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.periodic import (
    Occurrence,
    PeriodicQueue,
    Step,
    plan_occurrence,
    read_occurrence,
)
from rabbitry.consumer.preflight import lost_need

if TYPE_CHECKING:
    from rabbitry.consumer.engine import WorkerCore

logger = logging.getLogger("rabbitry.worker")


@dataclass(slots=True, eq=False)
class _Scheduled:
    """An occurrence the worker publishes in place of ``message``: the next one of a run, or
    one that re-delays or replaces it; ``message`` is held until it is confirmed."""

    message: IncomingMessage
    occurrence: Occurrence
    carrier: PeriodicQueue
    ran: bool
    """The message's job runs (its id is claimed): giving up acks it, else requeues it."""
    tries: int = 1


SCHEDULE_TRIES = 3
"""Publishes of a next occurrence the broker refuses before the worker gives up on it."""

RESEED_EVERY_S = 600.0
"""How often a running worker seeds its periodic jobs again (besides when it connects): a
chain that ended (its occurrence dropped by a worker that lacked the job during a deploy, a
purged queue) starts again within this time."""

_SKIPPED = {
    Step.DUPLICATE: Action.DUPLICATE,
    Step.EARLY: Action.RESCHEDULED,
    Step.RESCHEDULED: Action.RESCHEDULED,
    Step.UNKNOWN: Action.DROPPED,
}


class Scheduling:
    """The periodic jobs' publishes of one worker (``core``), each holding the delivery it
    replaces until the broker confirms it."""

    def __init__(self, core: WorkerCore) -> None:
        self.core = core
        self.carriers = [r.periodic for r in core.routes if r.periodic is not None]
        """The queues that carry periodic jobs."""
        self.publishing: dict[Delivery, _Scheduled] = {}
        """Occurrences published and not yet confirmed."""
        self.next_seed = 0.0
        """When (monotonic) ``reseed`` publishes the seeds again."""

    def admit(self, message: IncomingMessage, route: Route, carrier: PeriodicQueue) -> bool:
        """Plan a delivered occurrence (``periodic.plan_occurrence``): claim its id and
        publish the next one before it runs, or settle it without running."""
        message_id = message.message_id
        store = self.core.app.idempotency
        now_ms = int(self.core.clock() * 1000)
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
                    extra=log_fields(message, route.queue),
                )
            self.core._holds[message] = 2  # the handler's end and the next occurrence's confirm
            self.schedule(message, tick.publish, carrier, now_ms, ran=True)
            return True
        log = {Step.UNKNOWN: logger.warning, Step.DUPLICATE: logger.debug}.get(step, logger.info)
        log(
            "occurrence %s on %s not run: %s",
            message_id,
            route.queue,
            tick.reason,
            extra=log_fields(message, route.queue),
        )
        if tick.publish is not None:
            self.core._holds[message] = 2  # acked once the occurrence that replaces it is confirmed
            self.schedule(message, tick.publish, carrier, now_ms, ran=False)
        self.core._skip(message, Verdict(_SKIPPED[step], reason=tick.reason))
        return False

    def seeds(self) -> list[Delivery]:
        """The first occurrence of every periodic job after now, with its deterministic id:
        each worker publishes them when it connects; copies from several are skipped."""
        seeds: list[Delivery] = []
        if not self.carriers:
            return seeds
        now_ms = int(self.core.clock() * 1000)
        for carrier in self.carriers:
            for job in carrier.jobs.values():
                # untracked: a seed that is lost is made again at the next connection, by
                # this worker or another, and an existing chain carries the job meanwhile
                occurrence = job.first_after(now_ms)
                seeds.append(self.delivery(occurrence, carrier, now_ms))
        return seeds

    def reseed(self, now: float) -> None:
        """Publish the seeds again when ``RESEED_EVERY_S`` passed (``now``: monotonic); the
        shells call it on their tick."""
        if not self.carriers or now < self.next_seed:
            return
        self.next_seed = now + RESEED_EVERY_S
        session = self.core.session
        if session is not None and session.ready:
            for delivery in self.seeds():
                session.publish(delivery)

    def delivery(self, occurrence: Occurrence, carrier: PeriodicQueue, now_ms: int) -> Delivery:
        route = carrier.route(occurrence, now_ms)
        return self.core.builder.build(
            occurrence.body(),
            exchange=route.exchange,
            routing_key=route.routing_key,
            mandatory=True,
            headers=occurrence.headers,
            message_id=occurrence.id,
            content_type="application/json",
        )

    def schedule(
        self,
        message: IncomingMessage,
        occurrence: Occurrence,
        carrier: PeriodicQueue,
        now_ms: int,
        *,
        ran: bool,
    ) -> _Scheduled:
        delivery = self.delivery(occurrence, carrier, now_ms)
        scheduled = self.publishing[delivery] = _Scheduled(message, occurrence, carrier, ran)
        self.core._send(delivery)
        return scheduled

    def settled(self, delivery: Delivery, scheduled: _Scheduled) -> None:
        """An occurrence publish settled: release its message, or try again."""
        message = scheduled.message
        if message not in self.core._holds:
            return  # settled already: rejected, requeued, or its channel is gone
        if delivery.status is Status.CONFIRMED:
            self.core._ack(message)
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
            lost = self.core._stop_for(need, carrier.queue, f"occurrence {held}")
            logger.error(
                "could not store occurrence %s (published for %s): %s",
                occurrence.label,
                held,
                lost,
            )
            if not scheduled.ran:
                self.core.requeue(message)
            # a run keeps the hold this publish would have released: never acked, it goes
            # back to its queue when the worker closes its channel
            return
        if scheduled.tries < SCHEDULE_TRIES:
            logger.warning(
                "could not store occurrence %s (try %d): %s; publishing it again",
                occurrence.id,
                scheduled.tries,
                delivery.error,
            )
            now_ms = int(self.core.clock() * 1000)
            again = self.schedule(message, occurrence, scheduled.carrier, now_ms, ran=scheduled.ran)
            again.tries = scheduled.tries + 1
            return
        if not scheduled.ran:
            self.core.requeue(message)  # not run: the occurrence comes back as it was
            return
        logger.error(
            "could not store occurrence %s of periodic job %s: %s; the job is seeded again"
            " when a worker connects",
            occurrence.id,
            occurrence.job,
            delivery.error,
        )
        self.core._ack(message)
