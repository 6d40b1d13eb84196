"""One plain channel for the tools that ask the broker things in turn: the parking-lot tools,
exact queue counts, the shard check, the Spark driver's checks, the publisher's layout check.

They declare (passively, mostly), bind, purge, consume and settle one call at a time, where
the publisher and the workers stream. ``ChannelSession`` is the publisher's ``Session`` (the
same handshake, heartbeats and connection close) with one channel outside confirm mode whose
method replies, refusals and deliveries it keeps for the driver; it reads frames as the
workers' session does (``consuming``: deliveries read by offset); no I/O.
``Channel`` drives it over the blocking transport (``SocketWire``).

A method the broker refuses (a passive declare of something missing: 404) closes the channel,
not the connection: the call raises ``ChannelRefused`` and the channel opens again for the next
call. Methods that carry names are encoded here rather than through pamqp, which refuses names
outside ASCII that RabbitMQ and the spec accept.

Connecting goes through the connector every client uses (``amqp.connector``) with a rule of
one round (``Reconnect(rounds=1)``): each node once, in the walk's order; a refused login, a
certificate that does not verify or a port that answers with no AMQP frame stops as it stops
any client. A tool reports a broker it cannot reach instead of waiting through a publisher's
back-off.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Unpack

from pamqp import commands
from pamqp.exceptions import PAMQPException

from rabbitry.amqp import frames
from rabbitry.amqp.acks import ack_frame, nack_frame
from rabbitry.amqp.blocking import Disconnected, SocketWire
from rabbitry.amqp.confirms import ConfirmTracker
from rabbitry.amqp.connector import Outage, connect
from rabbitry.amqp.consuming import ConsumingSession
from rabbitry.amqp.deliveries import DeliverFields
from rabbitry.amqp.message import CHANNEL, Body, MessageBuilder
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError, ChannelRefused, ConnectionLost
from rabbitry.uri import mask_text

__all__ = ["Channel", "ChannelSession", "Delivered"]

DEFAULT_TIMEOUT = 8.0
"""Seconds for a connect (a port that accepts and never answers included) and for each reply."""

_SEND_EVERY = 0.2  # seconds an ack may wait in the buffer for more to share its write
_SEND_SIZE = 1 << 16


@dataclass(frozen=True, slots=True)
class Delivered:
    """One message the broker delivered on the channel."""

    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: commands.Basic.Properties
    body: bytes


_REPLIES = (
    commands.Queue.DeclareOk,
    commands.Queue.BindOk,
    commands.Queue.PurgeOk,
    commands.Exchange.DeclareOk,
    commands.Exchange.DeleteOk,
    commands.Basic.QosOk,
    commands.Basic.ConsumeOk,
    commands.Basic.CancelOk,
)


class ChannelSession(ConsumingSession):
    """A connection with one channel (no confirm mode): ``replies`` in order, ``refused`` when
    the broker closed the channel (it is opened again at once), ``deliveries`` as they came."""

    def __init__(self, settings: ConnectionSettings) -> None:
        super().__init__(settings, ConfirmTracker(), MessageBuilder(), confirms=False)
        self.replies: deque[Any] = deque()
        self.refused: ChannelRefused | None = None
        self.deliveries: deque[Delivered] = deque()
        self.server_properties: dict[str, Any] = {}
        """What the broker said of itself in ``connection.start`` (``cluster_name`` names it)."""

    def _start(self, frame: commands.Connection.Start) -> None:
        self.server_properties = dict(frame.server_properties or {})
        super()._start(frame)

    def settled(self, delivery_tag: int, multiple: bool) -> None:
        """Forget buffered deliveries an ack or nack just settled (tag 0, multiple: all)."""
        if not multiple:
            return
        if delivery_tag == 0:
            self.deliveries.clear()
        else:
            while self.deliveries and self.deliveries[0].delivery_tag <= delivery_tag:
                self.deliveries.popleft()

    def _frame(self, channel: int, frame: Any) -> None:
        if channel != CHANNEL:
            super()._frame(channel, frame)
        elif isinstance(frame, _REPLIES):
            self.replies.append(frame)
        else:  # channel.open-ok and close, a consumer the broker cancelled
            super()._frame(channel, frame)

    def _delivered(self, fields: DeliverFields, flags: int, properties: bytes, body: bytes) -> None:
        # the tools read the properties as pamqp's (their public type), decoded at once
        decoded = commands.Basic.Properties()
        try:
            decoded.unmarshal(flags, properties)
        except (PAMQPException, ValueError, struct.error) as exc:
            raise frames.FrameError(f"a content header cannot be read: {exc}") from None
        tag, consumer_tag, redelivered, exchange, key = fields
        self.deliveries.append(
            Delivered(consumer_tag, tag, redelivered, exchange, key, decoded, body)
        )

    def _channel_closed(self, frame: commands.Channel.Close) -> None:
        # the deliveries of the closed channel went back to their queues: their tags are void
        self.out += frames.method_frame(CHANNEL, commands.Channel.CloseOk())
        self.refused = ChannelRefused(frame.reply_code or 0, mask_text(frame.reply_text))
        self.replies.clear()
        self.deliveries.clear()
        self._drop_delivery()
        self.state = State.OPENING_CHANNEL
        self.out += frames.method_frame(CHANNEL, commands.Channel.Open())


class Channel:
    """A blocking connection with one channel: ``with Channel(url) as channel: ...``.

    Each method waits for the broker's answer (at most ``timeout`` seconds); acks, nacks and
    publishes are written in batches (``flush`` sends what waits). A refusal raises
    ``ChannelRefused``; a connection lost raises ``ConnectionLost``; both are ``BrokerError``s.
    Not thread-safe."""

    def __init__(
        self, url: str | ConnectionSettings | list[str], *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        settings = url if isinstance(url, ConnectionSettings) else ConnectionSettings.from_url(url)
        # one round over the nodes decides, whatever back-off the settings carry (a publisher's)
        never = replace(settings.backoff, give_up_after=None)
        self.settings = replace(settings, connect_timeout=timeout, backoff=never)
        self.timeout = timeout
        self._consumers = 0
        self._trying: SocketWire | None = None
        self._started = time.monotonic()
        self._failure: tuple[BaseException, float] | None = None
        self._wire: SocketWire | None
        self._session, self._wire = self._connect()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        return self._wire is not None

    @property
    def server_properties(self) -> dict[str, Any]:
        """The broker's ``connection.start`` properties (product, version, cluster_name)."""
        return self._session.server_properties

    def _connect(self) -> tuple[ChannelSession, SocketWire]:
        rule = Reconnect(self.settings, time.monotonic(), rounds=1)
        try:
            opened = connect(Outage(rule, tidy=self._failed_try), self._open)
        except ConnectionLost:  # every node failed once: say why the last one did
            assert self._failure is not None
            raise self._unreachable(*self._failure) from None
        assert opened is not None  # a channel never stops an outage half way
        return opened

    def _open(self, target: ConnectionSettings) -> tuple[ChannelSession, SocketWire]:
        self._started = time.monotonic()
        self._trying = wire = SocketWire(target)
        session = ChannelSession(target)
        wire.handshake(session)
        self._trying = None
        return session, wire

    def _failed_try(self, exc: BaseException) -> None:
        if self._trying is not None:
            self._trying.close()
            self._trying = None
        self._failure = (exc, time.monotonic() - self._started)

    def _unreachable(self, exc: BaseException, took: float) -> BrokerError:
        display = self.settings.display
        if isinstance(exc, TimeoutError) or took >= self.timeout:
            return BrokerError(
                f"{display} did not complete the AMQP handshake in time: is it a RabbitMQ"
                " AMQP port (5672, or 5671 for amqps)? set --url or RABBITRY_URL"
            )
        reason = f"{type(exc).__name__}: {mask_text(str(exc))}".rstrip(": ")
        return BrokerError(
            f"cannot connect to {display}: {reason}: is the broker running and listening"
            " there? set --url or RABBITRY_URL"
        )

    def close(self) -> None:
        """Close the connection (unacked deliveries go back to their queues)."""
        wire, session = self._wire, self._session
        if wire is None:
            return
        self._wire = None
        wire.close_session(session)

    # -- I/O ------------------------------------------------------------------------------------

    def _pump(self, timeout: float, *, want_read: bool = True) -> None:
        wire, session = self._wire, self._session
        if wire is None:
            raise ConnectionLost(f"the connection to {self.settings.display} is closed")
        try:
            wire.exchange(session, timeout, want_read=want_read)
            if session.tick(time.monotonic()):
                return
            reason = "no heartbeat from the broker"
        except Disconnected as exc:
            reason = str(exc)
        self._wire = None
        wire.close()
        raise ConnectionLost(f"lost the connection to {self.settings.display}: {reason}")

    def _until(self, done: Any, what: str) -> None:
        """Pump until ``done()`` is true; a refusal meanwhile raises it."""
        session = self._session
        end = time.monotonic() + self.timeout
        while True:
            refused = session.refused
            if refused is not None:
                session.refused = None
                raise refused
            if done():
                return
            left = end - time.monotonic()
            if left <= 0:
                raise BrokerError(
                    f"{self.settings.display} did not answer {what} in {self.timeout} s"
                )
            self._pump(min(left, 0.5))

    def _call(self, method: bytes, reply: type[Any], what: str) -> Any:
        session = self._session
        self._until(lambda: session.ready, "channel.open")  # again after a refusal
        session.replies.clear()
        session.out += method
        self._until(lambda: bool(session.replies), what)
        answer = session.replies.popleft()
        if not isinstance(answer, reply):
            raise BrokerError(f"{self.settings.display} answered {what} with {answer.name}")
        return answer

    def flush(self) -> None:
        """Write every ack, nack and publish still buffered."""
        wire = self._wire
        while wire is not None and (self._session.out or wire.wbuf):
            self._pump(0.5, want_read=False)

    def _send_soon(self) -> None:
        session = self._session
        if len(session.out) >= _SEND_SIZE or time.monotonic() - session.last_sent >= _SEND_EVERY:
            self._pump(0.0)

    # -- methods --------------------------------------------------------------------------------

    def queue_declare(
        self, queue: str, **options: Unpack[frames.QueueDeclareOptions]
    ) -> commands.Queue.DeclareOk:
        """Declare (or with ``passive`` only look up) ``queue``; its name and counts."""
        frame = frames.queue_declare_frame(CHANNEL, queue, **options)
        answer: commands.Queue.DeclareOk = self._call(
            frame, commands.Queue.DeclareOk, f"queue.declare of {queue!r}"
        )
        return answer

    def exchange_declare(
        self, exchange: str, exchange_type: str = "direct", **options: Unpack[frames.DeclareOptions]
    ) -> None:
        """Declare (or with ``passive`` only look up) ``exchange``."""
        frame = frames.exchange_declare_frame(CHANNEL, exchange, exchange_type, **options)
        self._call(frame, commands.Exchange.DeclareOk, f"exchange.declare of {exchange!r}")

    def exchange_delete(self, exchange: str) -> None:
        frame = _method(40, 20, b"\x00\x00" + _names(exchange) + _bits())
        self._call(frame, commands.Exchange.DeleteOk, f"exchange.delete of {exchange!r}")

    def queue_bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        payload = _names(queue, exchange, routing_key) + _bits() + _table(None)
        frame = _method(50, 20, b"\x00\x00" + payload)
        self._call(frame, commands.Queue.BindOk, f"queue.bind of {queue!r}")

    def queue_purge(self, queue: str) -> int:
        """Delete every message ready in ``queue``; how many."""
        frame = _method(50, 30, b"\x00\x00" + _names(queue) + _bits())
        answer = self._call(frame, commands.Queue.PurgeOk, f"queue.purge of {queue!r}")
        return int(answer.message_count or 0)

    def qos(self, prefetch_count: int) -> None:
        """At most ``prefetch_count`` unacked deliveries (0: no limit)."""
        frame = frames.method_frame(CHANNEL, commands.Basic.Qos(prefetch_count=prefetch_count))
        self._call(frame, commands.Basic.QosOk, "basic.qos")

    def consume(self, queue: str, *, no_ack: bool = False) -> str:
        """Start delivering ``queue`` (``next_delivery`` reads them); the consumer tag."""
        self._consumers += 1
        tag = f"rabbitry.tool.{self._consumers}"
        frame = frames.consume_frame(CHANNEL, queue, tag, no_ack=no_ack)
        self._call(frame, commands.Basic.ConsumeOk, f"basic.consume of {queue!r}")
        return tag

    def cancel(self, consumer_tag: str) -> None:
        """Stop a consumer; deliveries already sent stay unacked until settled."""
        frame = frames.cancel_frame(CHANNEL, consumer_tag)
        self._call(frame, commands.Basic.CancelOk, "basic.cancel")

    def next_delivery(self, timeout: float) -> Delivered | None:
        """The next delivery, waiting up to ``timeout`` seconds for one; None if none came."""
        session = self._session
        end = time.monotonic() + timeout
        while not session.deliveries:
            if session.refused is not None:
                refused, session.refused = session.refused, None
                raise refused
            left = end - time.monotonic()
            if left <= 0:
                return None
            self._pump(left)
        return session.deliveries.popleft()

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        self._session.out += ack_frame(CHANNEL, delivery_tag, multiple)
        self._session.settled(delivery_tag, multiple)
        self._send_soon()

    def nack(self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        """Give deliveries back (``requeue``, in their order) or drop them; tag 0 with
        ``multiple``: every delivery not yet settled."""
        self._session.out += nack_frame(CHANNEL, delivery_tag, requeue, multiple)
        self._session.settled(delivery_tag, multiple)
        self._send_soon()

    def publish(self, body: Body, *, exchange: str, routing_key: str, **properties: Any) -> None:
        """Publish without a confirm (``properties``: ``MessageBuilder.build``'s keywords)."""
        session = self._session
        self._until(lambda: session.ready, "channel.open")
        session.publish(
            session.builder.build(body, exchange=exchange, routing_key=routing_key, **properties)
        )
        self._send_soon()


def _method(class_id: int, method_id: int, payload: bytes) -> bytes:
    return frames.method_payload_frame(CHANNEL, class_id, method_id, payload)


def _names(*names: str) -> bytes:
    return b"".join(frames.shortstr(name, "name") for name in names)


_bits = frames.bits


def _table(arguments: Mapping[str, Any] | None) -> bytes:
    return frames.headers_table(arguments or {})
