"""The server side of the scripted broker: connections, channels, frames in and out.

``ScriptedServer`` keeps what the scripted broker's connections share (the routing model, the
record of frames, the faults a test scripted) and does the wire's work: it reads a client's
frames from its buffer, answers heartbeats, closes what breaks the protocol, sends methods and
content, and delivers ready messages to consumers within their prefetch. What it answers to
each method is ``scripted_methods``; the API a test calls is ``scripted.ScriptedBroker``.
"""

from __future__ import annotations

import enum
import itertools
import re
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame
from pamqp import heartbeat as pamqp_heartbeat

from rabbitry.amqp import frames
from rabbitry.errors import NotModelled
from rabbitry.testing.scripted_routing import Routing, ScriptedMessage

_HEAD = struct.Struct(">BHI")
FRAME_MAX = 131072
"""The frame size the scripted broker offers in ``connection.tune``."""


# Internal: caught in this module, which closes the connection as a broker would.
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
        broker: ScriptedServer,
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


class ScriptedServer:
    """The connections of one scripted broker and what they share."""

    def __init__(self, *, server_properties: dict[str, Any], heartbeat: int) -> None:
        self.server_properties = server_properties
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
        self._return_lag = 0
        self._returning: list[list[Any]] = []
        """Returned messages not back yet: [declares still to answer, queue name, message]."""

    # -- Peer: a client connects (``inprocess`` calls it) --------------------------------------

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
        self._method(connection, number, frame, name)

    def _content(self, c: _Connection, n: int, frame: Any) -> None:
        """A content frame of a publish: ``ScriptedMethods`` puts the message together."""
        raise NotImplementedError

    def _method(self, c: _Connection, n: int, frame: Any, name: str) -> None:
        """Answer one method: what the broker answers to each is ``ScriptedMethods``'s."""
        raise NotModelled(f"the scripted broker does not model {name}: test it on a real broker")

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
            if self._give_back(queue_name, message):
                touched.add(queue_name)
        channel.unacked.clear()
        channel.consumers.clear()
        for queue_name in touched:
            self._dispatch(queue_name)

    def _give_back(self, queue_name: str, message: ScriptedMessage) -> bool:
        """A returned (nacked, or unacked on a closed channel) message goes back to the front
        of its queue, now or, with a return lag, later; whether its queue exists."""
        queue = self.routing.queues.get(queue_name)
        if queue is None:
            return False
        message.redelivered = True
        if self._return_lag:
            self._returning.append([self._return_lag, queue_name, message])
        else:
            queue.messages.appendleft(message)
        return True

    def _declared(self, queue_name: str) -> None:
        """A declare of ``queue_name`` was answered: returns lagging behind it come nearer."""
        due = []
        for entry in self._returning:
            if entry[1] == queue_name:
                entry[0] -= 1
                if entry[0] <= 0:
                    due.append(entry)
        queue = self.routing.queues.get(queue_name)
        for entry in due:  # in the order given back, as at once
            self._returning.remove(entry)
            if queue is not None:
                queue.messages.appendleft(entry[2])
        if due:
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
            chunk = FRAME_MAX - frames.FRAME_OVERHEAD
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


def method_name(method: Any) -> str:
    """The spec's name of a pamqp method: ``Basic.ConsumeOk`` is ``basic.consume-ok``."""
    cls, _, name = str(method.name).partition(".")
    return (cls + "." + _WORD_START.sub(r"-\1", name)).lower()


_WORD_START = re.compile(r"(?<=[a-z])([A-Z])")


def _text(exc: Exception) -> str:
    text = f"NOT_IMPLEMENTED - {exc}"
    return text if len(text) <= 255 else text[:252] + "..."


__all__ = ["FRAME_MAX", "FrameRecord", "PublishAnswer", "ScriptedServer", "method_name"]
