"""Built-in middleware: an OpenTelemetry consumer span per delivery (``amqp.tracing``; only
when a tracer provider is configured). The span starts when the delivery arrives, is current
while the handler and the app's hooks run (the shells' ``enter``/``leave``), and ends with what
became of the message; a retry or parked copy carries its context, so the next attempt is its
child."""

from __future__ import annotations

import sys
from dataclasses import replace

from rabbitry.amqp import tracing
from rabbitry.consumer.app import Route
from rabbitry.consumer.builtins.hooks import BuiltinMiddleware
from rabbitry.consumer.decision import Action, Verdict
from rabbitry.consumer.message import IncomingMessage

_API = "opentelemetry.trace"
"""Imported by an application that configured tracing; until then there is no tracer."""
_OUTCOMES = {Action.RETRY: "retried", Action.PARK: "parked", Action.SKIPPED: "skipped"}


class Tracing(BuiltinMiddleware):
    spans_only = True

    def received(self, message: IncomingMessage, route: Route) -> None:
        # the test ``tracing.tracer`` starts with, without its call: every delivery pays it
        if _API not in sys.modules:
            return
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

    def skipped(self, message: IncomingMessage, verdict: Verdict) -> None:
        if message.span is not None:
            tracing.finish(message.span, verdict.action.value)

    def succeeded(self, message: IncomingMessage, route: Route) -> None:
        if message.span is not None:
            tracing.finish(message.span, "acked")

    def failed(
        self, message: IncomingMessage, route: Route, error: BaseException, verdict: Verdict
    ) -> Verdict:
        span = message.span
        if span is None:
            return verdict
        action = verdict.action
        if action is Action.RETRY or action is Action.PARK:
            # the copy carries this attempt's context: the next attempt is its child
            verdict = replace(
                verdict, headers={**(verdict.headers or {}), **tracing.carrier_of(span)}
            )
        tracing.finish(
            span,
            _OUTCOMES.get(action, "rejected"),
            error,
            attempt=verdict.attempt,
            tier=verdict.tier_label if action is Action.RETRY else None,
            reason=verdict.reason or None,
        )
        return verdict

    def requeued(self, message: IncomingMessage) -> None:
        if message.span is not None and message.span.is_recording():
            tracing.finish(message.span, "requeued")
