"""OpenTelemetry traces of publishing and consuming, following the semantic conventions for
messaging (``messaging.system = rabbitmq``, ``messaging.destination.name``, ...).

Only with ``opentelemetry-api`` installed (``rabbitry[otel]``) and a tracer provider configured
(the application's SDK, or ``opentelemetry-instrument``); otherwise ``tracer()`` is None after
one attribute read and nothing else runs. The W3C trace context (``traceparent``,
``tracestate``) travels in the message headers: a publisher injects it, a worker extracts it
and makes a CONSUMER span per delivery, and the copy a worker sends to a retry tier or a
parking lot carries the context of the attempt that failed, so that publish -> attempt 1 ->
retry -> attempt 2 -> park is one trace.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

SYSTEM = "rabbitmq"
_cached: tuple[object, Any] = (None, None)
trace: Any = None
"""``opentelemetry.trace`` once a tracer provider was found (imported by then anyway)."""
propagate: Any = None
context: Any = None


def tracer() -> Any:
    """The tracer to use now, or None when no tracer provider is configured.

    An application that configured one has imported ``opentelemetry.trace``: until then this
    imports nothing (the API installed and unused costs nothing, not even its import)."""
    global _cached, trace, propagate, context
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api._TRACER_PROVIDER  # set by set_tracer_provider (SDK, auto-instrumentation)
    if provider is None:
        return None
    if _cached[0] is not provider:
        from opentelemetry import context as otel_context
        from opentelemetry import propagate as otel_propagate

        from rabbitry import __version__

        trace, propagate, context = api, otel_propagate, otel_context
        found = None
        if not isinstance(provider, api.NoOpTracerProvider):
            found = provider.get_tracer("rabbitry", __version__)
        _cached = (provider, found)
    return _cached[1]


def destination(exchange: str, routing_key: str) -> str:
    """What a publish names as its destination: the exchange, or for the default exchange the
    queue the routing key names."""
    return exchange or routing_key or "amq.default"


def start_producer(tracer_: Any, exchange: str, routing_key: str) -> tuple[Any, dict[str, str]]:
    """A PRODUCER span for a publish (or a batch of them) and the headers that carry it."""
    name = destination(exchange, routing_key)
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": name,
        "messaging.rabbitmq.destination.routing_key": routing_key,
    }
    span = tracer_.start_span(f"send {name}", kind=trace.SpanKind.PRODUCER, attributes=attributes)
    return span, carrier_of(span)


def carrier_of(span: Any) -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) for a message sent within ``span``."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


_getter: Any = None


def _header_getter() -> Any:
    """Reads trace context from AMQP headers, whose strings may arrive as bytes."""
    global _getter
    if _getter is None:
        from opentelemetry.propagators.textmap import Getter

        class HeaderGetter(Getter[Mapping[str, Any]]):
            def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
                value = carrier.get(key)
                if value is None:
                    return None
                if isinstance(value, bytes | bytearray):
                    value = bytes(value).decode("utf-8", "replace")
                return [str(value)]

            def keys(self, carrier: Mapping[str, Any]) -> list[str]:
                return list(carrier)

        _getter = HeaderGetter()
    return _getter


def start_consumer(
    tracer_: Any,
    headers: Mapping[str, Any],
    *,
    queue: str,
    routing_key: str,
    message_id: str | None,
    attempt: int,
    redelivered: bool,
) -> Any:
    """A CONSUMER span for one delivery, child of the context its headers carry."""
    parent = propagate.extract(headers, getter=_header_getter())
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue,
        "messaging.rabbitmq.destination.routing_key": routing_key,
        "rabbitry.attempt": attempt,
        "rabbitry.redelivered": redelivered,
    }
    if message_id is not None:
        attributes["messaging.message.id"] = message_id
    return tracer_.start_span(
        f"process {queue}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    )


def activate(span: Any) -> object:
    """Make ``span`` the current span (handlers' own spans nest under it); a token for
    ``deactivate``."""
    return context.attach(trace.set_span_in_context(span))


def deactivate(token: object) -> None:
    context.detach(token)


def finish(span: Any, outcome: str, error: BaseException | None = None, **attributes: Any) -> None:
    """End a consumer span with how the delivery ended (``acked``, ``retried``, ``parked``,
    ``rejected``, ``duplicate``, ``cancelled``, ``requeued``)."""
    span.set_attribute("rabbitry.outcome", outcome)
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(f"rabbitry.{key}", value)
    if error is not None:
        span.record_exception(error)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}"))
    if outcome != "acked":
        span.add_event(outcome, {k: v for k, v in attributes.items() if v is not None})
    span.end()


def trace_id(span: Any) -> str | None:
    """The hex trace id of ``span`` (for log lines), None when it records nothing."""
    if span is None:
        return None
    context = span.get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None
