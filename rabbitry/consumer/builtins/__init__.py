"""The worker's built-in middleware, one a module (``hooks`` says when each hook runs):
``metrics`` (the counters), ``time_limit`` (a handler's time-to-run), ``idempotency``
(duplicates and cancelled jobs), ``tracing`` (a span per delivery)."""

from __future__ import annotations

from rabbitry.consumer.app import App
from rabbitry.consumer.builtins.hooks import BuiltinMiddleware, Hooks
from rabbitry.consumer.builtins.idempotency import Idempotency
from rabbitry.consumer.builtins.metrics import Metrics
from rabbitry.consumer.builtins.time_limit import TimeLimit
from rabbitry.consumer.builtins.tracing import Tracing
from rabbitry.consumer.metrics import WorkerMetrics

__all__ = ["BuiltinMiddleware", "Hooks", "builtins"]


def builtins(app: App, metrics: WorkerMetrics) -> list[BuiltinMiddleware]:
    """The built-ins of a worker of ``app``, outermost first: the counters see an outcome
    before the span ends with it."""
    return [Metrics(metrics), TimeLimit(), Idempotency(app), Tracing()]
