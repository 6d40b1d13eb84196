"""Connections through pika (the dead-letter tools, exact queue counts, shard checks, the Spark
sink's checks) fail in the same words as rabbitry's own client: who, where, why, what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rabbitry.amqp.reconnect import refusal_error
from rabbitry.amqp.session import ConnectionRefused
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError
from rabbitry.uri import mask_text, mask_uri

if TYPE_CHECKING:
    import pika


def connect_error(url: str, exc: BaseException) -> BrokerError:
    """The ``BrokerError`` for a pika connection to ``url`` that failed with ``exc``."""
    import pika.exceptions

    try:
        settings = ConnectionSettings.from_url(url)
    except (ValueError, BrokerError):
        return BrokerError(f"cannot connect to {mask_uri(url)}: {mask_text(str(exc))}")
    # pika wraps what happened in AMQPConnectionError(s); the broker's own refusal is inside
    cause: BaseException = exc
    while True:
        inner = cause.args[0] if cause.args else getattr(cause, "exception", None)
        if not isinstance(inner, BaseException):
            break
        cause = inner
    tls = settings.tls_failure(cause)
    if tls is not None:
        return tls
    if isinstance(cause, pika.exceptions.ConnectionClosedByBroker):
        return refusal_error(settings, ConnectionRefused(cause.reply_code, cause.reply_text, True))
    if isinstance(cause, pika.exceptions.ProbableAuthenticationError):
        return refusal_error(settings, ConnectionRefused(403, "ACCESS_REFUSED", True))
    if isinstance(cause, pika.exceptions.ProbableAccessDeniedError):
        return refusal_error(settings, ConnectionRefused(530, "NOT_ALLOWED", True))
    reason = f"{type(cause).__name__}: {mask_text(str(cause))}".rstrip(": ")
    return BrokerError(
        f"cannot connect to {settings.display}: {reason}: is the broker running and listening"
        " there? set --url or RABBITRY_URL"
    )


def blocking_connection(url: str, *, timeout: float = 10.0) -> pika.BlockingConnection:
    """A pika ``BlockingConnection`` to ``url``, one attempt, failures as ``BrokerError``."""
    import pika
    import pika.exceptions

    try:
        params = pika.URLParameters(url)
    except ValueError as exc:
        raise BrokerError(
            f"AMQP URL {mask_uri(url)!r} cannot be used ({exc}): write it like"
            " amqp://user:password@host:5672/vhost"
        ) from None
    params.connection_attempts = 1
    params.socket_timeout = timeout
    params.stack_timeout = timeout * 2
    try:
        return pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise connect_error(url, exc) from None
