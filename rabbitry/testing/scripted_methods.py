"""What the scripted broker answers to each AMQP method a client sends.

One method of ``ScriptedMethods`` a method of the protocol the broker models (connection,
channel, confirm, qos, exchange and queue declarations, publish with its content, consume,
cancel, ack, nack, reject); a method missing from ``_HANDLERS`` closes the connection as not
modelled (``ScriptedServer._method``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pamqp import commands, header

from rabbitry.testing.scripted_routing import ScriptedMessage
from rabbitry.testing.scripted_server import (
    FRAME_MAX,
    FrameRecord,
    PublishAnswer,
    ScriptedServer,
    _Channel,
    _Connection,
)


class ScriptedMethods(ScriptedServer):
    """The scripted broker's answers, one method of the protocol each."""

    def _method(self, c: _Connection, n: int, frame: Any, name: str) -> None:
        handler = _HANDLERS.get(type(frame))
        if handler is None:
            super()._method(c, n, frame, name)
            return
        handler(self, c, n, frame)

    # connection
    def _start_ok(self, c: _Connection, n: int, frame: commands.Connection.StartOk) -> None:
        self._send(
            c,
            0,
            commands.Connection.Tune(
                channel_max=2047, frame_max=FRAME_MAX, heartbeat=self.heartbeat
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
        self._declared(name)

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
                self._give_back(queue_name, message)
        for queue_name in touched:
            self._dispatch(queue_name)


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


_Handler = Callable[[ScriptedMethods, _Connection, int, Any], None]
_HANDLERS: dict[type, _Handler] = {
    commands.Connection.StartOk: ScriptedMethods._start_ok,
    commands.Connection.TuneOk: ScriptedMethods._tune_ok,
    commands.Connection.Open: ScriptedMethods._connection_open,
    commands.Connection.Close: ScriptedMethods._connection_close,
    commands.Connection.CloseOk: ScriptedMethods._connection_close_ok,
    commands.Channel.Open: ScriptedMethods._channel_open,
    commands.Channel.Close: ScriptedMethods._channel_close,
    commands.Channel.CloseOk: ScriptedMethods._channel_close_ok,
    commands.Confirm.Select: ScriptedMethods._confirm_select,
    commands.Basic.Qos: ScriptedMethods._qos,
    commands.Exchange.Declare: ScriptedMethods._exchange_declare,
    commands.Queue.Declare: ScriptedMethods._queue_declare,
    commands.Queue.Bind: ScriptedMethods._queue_bind,
    commands.Queue.Unbind: ScriptedMethods._queue_unbind,
    commands.Queue.Delete: ScriptedMethods._queue_delete,
    commands.Queue.Purge: ScriptedMethods._queue_purge,
    commands.Basic.Publish: ScriptedMethods._publish,
    commands.Basic.Consume: ScriptedMethods._consume,
    commands.Basic.Cancel: ScriptedMethods._cancel,
    commands.Basic.Ack: ScriptedMethods._ack,
    commands.Basic.Nack: ScriptedMethods._nack,
    commands.Basic.Reject: ScriptedMethods._reject,
}


__all__ = ["ScriptedMethods"]
