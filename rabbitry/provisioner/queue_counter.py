"""Exact message counts over AMQP (passive declare), where management statistics lag.

The management API's counts are refreshed every few seconds, and quorum queues do not support
the broker's ``if-empty`` delete; before deleting such a queue rabbitry asks the queue itself.
"""

from __future__ import annotations

import pika
import pika.exceptions

from rabbitry.errors import BrokerError
from rabbitry.provisioner.endpoints import Endpoints
from rabbitry.uri import mask_text


class AmqpQueueCounter:
    """Callable ``(vhost, queue) -> (messages, consumers)``; one short connection per call."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    def __call__(self, vhost: str, queue: str) -> tuple[int, int]:
        params = pika.URLParameters(self.endpoints.amqp_url_for(vhost))
        params.connection_attempts = 1
        params.socket_timeout = 10
        try:
            connection = pika.BlockingConnection(params)
        except pika.exceptions.AMQPError as exc:
            raise BrokerError(
                f"cannot count the messages of {vhost}/{queue} over AMQP: "
                f"{mask_text(repr(exc))}; check --url / RABBITRY_URL, or use --force"
            ) from None
        try:
            frame = connection.channel().queue_declare(queue, passive=True)
            return int(frame.method.message_count), int(frame.method.consumer_count)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return 0, 0
            raise BrokerError(f"cannot inspect {vhost}/{queue}: {exc.reply_text}") from None
        finally:
            if connection.is_open:
                connection.close()
