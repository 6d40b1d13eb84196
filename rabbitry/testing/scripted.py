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
(``connection.blocked``), ``close_connections`` (the broker closes with 320), ``send_bytes``
(any bytes, valid AMQP or not).

It is not a broker emulator: its routing is the tiny model of ``scripted_routing`` (one
vhost's worth, direct/fanout/topic and the default exchange; arguments kept, never acted on:
no TTL, dead-lettering, length limits, delivery limits, queue types, clustering). A method
it does not model (``basic.get``, ``exchange.bind``, ``tx.*``...) closes the connection with
540 NOT_IMPLEMENTED and a text that says so, and lands in ``not_modelled``. What only a broker
can tell is tested on one (``rabbitmq_vhost``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from pamqp import commands

from rabbitry.amqp import inprocess
from rabbitry.amqp.message import Body, encode_body
from rabbitry.errors import NotModelled
from rabbitry.testing.scripted_methods import ScriptedMethods
from rabbitry.testing.scripted_routing import ScriptedMessage, ScriptedQueue
from rabbitry.testing.scripted_server import FrameRecord, PublishAnswer

__all__ = [
    "FrameRecord",
    "NotModelled",
    "PublishAnswer",
    "ScriptedBroker",
    "ScriptedMessage",
    "ScriptedQueue",
]

_hosts = itertools.count(1)


class ScriptedBroker(ScriptedMethods):
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
        properties: dict[str, Any] = {
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
        super().__init__(server_properties=properties, heartbeat=heartbeat)

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

    def lag_returns(self, declares: int) -> None:
        """From now on a returned message (nacked with requeue, or unacked on a closed channel)
        is back in its queue only once ``declares`` more declares of that queue were answered
        without it, as a quorum queue puts it back after its log committed the return: a
        count taken at once does not hold it yet. 0: back at once (the default)."""
        if declares < 0:
            raise ValueError(f"lag_returns needs a count of 0 or more, got {declares}")
        with self.lock:
            self._return_lag = declares

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

    def send_bytes(self, data: bytes) -> None:
        """The broker writes ``data`` as is on every connection: bytes that need be no AMQP
        frame (a broken broker, a man in the middle)."""
        with self.lock:
            for connection in list(self._connections):
                connection.send(data)

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


_REPLY = {
    404: "NOT_FOUND - scripted fault",
    405: "RESOURCE_LOCKED - scripted fault",
    406: "PRECONDITION_FAILED - scripted fault",
    403: "ACCESS_REFUSED - scripted fault",
}
