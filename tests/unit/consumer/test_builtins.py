"""The worker's built-in middleware: which hooks a handler runs, and what each built-in does."""

from __future__ import annotations

from rabbitry.consumer.app import App
from rabbitry.consumer.builtins import Hooks, builtins
from rabbitry.consumer.builtins.metrics import Metrics
from rabbitry.consumer.builtins.time_limit import TimeLimit
from rabbitry.consumer.builtins.tracing import Tracing
from rabbitry.consumer.decision import HandlerTimeout
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics


def app_with(**options: object) -> App:
    app = App()

    @app.handler("jobs", **options)  # type: ignore[arg-type]
    def handle(message: IncomingMessage) -> None:
        pass

    return app


def test_a_handler_runs_only_the_hooks_a_built_in_overrides_and_that_apply_to_it() -> None:
    app = app_with()
    hooks = Hooks.of(builtins(app, WorkerMetrics(live=False)), app.routes["jobs"], span=False)
    assert hooks.ended == ()  # no time-to-run: no limit
    assert hooks.screen == ()  # neither idempotent nor a cancellation store
    assert [type(h.__self__) for h in hooks.received] == [Tracing]
    assert [type(h.__self__) for h in hooks.failed] == [Metrics]
    assert hooks.succeeded == (), "no span: tracing has nothing to end"
    spanned = Hooks.of(builtins(app, WorkerMetrics(live=False)), app.routes["jobs"], span=True)
    assert [type(h.__self__) for h in spanned.succeeded] == [Tracing]


def test_the_time_limit_runs_only_for_a_handler_with_a_time_to_run() -> None:
    app = app_with(timeout=0.5)
    hooks = Hooks.of(builtins(app, WorkerMetrics(live=False)), app.routes["jobs"], span=False)
    assert [type(h.__self__) for h in hooks.ended] == [TimeLimit]


def test_a_success_past_the_time_to_run_becomes_a_handler_timeout_and_a_failure_stays() -> None:
    app = app_with(timeout=0.5)
    route = app.routes["jobs"]
    limit = TimeLimit()
    message = IncomingMessage(1, 0, False, "", "jobs", 0, b"", b"", "jobs")
    late = limit.ended(message, route, None, 0.75)
    assert isinstance(late, HandlerTimeout)
    assert "ran 0.750 s, longer than its time-to-run of 0.5 s" in str(late)
    assert limit.ended(message, route, None, 0.25) is None
    error = ValueError("no")
    assert limit.ended(message, route, error, 0.75) is error
