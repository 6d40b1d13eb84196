"""A scripted AMQP 0-9-1 broker in this process, for tests of code that publishes and consumes.

``ScriptedBroker`` answers rabbitry's own clients (``Publisher``, ``AsyncPublisher``,
``Worker``, ``AsyncWorker``) byte for byte, with no socket and no broker: point them at
``broker.url`` and they run their real code, handshake, confirms, deliveries and acks
included; the broker records every frame (``frames``) so a test can check what was said and
in which order. It answers at once, in the caller's thread, so a test needs no sleeps.

    with ScriptedBroker() as broker:
        broker.declare_queue("orders")
        with Publisher(broker.url) as publisher:
            publisher.publish(b"hello", routing_key="orders")
        assert broker.queue("orders").messages[0].body == b"hello"

What it speaks: the handshake (PLAIN or EXTERNAL, tune, open), channels, confirm mode,
exchange and queue declare (passive ones answer 404 for what it does not have), bind, unbind,
delete and purge, qos, consume and cancel, publish (confirmed by ``ack`` unless scripted
otherwise; a mandatory message that no queue takes comes back as ``basic.return``), the
client's ack, nack and reject, heartbeats and close. Deliveries follow the prefetch.

Faults on demand: ``answer_publishes`` (nack, hold the confirm until ``release_confirms``,
or drop the connection at a publish),
``drop_after`` (the connection drops at the n-th frame from now), ``close_channel_on`` (the
next such method closes its channel with 404, 406...), ``block``/``unblock``
(``connection.blocked``), ``close_connections`` (the broker closes with 320).

It is not a broker emulator: its routing is the tiny model of ``scripted_routing`` (one
vhost's worth, direct/fanout/topic and the default exchange; arguments kept, never acted on:
no TTL, dead-lettering, length limits, delivery limits, queue types, clustering). A method
it does not model (``basic.get``, ``exchange.bind``, ``tx.*``...) closes the connection with
540 NOT_IMPLEMENTED and a text that says so, and lands in ``not_modelled``. What only a broker
can tell is tested on one (``rabbitmq_vhost``).
"""

from __future__ import annotations

import enum
import itertools
import re
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame
from pamqp import heartbeat as pamqp_heartbeat

from rabbitry.amqp import frames, inprocess
from rabbitry.amqp.message import Body, encode_body
from rabbitry.testing.scripted_routing import (
    NotModelled,
    Routing,
    ScriptedMessage,
    ScriptedQueue,
)

__all__ = [
    "FrameRecord",
    "NotModelled",
    "PublishAnswer",
    "ScriptedBroker",
    "ScriptedMessage",
    "ScriptedQueue",
]

_HEAD = struct.Struct(">BHI")
_FRAME_MAX = 131072
_hosts = itertools.count(1)


class _ChannelError(Exception):
    """A client used a channel it did not open: the broker closes the connection (504)."""


class PublishAnswer(enum.Enum):
    """How the scripted broker answers one publish (``answer_publishes``)."""

    ACK = "ack"
    NACK = "nack"
    """``basic.nack``: the broker could not take it (the message is not stored)."""
    DROP = "drop"
    """The connection drops when the publish arrives: not stored, not confirmed."""
    HOLD = "hold"
    """Stored, but its confirm waits for ``release_confirms()``."""


@dataclass(frozen=True)
class FrameRecord:
    """One method the broker received (``sent=False``) or sent, in order across connections."""

    connection: int
    channel: int
    name: str
    """The method as the AMQP spec names it, lower case: ``basic.publish``, ``basic.ack``."""
    method: Any
    """pamqp's object of the method (its fields: ``method.delivery_tag``...)."""
    sent: bool
    message: ScriptedMessage | None = None
    """The content of a ``basic.publish``, ``basic.deliver`` or ``basic.return``."""

    def __repr__(self) -> str:
        way = "->" if self.sent else "<-"
        return f"<{way} {self.name} conn={self.connection} ch={self.channel}>"


