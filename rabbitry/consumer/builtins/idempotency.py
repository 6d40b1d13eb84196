"""Built-in middleware: deliveries that must not run again. A handler with
``idempotent=True`` skips a message id it handled before (the app's idempotency store, written
once the handler succeeded); with a cancellation store (``App(cancellation=...)``) a cancel
message notes its job and a cancelled job is dropped (``decision.before_handler``)."""

from __future__ import annotations

import logging

from rabbitry.consumer.app import App, Route
from rabbitry.consumer.builtins.hooks import BuiltinMiddleware
from rabbitry.consumer.decision import Action, Verdict, before_handler, cancel_target
from rabbitry.consumer.failure_log import log_fields
from rabbitry.consumer.message import IncomingMessage

logger = logging.getLogger("rabbitry.worker")


class Idempotency(BuiltinMiddleware):
    def __init__(self, app: App) -> None:
        self.app = app
        self.cancellation = app.cancellation

    def applies(self, route: Route) -> bool:
        return self.cancellation is not None or route.idempotent

    def screen(self, message: IncomingMessage, route: Route) -> Verdict | None:
        store = self.cancellation
        headers = message.headers if store is not None else None
        message_id = message.message_id
        cancelled = duplicate = False
        if store is not None:
            target = cancel_target(headers)
            if target is not None:
                store.cancel(target)
                logger.info("job %s cancelled (noted from %s)", target, route.queue)
            elif message_id is not None:
                cancelled = store.take(message_id)
        if route.idempotent and message_id is not None and not cancelled:
            duplicate = self.app.idempotency.seen(message_id)
        verdict = before_handler(headers, duplicate=duplicate, cancelled=cancelled)
        if verdict is not None and verdict.action is Action.CANCELLED:
            logger.info(
                "dropped cancelled job %s from %s",
                message_id,
                route.queue,
                extra=log_fields(message, route.queue),
            )
        return verdict

    def succeeded(self, message: IncomingMessage, route: Route) -> None:
        if route.idempotent:
            message_id = message.message_id
            if message_id is not None:
                self.app.idempotency.remember(message_id)
