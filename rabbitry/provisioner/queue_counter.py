"""Exact message counts over AMQP (passive declare), where management statistics lag.

The management API's counts are refreshed every few seconds, and quorum queues do not support
the broker's ``if-empty`` delete; before deleting or migrating a queue, and before a plan says how
many messages are at stake, rabbitry asks the queue itself.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from rabbitry.errors import BrokerError
from rabbitry.management.endpoints import Endpoints

if TYPE_CHECKING:
    import pika


class AmqpQueueCounter:
    """Callable ``(vhost, queue) -> (messages, consumers)``: one connection per vhost, opened at
    the first count and kept for the next ones until ``close`` (or the end of a ``with``)."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self._connections: dict[str, pika.BlockingConnection] = {}
        self._channels: dict[str, pika.adapters.blocking_connection.BlockingChannel] = {}

    def __enter__(self) -> AmqpQueueCounter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            if connection.is_open:
                connection.close()
        self._connections.clear()
        self._channels.clear()

    def _channel(self, vhost: str, queue: str) -> pika.adapters.blocking_connection.BlockingChannel:
        # pika loads at the first count: most plans count nothing
        from rabbitry.amqp.pika_errors import blocking_connection

        connection = self._connections.get(vhost)
        if connection is None or not connection.is_open:
            try:
                connection = blocking_connection(self.endpoints.amqp_url_for(vhost))
            except BrokerError as exc:
                raise BrokerError(
                    f"cannot count the messages of {vhost}/{queue} over AMQP: {exc}"
                    " (or pass --force to go on without the count)"
                ) from None
            self._connections[vhost] = connection
            self._channels.pop(vhost, None)
        channel = self._channels.get(vhost)
        if channel is None or not channel.is_open:
            channel = connection.channel()
            self._channels[vhost] = channel
        return channel

    def __call__(self, vhost: str, queue: str) -> tuple[int, int]:
        import pika.exceptions

        channel = self._channel(vhost, queue)
        try:
            frame = channel.queue_declare(queue, passive=True)
            return int(frame.method.message_count), int(frame.method.consumer_count)
        except pika.exceptions.ChannelClosedByBroker as exc:
            # the broker closed this channel: the next count opens another on the same connection
            self._channels.pop(vhost, None)
            if exc.reply_code == 404:
                return 0, 0
            raise BrokerError(f"cannot inspect {vhost}/{queue}: {exc.reply_text}") from None
        except pika.exceptions.AMQPError as exc:
            self._connections.pop(vhost, None)
            self._channels.pop(vhost, None)
            raise BrokerError(
                f"lost the AMQP connection counting {vhost}/{queue}: {exc!r}"
            ) from None
