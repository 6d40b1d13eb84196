"""What ``Worker`` (blocking) and ``AsyncWorker`` (asyncio) do alike around their connection,
written once: what they hold (``Shell``: one worker per vhost of an app of several, else a core
of their own), the line that says it consumes, deliveries that arrive while the worker stops,
consumers the broker cancelled, a lost connection, the last line of a run, the tries of a
(re)connect. The shells differ only in how they wait and run handlers; these steps are the same
rule in both."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from rabbitry.amqp.connector import Outage
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.app import App
from rabbitry.consumer.engine import WorkerCore, worker_core
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.session import ConsumerSession
from rabbitry.consumer.worker_options import AsyncWorkerKeywords, combined_metrics, vhost_parts
from rabbitry.uri import mask_text

logger = logging.getLogger("rabbitry.worker")

_Part = TypeVar("_Part", bound="Shell")


class Shell:
    """What a worker holds, either shell: AMQP binds a connection to one vhost, so an app of
    several runs one worker per vhost (``workers``, the first one's ``core`` standing for
    them); an app of one has a core of its own."""

    workers: Sequence[Shell]
    core: WorkerCore

    def _parts(
        self,
        app: App,
        url: str | ConnectionSettings | None,
        keywords: AsyncWorkerKeywords,
        part: Callable[[App, ConnectionSettings], _Part],
    ) -> list[_Part]:
        """The workers of each vhost (``part`` makes one); sets ``core``, ``options``, ``app``."""
        workers = [part(sub_app, settings) for sub_app, settings in vhost_parts(app, url, keywords)]
        self.core = workers[0].core if workers else worker_core(app, url, keywords)
        self.options = self.core.options
        self.app = app
        return workers

    @property
    def metrics(self) -> WorkerMetrics:
        if self.workers:
            return combined_metrics([(w.core.app.vhosts[0].name, w.metrics) for w in self.workers])
        return self.core.metrics


def log_started(core: WorkerCore, session: ConsumerSession) -> None:
    """Say that the worker consumes, once its start-up check passed on ``session``
    (the log line, then the core's ``on_started``)."""
    if session.checked is not None:
        logger.info(
            "the broker holds what the handlers need (%d queues and exchanges): consuming %s",
            session.checked,
            ", ".join(dict.fromkeys(route.queue for route in core.routes)),
        )
    for started in core.on_started:
        started()


def return_unhandled(core: WorkerCore, inbox: list[IncomingMessage]) -> None:
    """Deliveries that came while the worker stops: counted, then given back to the queue."""
    for message in inbox:
        core.acks.received(message.tag)
        core.requeue(message)


def log_broker_cancels(session: ConsumerSession) -> None:
    """Say which consumers the broker cancelled (their queue deleted, say), once each."""
    if session.cancelled_by_broker:
        queues = ", ".join(session.cancelled_by_broker)
        session.cancelled_by_broker.clear()
        logger.error("the broker cancelled the consumer of %s (queue deleted?)", queues)


def worker_outage(
    core: WorkerCore,
    after_loss: bool,
    tidy: Callable[[BaseException], None],
    stopping: Callable[[], bool],
) -> Outage:
    """The tries of a worker's (re)connect, either shell's: over the core's node walk, with
    the shell's ``tidy`` after a failed try, until it connects or ``stopping``."""
    rule = Reconnect(core.settings, time.monotonic(), core.walk, after_loss=after_loss)
    return Outage(rule, tidy=tidy, stopping=stopping)


def note_lost(core: WorkerCore, where: str, error: BaseException | str) -> None:
    """A connection that was consuming is gone: counted and said (``where``: the node)."""
    core.metrics.reconnects += 1
    logger.warning(
        "connection to %s lost (%s): reconnecting; unacked messages return to their queues",
        where,
        mask_text(str(error)),
    )


def log_stopped(core: WorkerCore) -> None:
    logger.info(
        "stopped: %d received, %d acked, %d requeued",
        core.metrics.total("received"),
        core.metrics.total("acked"),
        core.metrics.total("requeued"),
    )
