"""Connections through pika (the dead-letter tools, exact queue counts, shard checks, the Spark
sink's checks) fail in the same words as rabbitry's own client: who, where, why, what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rabbitry.amqp.reconnect import NodeWalk, refusal_error
from rabbitry.amqp.session import ConnectionRefused
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError
from rabbitry.uri import mask_text, mask_uri

if TYPE_CHECKING:
    import pika


def connect_error(url: str | ConnectionSettings, exc: BaseException) -> BrokerError:
    """The ``BrokerError`` for a pika connection to ``url`` that failed with ``exc``."""
    import pika.exceptions

    if isinstance(url, ConnectionSettings):
        settings = url
    else:
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
    if isinstance(cause, TimeoutError) or "Timeout" in type(cause).__name__:
        return BrokerError(
            f"{settings.display} did not complete the AMQP handshake in time: is it a RabbitMQ"
            " AMQP port (5672, or 5671 for amqps)? set --url or RABBITRY_URL"
        )
    reason = f"{type(cause).__name__}: {mask_text(str(cause))}".rstrip(": ")
    return BrokerError(
        f"cannot connect to {settings.display}: {reason}: is the broker running and listening"
        " there? set --url or RABBITRY_URL"
    )


def blocking_connection(
    url: str | ConnectionSettings, *, timeout: float = 8.0
) -> pika.BlockingConnection:
    """A pika ``BlockingConnection`` to ``url``, one attempt of at most ``timeout`` seconds
    (a port that accepts and never answers included), failures as ``BrokerError``.

    The URL is read as rabbitry's own client reads it (``ConnectionSettings.from_url``): the
    same query options (``amqp.url_options``: TLS files, ``verify``, ``server_name_indication``,
    ``heartbeat``, ``channel_max``, ``frame_max``, ``connection_name``, ``auth_mechanism``) work
    on every connection rabbitry makes. Several
    URLs (a cluster's nodes) are tried one after the other, in the walk's order."""
    import pika
    import pika.credentials

    settings = url if isinstance(url, ConnectionSettings) else ConnectionSettings.from_url(url)
    credentials: pika.credentials.PlainCredentials | pika.credentials.ExternalCredentials
    if settings.external_auth:
        credentials = pika.credentials.ExternalCredentials()
    else:
        credentials = pika.PlainCredentials(settings.username, settings.password)
    walk = NodeWalk(settings)
    params = []
    for _ in range(len(walk)):
        node = walk.current
        walk.advance()
        params.append(
            pika.ConnectionParameters(
                host=node.host,
                port=node.port,
                virtual_host=node.vhost,
                credentials=credentials,
                ssl_options=(pika.SSLOptions(node.tls, node.tls_server_name) if node.tls else None),
                heartbeat=node.heartbeat,
                frame_max=node.frame_max,
                channel_max=node.channel_max or pika.ConnectionParameters.DEFAULT_CHANNEL_MAX,
                client_properties=(
                    {"connection_name": node.connection_name} if node.connection_name else None
                ),
                connection_attempts=1,
                socket_timeout=timeout,
                stack_timeout=timeout,
            )
        )
    try:
        return pika.BlockingConnection(params)
    except Exception as exc:  # pika's connection workflow raises more than AMQPError
        raise connect_error(url, exc) from None
