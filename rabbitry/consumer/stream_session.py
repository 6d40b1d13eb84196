"""The AMQP 0-9-1 side of reading a stream queue: ``StreamSession``, a ``ConsumerSession`` whose
consumers start one by one at a stream offset, the offset every delivery carries
(``offset_of``), and the errors of a stream that cannot be read. ``streams.StreamReader``
drives it over a blocking socket."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from pamqp import commands

from rabbitry.amqp import frames
from rabbitry.amqp.confirms import ConfirmTracker
from rabbitry.amqp.message import CHANNEL, MessageBuilder
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.session import CONSUMER_TAG_PREFIX, ConsumerSession, Subscription
from rabbitry.errors import StreamError as StreamError
from rabbitry.errors import StreamNotFound as StreamNotFound
from rabbitry.errors import StreamUnreachable as StreamUnreachable
from rabbitry.uri import mask_text

OFFSET_HEADER = "x-stream-offset"
_QUEUE_IN_TEXT = re.compile(r"queue '(?P<name>.*?)' in vhost")


class StreamSession(ConsumerSession):
    """A ``ConsumerSession`` whose consumers are started one by one (``consume``) with a
    stream offset; a channel the broker closes is not reopened: ``refused`` says why."""

    def __init__(self, settings: ConnectionSettings, *, prefetch: int) -> None:
        super().__init__(
            settings,
            ConfirmTracker(),
            MessageBuilder(timestamps=False),
            subscriptions=(),
            prefetch=prefetch,
        )
        self.refused: tuple[int, str, str] | None = None
        """(reply code, reply text, queue) of the consume the broker refused."""
        self.declared: set[str] = set()
        """Queues the broker answered ``declare-ok`` for."""

    def declare(self, queue: str, arguments: Mapping[str, Any]) -> None:
        """Declare a durable queue (``declared`` names it once the broker answered)."""
        self.out += frames.queue_declare_frame(CHANNEL, queue, durable=True, arguments=arguments)

    def _frame(self, channel: int, frame: Any) -> None:
        if isinstance(frame, commands.Queue.DeclareOk):
            self.declared.add(frame.queue or "")
        else:
            super()._frame(channel, frame)

    def consume(self, queue: str, offset: int | str | dt.datetime) -> int:
        """Start a consumer at ``offset``; its index (``IncomingMessage.consumer``)."""
        index = len(self.subscriptions)
        subscription = Subscription(queue, {OFFSET_HEADER: offset})
        self.subscriptions.append(subscription)
        self.out += frames.consume_frame(
            CHANNEL, queue, f"{CONSUMER_TAG_PREFIX}{index}", arguments=subscription.arguments
        )
        return index

    def cancel(self, index: int) -> None:
        self.out += frames.cancel_frame(CHANNEL, f"{CONSUMER_TAG_PREFIX}{index}")

    def _channel_closed(self, frame: commands.Channel.Close) -> None:
        named = _QUEUE_IN_TEXT.search(frame.reply_text or "")
        queue = named["name"] if named else ""
        if not queue and self.subscriptions:
            queue = self.subscriptions[-1].queue
        self.refused = (frame.reply_code or 0, mask_text(frame.reply_text), queue)
        self.stopping = True  # the reopened channel starts no consumer
        super()._channel_closed(frame)


def offset_of(message: IncomingMessage) -> int:
    value = message.headers.get(OFFSET_HEADER)
    if not isinstance(value, int):
        raise StreamError(
            f"a delivery from {message.queue!r} has no {OFFSET_HEADER} header: is it a stream?"
        )
    return value
