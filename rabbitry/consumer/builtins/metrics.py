"""Built-in middleware: the worker's counters of how deliveries ended without an ack
(``consumer.metrics``): failed, timeouts, duplicates, cancelled, skipped.

Two counts every delivery pays, received and the handler's latency, the core keeps inline
(``WorkerCore.admit`` and ``conclude``): a hook call each cost about 3% of a worker's CPU per
message (bench/consume.py, before and after). What became of a delivery (acked, retried,
parked, rejected, requeued) is counted where it happens, once the broker has it."""

from __future__ import annotations

from rabbitry.consumer.app import Route
from rabbitry.consumer.builtins.hooks import BuiltinMiddleware
from rabbitry.consumer.decision import Action, Verdict
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.errors import HandlerTimeout


class Metrics(BuiltinMiddleware):
    def __init__(self, metrics: WorkerMetrics) -> None:
        self.queues = metrics.queues
        """The counters by queue."""

    def skipped(self, message: IncomingMessage, verdict: Verdict) -> None:
        action = verdict.action
        if action is Action.DUPLICATE:
            self.queues[message.queue].duplicates += 1
        elif action is Action.CANCELLED:
            self.queues[message.queue].cancelled += 1

    def failed(
        self, message: IncomingMessage, route: Route, error: BaseException, verdict: Verdict
    ) -> Verdict:
        counters = self.queues[route.queue]
        counters.failed += 1
        if isinstance(error, HandlerTimeout):
            counters.timeouts += 1
        if verdict.action is Action.SKIPPED:
            counters.skipped += 1
        return verdict
