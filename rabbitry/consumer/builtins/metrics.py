"""Built-in middleware: the worker's counters of what came in and how handlers ended
(``consumer.metrics``): received, latency, failed, timeouts, duplicates, cancelled, skipped.
What became of a delivery (acked, retried, parked, rejected, requeued) is counted where it
happens, once the broker has it."""

from __future__ import annotations

from rabbitry.consumer.app import Route
from rabbitry.consumer.builtins.hooks import BuiltinMiddleware, Error
from rabbitry.consumer.decision import Action, HandlerTimeout, Verdict
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics


class Metrics(BuiltinMiddleware):
    def __init__(self, metrics: WorkerMetrics) -> None:
        self.queues = metrics.queues
        """The counters by queue (one lookup fewer per delivery than through ``metrics``)."""

    def received(self, message: IncomingMessage, route: Route) -> None:
        self.queues[route.queue].received += 1

    def skipped(self, message: IncomingMessage, verdict: Verdict) -> None:
        action = verdict.action
        if action is Action.DUPLICATE:
            self.queues[message.queue].duplicates += 1
        elif action is Action.CANCELLED:
            self.queues[message.queue].cancelled += 1

    def ended(self, message: IncomingMessage, route: Route, error: Error, took: float) -> Error:
        self.queues[route.queue].observe(took)
        return error

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
