"""One worker connection as a state machine without I/O: the publisher's ``Session`` plus
consuming.

Before it consumes anything on its first connection, a worker's session checks the broker
(``start_check``): the broker's server properties from connection.start, then passive declares
on a side channel (``probe``). Only when nothing is missing does it become ready and consume;
otherwise ``start_refused`` holds the error and the session closes the connection.

The channel stays in confirm mode (retries and parking are confirmed publishes on the same
channel: ``basic.ack`` from the broker confirms a publish, ``basic.ack`` from the client
settles a delivery; the two never mix up). After the handshake it sets the prefetch and starts
one consumer per queue. Frames are read by ``rabbitry.amqp.consuming`` (deliveries assembled
without a general-purpose decoder, the properties kept raw for ``IncomingMessage`` to decode on
demand); everything else goes through the publisher session's handling (pamqp).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from rabbitry.amqp import frames
from rabbitry.amqp.confirms import ConfirmTracker, Delivery
from rabbitry.amqp.consuming import ConsumingSession
from rabbitry.amqp.deliveries import DeliverFields
from rabbitry.amqp.message import CHANNEL, MessageBuilder
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.preflight import BrokerFacts, StartCheck
from rabbitry.consumer.probe import PROBE_CHANNEL, Probe
from rabbitry.errors import TopologyMissing

CONSUMER_TAG_PREFIX = "rabbitry."


@dataclass(frozen=True)
class Subscription:
    """One queue this connection consumes from."""

    queue: str
    arguments: dict[str, Any] = field(default_factory=dict)
    """basic.consume arguments (e.g. ``x-priority``)."""


class ConsumerSession(ConsumingSession):
    """Publisher session that also consumes; ``inbox`` collects parsed deliveries."""

    def __init__(
        self,
        settings: ConnectionSettings,
        tracker: ConfirmTracker,
        builder: MessageBuilder,
        *,
        subscriptions: Sequence[Subscription],
        prefetch: int,
        resend: list[Delivery] | None = None,
        generation: int = 0,
        start_check: StartCheck | None = None,
    ) -> None:
        super().__init__(settings, tracker, builder, confirms=True, resend=resend)
        self.start_check = start_check
        """Run before the first consumer starts, unless it passed on an earlier connection."""
        self.server_properties: dict[str, Any] = {}
        self.start_refused: TopologyMissing | None = None
        """Why the start-up check refused the worker (the connection is then closed)."""
        self._probe: Probe | None = None
        self.checked: int | None = None
        """The objects the start-up check found on this connection (None: it did not run)."""
        self.subscriptions = list(subscriptions)
        self.prefetch = prefetch
        self.inbox: list[IncomingMessage] = []
        self.generation = generation
        """Bumped whenever the channel is (re)opened: older delivery tags are void."""
        self.consuming: set[int] = set()
        self.cancelled_by_broker: list[str] = []
        self.paused: set[int] = set()
        """Consumers not started when the channel opens (their queue's kill switch is open)."""
        self.stopping = False

    # -- consuming --------------------------------------------------------------------------------

    def _become_ready(self) -> None:
        check = self.start_check
        if check is not None and not check.passed and not self.stopping:
            # not ready yet: nothing is resent, seeded or consumed before the check passes
            probe = self._probe = Probe(check.needs(BrokerFacts.of(self.server_properties)))
            self.out += probe.start()
            if not probe.done:
                return
            self._checked(probe)
            return
        super()._become_ready()
        self.generation += 1
        self.consuming.clear()
        if self.stopping:
            return
        self.out += frames.method_frame(
            CHANNEL, commands.Basic.Qos(prefetch_count=min(self.prefetch, 65535))
        )
        for index in range(len(self.subscriptions)):
            if index not in self.paused:
                self._consume(index)

    def _consume(self, index: int) -> None:
        sub = self.subscriptions[index]
        self.out += frames.consume_frame(
            CHANNEL, sub.queue, f"{CONSUMER_TAG_PREFIX}{index}", arguments=sub.arguments
        )

    def _checked(self, probe: Probe) -> None:
        """The probe has every answer: consume, or refuse and close the connection."""
        check = self.start_check
        assert check is not None
        if probe.missing:
            broker = self.settings.display.rsplit("/", 1)[0]  # the vhost is named apart
            self.start_refused = check.refusal(probe.missing, self.settings.vhost, broker)
            self.close()
            return
        check.passed = True
        self.checked = len(probe.asked)
        self._become_ready()

    def cancel_consumers(self) -> None:
        """Ask the broker to stop delivering (graceful shutdown); in-flight ones stay ours."""
        self.stopping = True
        if not self.ready:
            return
        for index in range(len(self.subscriptions)):
            self.out += frames.cancel_frame(CHANNEL, f"{CONSUMER_TAG_PREFIX}{index}")

    def pause(self, indices: Sequence[int]) -> None:
        """Stop the consumers ``indices`` (a kill switch tripped), now and after a reconnect;
        the deliveries already in hand stay the worker's, unacked."""
        self.paused.update(indices)
        if self.ready and not self.stopping:
            for index in indices:
                self.out += frames.cancel_frame(CHANNEL, f"{CONSUMER_TAG_PREFIX}{index}")

    def resume(self, indices: Sequence[int]) -> None:
        """Start the paused consumers ``indices`` again (with the tags they had)."""
        self.paused.difference_update(indices)
        if self.ready and not self.stopping:
            for index in indices:
                self._consume(index)

    def _channel_closed(self, frame: commands.Channel.Close) -> None:
        self._drop_delivery()
        super()._channel_closed(frame)

    # -- reading ----------------------------------------------------------------------------------

    def _delivered(self, fields: DeliverFields, flags: int, properties: bytes, body: bytes) -> None:
        tag, consumer_tag, redelivered, exchange, key = fields
        consumer = _consumer_index(consumer_tag)
        queue = self.subscriptions[consumer].queue if consumer >= 0 else ""
        message = IncomingMessage(
            tag, consumer, redelivered, exchange, key, flags, properties, body, queue
        )
        message.generation = self.generation
        self.inbox.append(message)

    def _frame(self, channel: int, frame: Any) -> None:
        if channel == PROBE_CHANNEL:
            probe = self._probe
            if probe is not None and not probe.done:
                self.out += probe.receive(frame)
                if probe.done:
                    self._checked(probe)
            return  # the side channel's close-ok
        if isinstance(frame, commands.Basic.ConsumeOk):
            self.consuming.add(_consumer_index(frame.consumer_tag))
        elif isinstance(frame, commands.Basic.CancelOk):
            self.consuming.discard(_consumer_index(frame.consumer_tag))
        elif isinstance(frame, commands.Basic.Cancel):
            index = _consumer_index(frame.consumer_tag)
            self.consuming.discard(index)
            if 0 <= index < len(self.subscriptions):
                self.cancelled_by_broker.append(self.subscriptions[index].queue)
        elif isinstance(frame, commands.Basic.QosOk):
            pass
        else:
            if isinstance(frame, commands.Connection.Start):
                self.server_properties = dict(frame.server_properties or {})
            super()._frame(channel, frame)


def _consumer_index(tag: str | None) -> int:
    if tag and tag.startswith(CONSUMER_TAG_PREFIX):
        try:
            return int(tag[len(CONSUMER_TAG_PREFIX) :])
        except ValueError:
            return -1
    return -1
