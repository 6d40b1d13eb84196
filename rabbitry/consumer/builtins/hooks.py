"""The hooks of the worker's built-in middleware, and the table of them one handler runs.

The built-ins (``metrics``, ``time_limit``, ``idempotency``, ``tracing``) carry what every
delivery needs besides its handler and its verdict; the core calls their hooks at fixed points
and keeps only the order: hooks, verdict, then the ack or the publish that replaces it. Unlike
the app's own ``Middleware`` (which observes and may change the error), a built-in may also
settle a delivery before its handler (``screen``) and add to a verdict (``failed``). Around
every delivery, in this order:

- ``received(message, route)``: a new delivery, before anything else looks at it.
- ``screen(message, route)``: a verdict settles the delivery without its handler (a duplicate,
  a cancelled job); None lets it run. The first verdict wins.
- ``skipped(message, verdict)``: the delivery was settled without its handler.
- ``ended(message, route, error, took)``: the handler returned or raised, before the app's
  ``after``/``on_error`` hooks; returns the error they see (a success may become a failure).
- ``succeeded(message, route)``: the handler and every hook succeeded; before the ack.
- ``failed(message, route, error, verdict)``: the verdict of a failure is decided, before the
  app's ``decided`` hooks; returns the verdict to act on (headers may be added).
- ``requeued(message)``: the delivery goes back to its queue unhandled.

Outcomes (acked, retried, parked, rejected, requeued) are counted where they happen (the core
and its ``outbox``), once the broker has them, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rabbitry.consumer.app import Route
from rabbitry.consumer.decision import Verdict
from rabbitry.consumer.message import IncomingMessage

Error = BaseException | None
"""How a handler ended: what it raised, None when it returned."""


class BuiltinMiddleware:
    """Base of a built-in: every hook does nothing until overridden; ``applies`` says for
    which handlers it runs at all (so a handler without a time-to-run calls no time limit)."""

    spans_only: bool = False
    """Its hooks after ``received`` act only on a delivery with a span: the core skips them
    for the others (tracing without a tracer provider costs no call per hook)."""

    def applies(self, route: Route) -> bool:
        return True

    def received(self, message: IncomingMessage, route: Route) -> None:
        """A new delivery."""

    def screen(self, message: IncomingMessage, route: Route) -> Verdict | None:
        """A verdict settles the delivery without its handler."""
        return None

    def skipped(self, message: IncomingMessage, verdict: Verdict) -> None:
        """The delivery was settled without its handler."""

    def ended(self, message: IncomingMessage, route: Route, error: Error, took: float) -> Error:
        """The handler ended; the error the app's hooks see."""
        return error

    def succeeded(self, message: IncomingMessage, route: Route) -> None:
        """The handler and every hook succeeded."""

    def failed(
        self, message: IncomingMessage, route: Route, error: BaseException, verdict: Verdict
    ) -> Verdict:
        """The verdict of a failure; the one to act on."""
        return verdict

    def requeued(self, message: IncomingMessage) -> None:
        """The delivery goes back to its queue."""


@dataclass(frozen=True)
class Hooks:
    """The built-ins' hooks one handler runs, each in the built-ins' order, only those a
    built-in overrides and that apply to the handler (an empty tuple costs one loop test)."""

    received: tuple[Callable[[IncomingMessage, Route], None], ...]
    screen: tuple[Callable[[IncomingMessage, Route], Verdict | None], ...]
    skipped: tuple[Callable[[IncomingMessage, Verdict], None], ...]
    ended: tuple[Callable[[IncomingMessage, Route, Error, float], Error], ...]
    succeeded: tuple[Callable[[IncomingMessage, Route], None], ...]
    failed: tuple[Callable[[IncomingMessage, Route, BaseException, Verdict], Verdict], ...]
    requeued: tuple[Callable[[IncomingMessage], None], ...]

    @classmethod
    def of(cls, builtins: list[BuiltinMiddleware], route: Route, *, span: bool) -> Hooks:
        """The hooks of ``builtins`` that run for ``route``'s handler, on a delivery with a
        span or without one (``span``)."""
        chosen = [b for b in builtins if b.applies(route)]

        def bound(name: str) -> tuple[Callable[..., object], ...]:
            return tuple(
                getattr(b, name)
                for b in chosen
                if getattr(type(b), name) is not getattr(BuiltinMiddleware, name)
                and (span or not b.spans_only or name == "received")
            )

        return cls(
            received=bound("received"),  # type: ignore[arg-type]
            screen=bound("screen"),  # type: ignore[arg-type]
            skipped=bound("skipped"),  # type: ignore[arg-type]
            ended=bound("ended"),  # type: ignore[arg-type]
            succeeded=bound("succeeded"),  # type: ignore[arg-type]
            failed=bound("failed"),  # type: ignore[arg-type]
            requeued=bound("requeued"),  # type: ignore[arg-type]
        )
