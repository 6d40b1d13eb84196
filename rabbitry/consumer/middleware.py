"""Middleware: hooks around every handler call of an ``App``, in onion order.

A middleware subclasses ``Middleware`` and overrides the hooks it needs:

- ``before(message)``: before the handler, in registration order. Raising fails the message
  as if the handler had raised: the handler and the later ``before`` hooks do not run.
- ``after(message)``: the handler returned; in reverse registration order. Raising turns the
  success into that failure for the middlewares outside it.
- ``on_error(message, error)``: the handler (or an inner hook) raised, or ran past its
  time-to-run (``HandlerTimeout``); in reverse order. Raising replaces the error the outer
  middlewares and the retry decision see (raise a ``NonRetryable`` to park at once).
- ``decided(message, verdict)``: what the worker does with the message (``Verdict``: ack,
  retry at which tier, park, reject, skip a duplicate or a cancelled job); in reverse order,
  once per delivery, also for deliveries whose handler never ran. It observes: raising is
  logged and changes nothing.

So the first middleware registered is the outermost: its ``before`` runs first and its
``after``/``on_error`` last, and only middlewares whose ``before`` completed get
``after``/``on_error``. Hooks are plain functions for sync and async handlers alike. Tracing
and the worker's counters wrap them all: the delivery's span is current in every hook of a
delivery whose handler was to run (``decided`` comes after the span has ended).
A handler cancelled by shutdown gets no hook: its message goes back to its queue.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rabbitry.consumer.decision import Verdict
from rabbitry.consumer.message import IncomingMessage

logger = logging.getLogger("rabbitry.worker")


class Middleware:
    """Base of a middleware: every hook does nothing until overridden."""

    def before(self, message: IncomingMessage) -> None:
        """Before the handler (registration order); raise to fail the message."""

    def after(self, message: IncomingMessage) -> None:
        """The handler returned (reverse order); raise to fail the message."""

    def on_error(self, message: IncomingMessage, error: BaseException) -> None:
        """The handler failed (reverse order); raise to replace the error."""

    def decided(self, message: IncomingMessage, verdict: Verdict) -> None:
        """What happens to the message, once decided (reverse order); observe only."""


def run_before(
    chain: Sequence[Middleware], message: IncomingMessage
) -> tuple[int, Exception | None]:
    """``before`` of each middleware in order; how many completed, and the error that stopped
    the rest (None: all completed, run the handler)."""
    for index, middleware in enumerate(chain):
        try:
            middleware.before(message)
        except Exception as exc:
            return index, exc
    return len(chain), None


def run_after(
    chain: Sequence[Middleware],
    entered: int,
    message: IncomingMessage,
    error: BaseException | None,
) -> BaseException | None:
    """``after`` or ``on_error`` of the ``entered`` innermost-first; the error that remains."""
    for index in range(entered - 1, -1, -1):
        middleware = chain[index]
        try:
            if error is None:
                middleware.after(message)
            else:
                middleware.on_error(message, error)
        except Exception as exc:
            error = exc
    return error


def run_decided(chain: Sequence[Middleware], message: IncomingMessage, verdict: Verdict) -> None:
    """``decided`` of every middleware, innermost first; an error in one is logged."""
    for index in range(len(chain) - 1, -1, -1):
        try:
            chain[index].decided(message, verdict)
        except Exception:
            logger.exception(
                "middleware %r failed in decided() for message %s on %s",
                chain[index],
                message.message_id,
                message.queue,
            )
