"""Where each stream consumer of a worker stands: the offsets of its deliveries not yet settled,
where it subscribes again after a reconnect, and, for a consumer with ``track=NAME``, the
records of its position the worker publishes to the broker and reads back at its first
connect (``tracking``). The rule per consumer is ``positions.StreamPosition``'s (pure)."""

from __future__ import annotations

import logging
import time

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.positions import StreamPosition
from rabbitry.consumer.routes import STREAM_OFFSET_ARGUMENT, Route
from rabbitry.consumer.session import ConsumerSession, Subscription
from rabbitry.consumer.tracking import RecordSchedule, record_body, tracking_stream

logger = logging.getLogger("rabbitry.worker")


class StreamOffsets:
    """The stream consumers among a worker's ``routes`` (by consumer index)."""

    def __init__(self, routes: list[Route], builder: MessageBuilder, *, batch: int) -> None:
        self.routes = routes
        self.builder = builder
        self.positions = {
            index: StreamPosition(route.consume_arguments.get(STREAM_OFFSET_ARGUMENT))
            for index, route in enumerate(routes)
            if route.stream
        }
        """Stream consumers by index: where each subscribes again after a reconnect."""
        self.tracked = {
            index: tracking_stream(route.queue, route.track)
            for index, route in enumerate(routes)
            if route.stream and route.track
        }
        """Stream consumers whose position is kept on the broker, with the stream keeping it."""
        self.records = RecordSchedule(batch=batch)
        self.recording: dict[Delivery, int] = {}
        """Position records published and not yet confirmed, by consumer index."""
        self.read = not self.tracked
        """The stored positions were read (or there are none to read)."""
        for route in routes:
            if route.stream and not route.track:
                logger.info(
                    "stream %s: its position is kept in this process only; a new process starts"
                    " at offset=%s again (give the handler track=NAME to keep it on the broker)",
                    route.queue,
                    route.consume_arguments.get(STREAM_OFFSET_ARGUMENT, "next"),
                )
        self.offsets: dict[IncomingMessage, int] = {}
        """Stream deliveries not yet settled, with their offsets."""

    def resume(self, subscriptions: list[Subscription]) -> None:
        """Subscribe each stream consumer where it left off (its offset, at first); the
        deliveries of the channel before are forgotten."""
        self.offsets.clear()
        for index, position in self.positions.items():
            offset = position.resume()
            if offset is None:
                continue
            sub = subscriptions[index]
            subscriptions[index] = Subscription(
                sub.queue, {**sub.arguments, STREAM_OFFSET_ARGUMENT: offset}
            )

    def read_stored(self, settings: ConnectionSettings) -> None:
        """Start each tracked stream consumer at its stored position (once, at the first
        connect); a broker out of reach is a lost connection (the shells try again)."""
        from rabbitry.consumer.tracking import stored_positions
        from rabbitry.errors import StreamUnreachable

        try:
            stored = stored_positions(settings, self.tracked)
        except StreamUnreachable as exc:
            raise ConnectionError(str(exc)) from None
        for index, offset in stored.items():
            route = self.routes[index]
            if offset is None:
                logger.info(
                    "stream %s: no stored position for reader %r; starting at offset=%s",
                    route.queue,
                    route.track,
                    self.positions[index].start,
                )
                continue
            logger.info(
                "stream %s: reader %r resumes at offset %d", route.queue, route.track, offset
            )
            self.positions[index] = StreamPosition(offset)
            self.records.known(index, offset)
        self.read = True

    def record(self, session: ConsumerSession, force: bool) -> None:
        """Publish the position of each tracked stream consumer that is due a record."""
        now = time.monotonic()
        for index, stream in self.tracked.items():
            offset = self.positions[index].committed()
            if offset is None or not self.records.due(index, offset, now, force=force):
                continue
            delivery = self.builder.build(
                record_body(offset), exchange="", routing_key=stream, mandatory=True
            )
            self.recording[delivery] = index
            session.publish(delivery)

    def take(self, message: IncomingMessage) -> bool:
        """Note a stream delivery's offset; False for a copy below the offset the consumer
        subscribed at again, which the broker sends from the start of its chunk (the caller
        acks it without its handler)."""
        offset = message.headers.get(STREAM_OFFSET_ARGUMENT)
        if not isinstance(offset, int):
            return True
        if not self.positions[message.consumer].take(offset):
            return False
        self.offsets[message] = offset
        return True

    def handled(self, message: IncomingMessage) -> None:
        """``message`` is acked: its consumer's position may move past it."""
        offset = self.offsets.pop(message, None)
        if offset is not None:
            self.positions[message.consumer].handled(offset)

    def settled(self, delivery: Delivery) -> bool:
        """A publish settled: False when it is no position record, else the record is done
        (written again later when the broker refused it)."""
        index = self.recording.pop(delivery, None)
        if index is None:
            return False
        if delivery.status is not Status.CONFIRMED:
            logger.warning(
                "could not store the position of stream %s: %s; writing it again",
                self.routes[index].queue,
                delivery.error,
            )
            self.records.failed(index, time.monotonic())
        return True
