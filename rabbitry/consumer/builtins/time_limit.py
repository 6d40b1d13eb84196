"""Built-in middleware: a handler's time-to-run (``timeout=`` of ``@app.handler``).

A handler that returns after its time-to-run has failed with ``HandlerTimeout``, which the
app's ``on_error`` hooks and the retry decision see like any other failure. (The async worker
also cancels a handler at its time-to-run; a blocking one cannot be interrupted, so this
judges it when it returns.)"""

from __future__ import annotations

from rabbitry.consumer.app import Route
from rabbitry.consumer.builtins.hooks import BuiltinMiddleware, Error
from rabbitry.consumer.message import IncomingMessage
from rabbitry.errors import HandlerTimeout


class TimeLimit(BuiltinMiddleware):
    def applies(self, route: Route) -> bool:
        return route.timeout is not None

    def ended(self, message: IncomingMessage, route: Route, error: Error, took: float) -> Error:
        if error is None and route.timeout is not None and took > route.timeout:
            return HandlerTimeout(
                f"handler of {route.queue} ran {took:.3f} s, longer than its"
                f" time-to-run of {route.timeout:g} s"
            )
        return error


def cancelled_at_limit(route: Route) -> HandlerTimeout:
    """The failure of a coroutine handler cancelled at its time-to-run (both shells')."""
    return HandlerTimeout(
        f"handler of {route.queue} ran longer than its time-to-run of {route.timeout:g} s"
    )
