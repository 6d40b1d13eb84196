"""Exact message counts over AMQP (passive declare), where management statistics lag.

The management API's counts are refreshed every few seconds, and quorum queues do not support
the broker's ``if-empty`` delete; before deleting such a queue rabbitry asks the queue itself.
"""

from __future__ import annotations

import pika
import pika.exceptions

from rabbitry.amqp.pika_errors import blocking_connection
from rabbitry.errors import BrokerError
from rabbitry.provisioner.endpoints import Endpoints


class AmqpQueueCounter:
    """Callable ``(vhost, queue) -> (messages, consumers)``; one short connection per call."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    def __call__(self, vhost: str, queue: str) -> tuple[int, int]:
        try:
            connection = blocking_connection(self.endpoints.amqp_url_for(vhost))
        except BrokerError as exc:
            raise BrokerError(
                f"cannot count the messages of {vhost}/{queue} over AMQP: {exc}"
                " (or pass --force to go on without the count)"
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