@dataclass
class _Channel:
    number: int
    confirming: bool = False
    publish_seq: int = 0
    prefetch: int = 0
    delivery_tags: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    unacked: dict[int, tuple[str, ScriptedMessage]] = field(default_factory=dict)
    consumers: dict[str, str] = field(default_factory=dict)
    """consumer tag -> queue."""
    held: list[int] = field(default_factory=list)
    """Publish sequence numbers stored whose confirms wait for ``release_confirms``."""
    closing: bool = False
    """The broker closed it: frames are ignored until the client's close-ok."""
    publish: tuple[commands.Basic.Publish, commands.Basic.Properties, int] | None = None
    body: bytearray = field(default_factory=bytearray)


class _Connection:
    """One client connection: parses its frames, answers through ``send``."""

    def __init__(
        self,
        broker: ScriptedBroker,
        number: int,
        received: Callable[[bytes], None],
        lost: Callable[[], None],
    ) -> None:
        self.broker = broker
        self.number = number
        self.received = received
        self.lost = lost
        self.buffer = bytearray()
        self.greeted = False
        self.open = True
        self.channels: dict[int, _Channel] = {}

    # Link: what the client side calls
    def write(self, data: bytes) -> None:
        with self.broker.lock:
            if not self.open:
                return
            self.buffer += data
            self.broker._pump(self)

    def close(self) -> None:
        with self.broker.lock:
            self.broker._gone(self)

    def send(self, data: bytes) -> None:
        if self.open:
            self.received(data)


class ScriptedBroker:
    """An AMQP 0-9-1 broker in this process for rabbitry's clients; ``url`` reaches it while
    it is attached (``with ScriptedBroker() as broker``, or ``attach``/``detach``)."""

    def __init__(
        self,
        *,
        host: str | None = None,
        server_properties: Mapping[str, Any] | None = None,
        heartbeat: int = 0,
    ) -> None:
        self.host = host or f"scripted-{next(_hosts)}.rabbitry.invalid"
        """A name under ``.invalid``: without the broker attached it resolves nowhere."""
        self.server_properties: dict[str, Any] = {
            "product": "RabbitMQ",
            "version": "4.0.5",
            "platform": "rabbitry scripted broker",
            "capabilities": {
                "publisher_confirms": True,
                "basic.nack": True,
                "connection.blocked": True,
                "consumer_cancel_notify": True,
                "authentication_failure_close": True,
            },
            **(server_properties or {}),
        }
        self.heartbeat = heartbeat
        self.lock = threading.RLock()
        self._changed = threading.Condition(self.lock)
        self.routing = Routing()
        self.frames: list[FrameRecord] = []
        """Every method received and sent, in order (heartbeats and content frames aside)."""
        self.not_modelled: list[str] = []
        """What clients asked for that this broker does not model (each closed a connection)."""
        self.connections_opened = 0
        self._connections: list[_Connection] = []
        self._answers: deque[PublishAnswer] = deque()
        self._drop_in: int | None = None
        self._channel_faults: list[tuple[str, int, str]] = []
        self._blocked: str | None = None
        self._numbers = itertools.count(1)
        self._turns: dict[str, int] = {}

    # -- where it is ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The AMQP URL of this broker (any user and password are let in)."""
        return self.url_for("/")

    def url_for(self, vhost: str) -> str:
        """The URL of ``vhost`` (any vhost is let in; they are not told apart)."""
        from urllib.parse import quote

        return f"amqp://guest:guest@{self.host}:5672/{quote(vhost, safe='')}"

    def attach(self) -> ScriptedBroker:
        """Connections to ``host`` come here from now on."""
        inprocess.attach(self.host, self)
        return self

    def detach(self) -> None:
        """Drop every connection and let ``host`` resolve nowhere again."""
        inprocess.detach(self.host)
        with self.lock:
            for connection in list(self._connections):
                self._drop(connection)

    def __enter__(self) -> ScriptedBroker:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # -- the model, from the test's side --------------------------------------------------------

    def declare_queue(self, name: str, *, arguments: Mapping[str, Any] | None = None) -> None:
        with self.lock:
            self.routing.declare_queue(name, dict(arguments or {}))

    def declare_exchange(self, name: str, type: str = "direct") -> None:
        with self.lock:
            conflict = self.routing.declare_exchange(name, type)
            if conflict is not None:
                raise NotModelled(conflict)

    def bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        with self.lock:
            self._known(queue=queue, exchange=exchange)
            self.routing.bind(queue, exchange, routing_key)

    def queue(self, name: str) -> ScriptedQueue:
        with self.lock:
            self._known(queue=name)
            return self.routing.queues[name]

    def put(
        self,
        queue: str,
        body: Body = b"",
        *,
        headers: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        content_type: str | None = None,
        **properties: Any,
    ) -> ScriptedMessage:
        """Put a message in ``queue`` as if published to it through the default exchange;
        a consumer of the queue gets it at once (within its prefetch)."""
        data, ctype = encode_body(body, content_type)
        props = commands.Basic.Properties(
            content_type=ctype,
            headers=dict(headers) if headers else None,
            message_id=message_id,
            delivery_mode=2,
            **properties,
        )
        message = ScriptedMessage("", queue, data, props)
        with self.lock:
            self._known(queue=queue)
            self.routing.queues[queue].messages.append(message)
            self._dispatch(queue)
        return message

    def wait_for(self, condition: Callable[[ScriptedBroker], bool], timeout: float = 10.0) -> bool:
        """Wait until ``condition(broker)`` holds (checked whenever a frame comes or goes), at
        most ``timeout`` seconds; whether it holds. For clients that run in another thread
        (from asyncio: ``await asyncio.to_thread(broker.wait_for, ...)``)."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self), timeout)

    def move(self, source: str, target: str) -> int:
        """Move the ready messages of ``source`` to the end of ``target`` (consumers of
        ``target`` get them at once); how many. Stands in for what a broker does over time,
        which this one does not model: a retry tier's TTL dead-lettering its messages back."""
        with self.lock:
            self._known(queue=source)
            self._known(queue=target)
            messages = self.routing.queues[source].messages
            count = len(messages)
            self.routing.queues[target].messages.extend(messages)
            messages.clear()
            self._dispatch(target)
            self._changed.notify_all()
            return count

    def received(self, name: str) -> list[FrameRecord]:
        """The methods named ``name`` (``basic.publish``) that clients sent, in order."""
        with self.lock:
            return [f for f in self.frames if f.name == name and not f.sent]

    def sent(self, name: str) -> list[FrameRecord]:
        """The methods named ``name`` (``basic.deliver``) the broker sent, in order."""
        with self.lock:
            return [f for f in self.frames if f.name == name and f.sent]

    # -- faults and scripted answers ------------------------------------------------------------

    def answer_publishes(self, *answers: PublishAnswer | str) -> None:
        """Answer the next publishes (in confirm mode) so, in order; then ``ack`` again."""
        with self.lock:
            self._answers.extend(PublishAnswer(a) for a in answers)

    def release_confirms(self) -> int:
        """Send the confirms ``PublishAnswer.HOLD`` held back; how many."""
        count = 0
        with self.lock:
            for connection in self._connections:
                for channel in connection.channels.values():
                    for seq in channel.held:
                        self._send(connection, channel.number, commands.Basic.Ack(seq))
                    count += len(channel.held)
                    channel.held.clear()
        return count

    def drop_after(self, frames: int) -> None:
        """Drop the connection that sends the ``frames``-th frame from now (that frame is
        lost: the broker never acts on it). Heartbeats do not count."""
        if frames < 1:
            raise ValueError(f"drop_after needs a count of 1 or more, got {frames}")
        with self.lock:
            self._drop_in = frames

    def close_channel_on(self, method: str, code: int = 406, text: str | None = None) -> None:
        """The next time a client sends ``method`` (``queue.declare``, ``basic.publish``), close
        its channel with ``code`` (404 NOT_FOUND, 406 PRECONDITION_FAILED...) instead."""
        with self.lock:
            self._channel_faults.append((method.lower(), code, text or _REPLY.get(code, "")))

    def block(self, reason: str = "low on memory") -> None:
        """Send ``connection.blocked`` to every connection (and to those that open later)."""
        with self.lock:
            self._blocked = reason
            for connection in self._connections:
                self._send(connection, 0, commands.Connection.Blocked(reason=reason))

    def unblock(self) -> None:
        with self.lock:
            self._blocked = None
            for connection in self._connections:
                self._send(connection, 0, commands.Connection.Unblocked())

    def close_connections(
        self,
        code: int = 320,
        text: str = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
    ) -> None:
        """The broker closes every connection (``connection.close``), as on a shutdown."""
        with self.lock:
            for connection in list(self._connections):
                self._send(connection, 0, commands.Connection.Close(code, text, 0, 0))
                self._drop(connection)

    # -- Peer: a client connects --------------------------------------------------------------

    def open(self, received: Callable[[bytes], None], lost: Callable[[], None]) -> _Connection:
        with self.lock:
            self.connections_opened += 1
            connection = _Connection(self, next(self._numbers), received, lost)
            self._connections.append(connection)
            return connection

    # -- reading a connection's frames ----------------------------------------------------------

    def _pump(self, connection: _Connection) -> None:
        buf = connection.buffer
        if not connection.greeted:
            if len(buf) < 8:
                return
            if bytes(buf[:8]) != frames.PROTOCOL_HEADER:
                connection.send(frames.PROTOCOL_HEADER)
                self._drop(connection)
                return
            del buf[:8]
            connection.greeted = True
            self._send(
                connection,
                0,
                commands.Connection.Start(
                    server_properties=self.server_properties, mechanisms="PLAIN EXTERNAL"
                ),
            )
        while connection.open and len(buf) >= 8:
            _, channel, size = _HEAD.unpack_from(buf, 0)
            if len(buf) < size + 8:
                return
            data = bytes(buf[: size + 8])
            del buf[: size + 8]
            _, _, frame = pamqp_frame.unmarshal(data)
            if isinstance(frame, pamqp_heartbeat.Heartbeat):
                connection.send(frames.HEARTBEAT_FRAME)
                continue
            if self._drop_in is not None:
                self._drop_in -= 1
                if self._drop_in <= 0:
                    self._drop_in = None
                    self._drop(connection)
                    return
            try:
                self._frame(connection, channel, frame)
            except NotModelled as exc:
                self.not_modelled.append(str(exc))
                self._send(connection, 0, commands.Connection.Close(540, _text(exc), 0, 0))
                self._drop(connection)
            except _ChannelError as exc:
                text = f"CHANNEL_ERROR - {exc}"
                self._send(connection, 0, commands.Connection.Close(504, text, 0, 0))
                self._drop(connection)

    def _frame(self, connection: _Connection, number: int, frame: Any) -> None:
        if isinstance(frame, header.ContentHeader | pamqp_body.ContentBody):
            self._content(connection, number, frame)
            return
        name = method_name(frame)
        self._record(FrameRecord(connection.number, number, name, frame, False))
        channel = connection.channels.get(number)
        if channel is not None and channel.closing:
            if isinstance(frame, commands.Channel.CloseOk):
                self._forget_channel(connection, number)
            return
        for index, (method, code, text) in enumerate(self._channel_faults):
            if method == name and number:
                del self._channel_faults[index]
                self._close_channel(connection, number, code, text)
                return
        handler = _HANDLERS.get(type(frame))
        if handler is None:
            raise NotModelled(
                f"the scripted broker does not model {name}: test it on a real broker"
            )
        handler(self, connection, number, frame)

    # connection
    def _start_ok(self, c: _Connection, n: int, frame: commands.Connection.StartOk) -> None:
        self._send(
            c,
            0,
            commands.Connection.Tune(
                channel_max=2047, frame_max=_FRAME_MAX, heartbeat=self.heartbeat
            ),
        )

    def _tune_ok(self, c: _Connection, n: int, frame: commands.Connection.TuneOk) -> None:
        pass

    def _connection_open(self, c: _Connection, n: int, frame: commands.Connection.Open) -> None:
        self._send(c, 0, commands.Connection.OpenOk())
        if self._blocked is not None:
            self._send(c, 0, commands.Connection.Blocked(reason=self._blocked))

    def _connection_close(self, c: _Connection, n: int, frame: commands.Connection.Close) -> None:
        self._send(c, 0, commands.Connection.CloseOk())
        self._gone(c)

    def _connection_close_ok(
        self, c: _Connection, n: int, frame: commands.Connection.CloseOk
    ) -> None:
        self._gone(c)

    # channels
    def _channel_open(self, c: _Connection, n: int, frame: commands.Channel.Open) -> None:
        c.channels[n] = _Channel(n)
        self._send(c, n, commands.Channel.OpenOk())

    def _channel_close(self, c: _Connection, n: int, frame: commands.Channel.Close) -> None:
        self._forget_channel(c, n)
        self._send(c, n, commands.Channel.CloseOk())

    def _channel_close_ok(self, c: _Connection, n: int, frame: commands.Channel.CloseOk) -> None:
        self._forget_channel(c, n)

    def _confirm_select(self, c: _Connection, n: int, frame: commands.Confirm.Select) -> None:
        self._channel(c, n).confirming = True
        if not frame.nowait:
            self._send(c, n, commands.Confirm.SelectOk())

    def _qos(self, c: _Connection, n: int, frame: commands.Basic.Qos) -> None:
        self._channel(c, n).prefetch = frame.prefetch_count or 0
        self._send(c, n, commands.Basic.QosOk())
        for queue in set(self._channel(c, n).consumers.values()):
            self._dispatch(queue)

    # declarations
    def _exchange_declare(self, c: _Connection, n: int, frame: commands.Exchange.Declare) -> None:
        name = frame.exchange
        if frame.passive:
            if name not in self.routing.exchanges and name != "":
                self._close_channel(c, n, 404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")
                return
        else:
            conflict = self.routing.declare_exchange(name, frame.exchange_type or "direct")
            if conflict is not None:
                self._close_channel(c, n, 406, conflict)
                return
        if not frame.nowait:
            self._send(c, n, commands.Exchange.DeclareOk())

    def _queue_declare(self, c: _Connection, n: int, frame: commands.Queue.Declare) -> None:
        name = frame.queue or f"amq.gen-{next(self._numbers)}"
        if frame.passive:
            found = self.routing.queues.get(name)
            if found is None:
                self._close_channel(c, n, 404, f"NOT_FOUND - no queue '{name}' in vhost '/'")
                return
        else:
            found = self.routing.declare_queue(name, dict(frame.arguments or {}))
        if not frame.nowait:
            self._send(
                c,
                n,
                commands.Queue.DeclareOk(
                    queue=name,
                    message_count=len(found.messages),
                    consumer_count=self._consumer_count(name),
                ),
            )

    def _queue_bind(self, c: _Connection, n: int, frame: commands.Queue.Bind) -> None:
        if not self._exists(c, n, queue=frame.queue, exchange=frame.exchange):
            return
        self.routing.bind(frame.queue, frame.exchange, frame.routing_key or "")
        if not frame.nowait:
            self._send(c, n, commands.Queue.BindOk())

    def _queue_unbind(self, c: _Connection, n: int, frame: commands.Queue.Unbind) -> None:
        if not self._exists(c, n, queue=frame.queue, exchange=frame.exchange):
            return
        self.routing.unbind(frame.queue, frame.exchange, frame.routing_key or "")
        self._send(c, n, commands.Queue.UnbindOk())

    def _queue_delete(self, c: _Connection, n: int, frame: commands.Queue.Delete) -> None:
        count = self.routing.delete_queue(frame.queue)
        if not frame.nowait:
            self._send(c, n, commands.Queue.DeleteOk(message_count=count))

    def _queue_purge(self, c: _Connection, n: int, frame: commands.Queue.Purge) -> None:
        if not self._exists(c, n, queue=frame.queue):
            return
        queue = self.routing.queues[frame.queue]
        count = len(queue.messages)
        queue.messages.clear()
        if not frame.nowait:
            self._send(c, n, commands.Queue.PurgeOk(message_count=count))

    # publishing
    def _publish(self, c: _Connection, n: int, frame: commands.Basic.Publish) -> None:
        channel = self._channel(c, n)
        channel.publish = (frame, commands.Basic.Properties(), -1)
        channel.body = bytearray()

    def _content(self, c: _Connection, n: int, frame: Any) -> None:
        channel = c.channels.get(n)
        if channel is None or channel.closing or channel.publish is None:
            return  # content of a publish on a channel the broker closed: dropped with it
        method, props, size = channel.publish
        if isinstance(frame, header.ContentHeader):
            channel.publish = (method, frame.properties, frame.body_size)
            size = frame.body_size
        else:
            channel.body += frame.value
        if size >= 0 and len(channel.body) >= size:
            channel.publish = None
            message = ScriptedMessage(
                method.exchange or "", method.routing_key or "", bytes(channel.body), props
            )
            self._published(c, channel, method, message)

    def _published(
        self,
        c: _Connection,
        channel: _Channel,
        method: commands.Basic.Publish,
        message: ScriptedMessage,
    ) -> None:
        self.frames[_last_publish(self.frames, c.number, channel.number)] = FrameRecord(
            c.number, channel.number, "basic.publish", method, False, message
        )
        exchange = message.exchange
        if exchange and exchange not in self.routing.exchanges:
            self._close_channel(
                c, channel.number, 404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'"
            )
            return
        answer = PublishAnswer.ACK
        if channel.confirming:
            channel.publish_seq += 1
            if self._answers:
                answer = self._answers.popleft()
        if answer is PublishAnswer.DROP:
            self._drop(c)
            return
        if answer is PublishAnswer.NACK:
            self._send(c, channel.number, commands.Basic.Nack(delivery_tag=channel.publish_seq))
            return
        queues = self.routing.route(exchange, message.routing_key)
        if not queues and method.mandatory:
            self._send(
                c,
                channel.number,
                commands.Basic.Return(312, "NO_ROUTE", exchange, message.routing_key),
                message,
            )
        for queue in queues:
            queue.messages.append(
                ScriptedMessage(exchange, message.routing_key, message.body, message.properties)
            )
        if answer is PublishAnswer.HOLD:
            channel.held.append(channel.publish_seq)
        elif channel.confirming:
            self._send(c, channel.number, commands.Basic.Ack(delivery_tag=channel.publish_seq))
        for queue in queues:
            self._dispatch(queue.name)

    # consuming
    def _consume(self, c: _Connection, n: int, frame: commands.Basic.Consume) -> None:
        if not self._exists(c, n, queue=frame.queue):
            return
        channel = self._channel(c, n)
        tag = frame.consumer_tag or f"amq.ctag-{next(self._numbers)}"
        channel.consumers[tag] = frame.queue
        if not frame.nowait:
            self._send(c, n, commands.Basic.ConsumeOk(consumer_tag=tag))
        self._dispatch(frame.queue)

    def _cancel(self, c: _Connection, n: int, frame: commands.Basic.Cancel) -> None:
        self._channel(c, n).consumers.pop(frame.consumer_tag or "", None)
        if not frame.nowait:
            self._send(c, n, commands.Basic.CancelOk(consumer_tag=frame.consumer_tag))

    def _ack(self, c: _Connection, n: int, frame: commands.Basic.Ack) -> None:
        self._settle(c, n, frame.delivery_tag or 0, frame.multiple, requeue=None)

    def _nack(self, c: _Connection, n: int, frame: commands.Basic.Nack) -> None:
        self._settle(c, n, frame.delivery_tag or 0, frame.multiple, requeue=frame.requeue)

    def _reject(self, c: _Connection, n: int, frame: commands.Basic.Reject) -> None:
        self._settle(c, n, frame.delivery_tag or 0, False, requeue=frame.requeue)

    def _settle(
        self, c: _Connection, n: int, tag: int, multiple: bool, *, requeue: bool | None
    ) -> None:
        """An ack (``requeue`` None), or a nack/reject: requeued to the front, or dropped
        (dead-lettering is not modelled)."""
        channel = self._channel(c, n)
        tags = [t for t in channel.unacked if t <= tag or tag == 0] if multiple else [tag]
        if not multiple and tag not in channel.unacked:
            self._close_channel(c, n, 406, f"PRECONDITION_FAILED - unknown delivery tag {tag}")
            return
        touched: set[str] = set()
        for t in sorted(tags, reverse=True):
            queue_name, message = channel.unacked.pop(t)
            touched.add(queue_name)
            if requeue:
                queue = self.routing.queues.get(queue_name)
                if queue is not None:
                    message.redelivered = True
                    queue.messages.appendleft(message)
        for queue_name in touched:
            self._dispatch(queue_name)

    def _dispatch(self, queue_name: str) -> None:
        """Deliver ready messages of ``queue_name`` to its consumers, round robin, within
        each channel's prefetch."""
        queue = self.routing.queues.get(queue_name)
        if queue is None:
            return
        while queue.messages:
            for c, channel, tag in self._consumers_of(queue_name):
                if channel.prefetch and len(channel.unacked) >= channel.prefetch:
                    continue
                message = queue.messages.popleft()
                delivery_tag = next(channel.delivery_tags)
                channel.unacked[delivery_tag] = (queue_name, message)
                deliver = commands.Basic.Deliver(
                    tag, delivery_tag, message.redelivered, message.exchange, message.routing_key
                )
                self._send(c, channel.number, deliver, message)
                break
            else:
                return

    def _consumers_of(self, queue_name: str) -> list[tuple[_Connection, _Channel, str]]:
        found = [
            (c, channel, tag)
            for c in self._connections
            for channel in c.channels.values()
            if not channel.closing
            for tag, queue in channel.consumers.items()
            if queue == queue_name
        ]
        if not found:
            return found
        # round robin: each delivery starts the search one consumer further
        turn = self._turns.get(queue_name, 0) % len(found)
        self._turns[queue_name] = turn + 1
        return found[turn:] + found[:turn]

    def _consumer_count(self, queue_name: str) -> int:
        return len(self._consumers_of(queue_name))

    # -- helpers --------------------------------------------------------------------------------

    def _channel(self, c: _Connection, n: int) -> _Channel:
        channel = c.channels.get(n)
        if channel is None:
            raise _ChannelError(f"a method on channel {n}, which is not open")
        return channel

    def _known(self, *, queue: str | None = None, exchange: str | None = None) -> None:
        if queue is not None and queue not in self.routing.queues:
            raise NotModelled(f"the scripted broker has no queue {queue!r}: declare it first")
        if exchange is not None and exchange not in self.routing.exchanges:
            raise NotModelled(f"the scripted broker has no exchange {exchange!r}: declare it first")

    def _exists(
        self, c: _Connection, n: int, *, queue: str | None = None, exchange: str | None = None
    ) -> bool:
        if queue is not None and queue not in self.routing.queues:
            self._close_channel(c, n, 404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
            return False
        if exchange is not None and exchange not in self.routing.exchanges:
            self._close_channel(c, n, 404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")
            return False
        return True

    def _close_channel(self, c: _Connection, n: int, code: int, text: str) -> None:
        channel = c.channels.get(n)
        if channel is not None:
            self._requeue(channel)
            channel.closing = True
        self._send(c, n, commands.Channel.Close(code, text, 0, 0))

    def _forget_channel(self, c: _Connection, n: int) -> None:
        channel = c.channels.pop(n, None)
        if channel is not None:
            self._requeue(channel)

    def _requeue(self, channel: _Channel) -> None:
        """What a channel held unacked goes back to its queues, in order, as redelivered."""
        touched: set[str] = set()
        for _, (queue_name, message) in sorted(channel.unacked.items(), reverse=True):
            queue = self.routing.queues.get(queue_name)
            if queue is not None:
                message.redelivered = True
                queue.messages.appendleft(message)
                touched.add(queue_name)
        channel.unacked.clear()
        channel.consumers.clear()
        for queue_name in touched:
            self._dispatch(queue_name)

    def _send(
        self, c: _Connection, n: int, method: Any, message: ScriptedMessage | None = None
    ) -> None:
        if not c.open:
            return
        self._record(FrameRecord(c.number, n, method_name(method), method, True, message))
        data = frames.method_frame(n, method)
        if message is not None:
            data += pamqp_frame.marshal(
                header.ContentHeader(0, len(message.body), message.properties), n
            )
            chunk = _FRAME_MAX - frames.FRAME_OVERHEAD
            for start in range(0, len(message.body), chunk):
                data += pamqp_frame.marshal(
                    pamqp_body.ContentBody(message.body[start : start + chunk]), n
                )
        c.send(data)

    def _record(self, record: FrameRecord) -> None:
        self.frames.append(record)
        self._changed.notify_all()

    def _gone(self, c: _Connection) -> None:
        """The connection ended (closed by the client, or its close-ok came)."""
        if c in self._connections:
            self._connections.remove(c)
        c.open = False
        for number in list(c.channels):
            self._forget_channel(c, number)
        self._changed.notify_all()

    def _drop(self, c: _Connection) -> None:
        """The broker drops the connection (a fault, a shutdown): the client sees it lost."""
        was_open = c.open
        self._gone(c)
        if was_open:
            c.lost()


_REPLY = {
    404: "NOT_FOUND - scripted fault",
    405: "RESOURCE_LOCKED - scripted fault",
    406: "PRECONDITION_FAILED - scripted fault",
    403: "ACCESS_REFUSED - scripted fault",
}


def method_name(method: Any) -> str:
    """The spec's name of a pamqp method: ``Basic.ConsumeOk`` is ``basic.consume-ok``."""
    cls, _, name = str(method.name).partition(".")
    return (cls + "." + _WORD_START.sub(r"-\1", name)).lower()


_WORD_START = re.compile(r"(?<=[a-z])([A-Z])")


def _text(exc: Exception) -> str:
    text = f"NOT_IMPLEMENTED - {exc}"
    return text if len(text) <= 255 else text[:252] + "..."


def _last_publish(records: list[FrameRecord], connection: int, channel: int) -> int:
    for index in range(len(records) - 1, -1, -1):
        r = records[index]
        if (
            r.name == "basic.publish"
            and not r.sent
            and r.connection == connection
            and r.channel == channel
        ):
            return index
    raise AssertionError("content without its basic.publish")


_Handler = Callable[[ScriptedBroker, _Connection, int, Any], None]
_HANDLERS: dict[type, _Handler] = {
    commands.Connection.StartOk: ScriptedBroker._start_ok,
    commands.Connection.TuneOk: ScriptedBroker._tune_ok,
    commands.Connection.Open: ScriptedBroker._connection_open,
    commands.Connection.Close: ScriptedBroker._connection_close,
    commands.Connection.CloseOk: ScriptedBroker._connection_close_ok,
    commands.Channel.Open: ScriptedBroker._channel_open,
    commands.Channel.Close: ScriptedBroker._channel_close,
    commands.Channel.CloseOk: ScriptedBroker._channel_close_ok,
    commands.Confirm.Select: ScriptedBroker._confirm_select,
    commands.Basic.Qos: ScriptedBroker._qos,
    commands.Exchange.Declare: ScriptedBroker._exchange_declare,
    commands.Queue.Declare: ScriptedBroker._queue_declare,
    commands.Queue.Bind: ScriptedBroker._queue_bind,
    commands.Queue.Unbind: ScriptedBroker._queue_unbind,
    commands.Queue.Delete: ScriptedBroker._queue_delete,
    commands.Queue.Purge: ScriptedBroker._queue_purge,
    commands.Basic.Publish: ScriptedBroker._publish,
    commands.Basic.Consume: ScriptedBroker._consume,
    commands.Basic.Cancel: ScriptedBroker._cancel,
    commands.Basic.Ack: ScriptedBroker._ack,
    commands.Basic.Nack: ScriptedBroker._nack,
    commands.Basic.Reject: ScriptedBroker._reject,
}
