"""One AMQP connection of a publisher, as a state machine without I/O.

``Session`` consumes bytes (``receive``) and produces bytes (``out``); the sync and async
publishers only move bytes between it and a socket. It performs the handshake (PLAIN or
EXTERNAL auth, tune, vhost, one channel, confirm mode), tracks confirms and returns, follows
``connection.blocked``, answers heartbeats, and recovers a channel the broker closed because of
one message: that message (and any other to the same missing exchange) fails, the rest are
republished on the reopened channel. Once asked (``consume_replies``), it consumes direct
reply-to on its channel and hands each reply to a hook (``Publisher.request``).
"""

from __future__ import annotations

import enum
import logging
import platform
import re
from collections.abc import Callable, Mapping
from typing import Any

from pamqp import body as pamqp_body
from pamqp import commands, header

from rabbitry.amqp import frames
from rabbitry.amqp.confirms import ConfirmTracker, Delivery, Status, describe
from rabbitry.amqp.message import CHANNEL, MessageBuilder
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import AccessRefused, ChannelClosed, ExchangeNotFound, PublishError
from rabbitry.uri import mask_text

logger = logging.getLogger("rabbitry.publisher")

_EXCHANGE_IN_TEXT = re.compile(r"exchange '(?P<name>.*)' in vhost")
_REPLY_QUEUE = "amq.rabbitmq.reply-to"
_REPLY_CONSUMER = "rabbitry-replies"
_REPLY_PROPERTIES = ("correlation_id", "content_type", "headers", "message_id")

ReplyHook = Callable[[Mapping[str, Any], bytes], object]
"""Called with a direct reply-to delivery's properties and body."""


class State(enum.Enum):
    HANDSHAKE = "handshake"
    OPENING_CHANNEL = "opening channel"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"


# Internal: amqp.reconnect turns it into a BrokerError of rabbitry.errors (or connects again);
# it never reaches a user (tests/unit/test_error_tree.py knows it).
class ConnectionRefused(Exception):
    """The broker refused or closed the connection (``reply_code``/``reply_text`` from it)."""

    def __init__(self, reply_code: int, reply_text: str, during_handshake: bool) -> None:
        self.reply_code = reply_code
        self.reply_text = mask_text(reply_text)
        self.during_handshake = during_handshake
        super().__init__(f"{reply_code} {self.reply_text}")

    @property
    def permanent(self) -> bool:
        """Refusals that retrying cannot fix: bad credentials, no access to the vhost."""
        return self.during_handshake and self.reply_code in (403, 530)


def client_properties(name: str | None) -> dict[str, Any]:
    from rabbitry import __version__

    props: dict[str, Any] = {
        "product": "rabbitry",
        "version": __version__,
        "platform": f"Python {platform.python_version()}",
        "capabilities": {
            "publisher_confirms": True,
            "basic.nack": True,
            "connection.blocked": True,
            "authentication_failure_close": True,
            "consumer_cancel_notify": True,
        },
    }
    if name:
        props["connection_name"] = name
    return props


class Session:
    """One connection with one confirm-mode channel; ``out`` holds bytes to write."""

    def __init__(
        self,
        settings: ConnectionSettings,
        tracker: ConfirmTracker,
        builder: MessageBuilder,
        *,
        confirms: bool = True,
        resend: list[Delivery] | None = None,
        on_blocked: Callable[[bool], None] | None = None,
        on_reply: ReplyHook | None = None,
    ) -> None:
        self.settings = settings
        self.tracker = tracker
        self.builder = builder
        self.confirms = confirms
        self.out = bytearray(frames.PROTOCOL_HEADER)
        self.state = State.HANDSHAKE
        self.blocked = False
        self.heartbeat = 0
        self.closed_by_broker: ConnectionRefused | None = None
        self.channel_errors = 0
        self._resend = resend or []
        self._reader = frames.FrameReader()
        self._return: tuple[int, str, str, str] | None = None
        self._skip_body = 0
        self._on_blocked = on_blocked
        self.on_reply = on_reply
        """Where replies go (direct reply-to); set, the channel consumes them when it opens."""
        self._reply: Mapping[str, Any] | None = None
        self._reply_body = bytearray()
        self._reply_left = 0
        self._delivering = False
        self.last_received = 0.0
        self.last_sent = 0.0

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    @property
    def was_ready(self) -> bool:
        """True once the connection was ready, even after the broker closed it: a connection
        lost, not a connect that failed."""
        refusal = self.closed_by_broker
        return self.ready or (refusal is not None and not refusal.during_handshake)

    # -- writing --------------------------------------------------------------------------------

    def publish(self, delivery: Delivery) -> None:
        """Queue one message's frames; in confirm mode it is tracked until settled."""
        if self.confirms:
            self.tracker.add(delivery)
        else:
            delivery.status = Status.SENT
        self.out += delivery.frames

    def consume_replies(self, on_reply: ReplyHook) -> None:
        """Consume ``amq.rabbitmq.reply-to`` (no-ack, as the broker requires) on this channel,
        and on every channel it reopens, before anything published after this call: requests
        naming it as ``reply_to`` are refused on a channel without that consumer."""
        first = self.on_reply is None
        self.on_reply = on_reply
        if first and self.ready:
            self._consume_replies()

    def _consume_replies(self) -> None:
        self.out += frames.method_frame(
            CHANNEL,
            commands.Basic.Consume(queue=_REPLY_QUEUE, consumer_tag=_REPLY_CONSUMER, no_ack=True),
        )

    def take_output(self) -> bytes:
        data = bytes(self.out)
        self.out.clear()
        return data

    def close(self) -> None:
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.state = State.CLOSING
        self.out += frames.method_frame(0, commands.Connection.Close(200, "closed by client", 0, 0))

    def tick(self, now: float) -> bool:
        """Queue a heartbeat when due; False when the broker has been silent for too long."""
        hb = self.heartbeat
        if not hb:
            return True
        if now - self.last_sent >= hb / 2:
            self.out += frames.HEARTBEAT_FRAME
            self.last_sent = now
        return now - self.last_received < hb * 2

    # -- reading --------------------------------------------------------------------------------

    def receive(self, data: bytes, now: float = 0.0) -> None:
        """Feed bytes from the socket; raises ConnectionRefused when the broker closes."""
        self.last_received = now
        tracker = self.tracker
        for event in self._reader.feed(data):
            kind = event[0]
            if kind == "ack":
                tracker.ack(event[2], event[3])
            elif kind == "nack":
                tracker.nack(event[2], event[3])
            elif kind == "frame":
                self._frame(event[1], event[2])

    def _frame(self, channel: int, frame: Any) -> None:
        if (self._return is not None or self._skip_body) and self._content(frame):
            return
        if self._delivering and self._reply_content(frame):
            return
        if isinstance(frame, commands.Basic.Deliver):
            self._delivering = True  # a reply (the only consumer a publisher has)
            return
        if isinstance(frame, commands.Basic.Return):
            self._return = (
                frame.reply_code or 0,
                frame.reply_text,
                frame.exchange,
                frame.routing_key or "",
            )
        elif isinstance(frame, commands.Connection.Blocked | commands.Connection.Unblocked):
            self.blocked = isinstance(frame, commands.Connection.Blocked)
            if self.blocked:
                reason = mask_text(getattr(frame, "reason", "") or "no reason given")
                logger.warning("%s blocks publishing (%s): waiting", self.settings.display, reason)
            else:
                logger.warning("%s accepts publishing again", self.settings.display)
            if self._on_blocked is not None:
                self._on_blocked(self.blocked)
        elif isinstance(frame, commands.Channel.Close):
            self._channel_closed(frame)
        elif isinstance(frame, commands.Channel.OpenOk):
            if self.confirms:
                self.out += frames.method_frame(CHANNEL, commands.Confirm.Select())
            else:
                self._become_ready()
        elif isinstance(frame, commands.Confirm.SelectOk):
            self._become_ready()
        elif isinstance(frame, commands.Connection.Start):
            self._start(frame)
        elif isinstance(frame, commands.Connection.Tune):
            self._tune(frame)
        elif isinstance(frame, commands.Connection.OpenOk):
            self.state = State.OPENING_CHANNEL
            self.out += frames.method_frame(CHANNEL, commands.Channel.Open())
        elif isinstance(frame, commands.Connection.Close):
            self.out += frames.method_frame(0, commands.Connection.CloseOk())
            during = self.state in (State.HANDSHAKE, State.OPENING_CHANNEL)
            self.state = State.CLOSED
            self.closed_by_broker = ConnectionRefused(
                frame.reply_code or 0, frame.reply_text, during
            )
            raise self.closed_by_broker
        elif isinstance(frame, commands.Connection.CloseOk):
            self.state = State.CLOSED
        # anything else (channel.flow, consumer methods) does not concern a publisher

    def _content(self, frame: Any) -> bool:
        """Content of a returned message; True when the frame was consumed."""
        if isinstance(frame, header.ContentHeader) and self._return is not None:
            code, text, exchange, key = self._return
            self._return = None
            self.tracker.returned_message(frames.message_id_of(frame), code, text, exchange, key)
            self._skip_body = frame.body_size
            return True
        if isinstance(frame, pamqp_body.ContentBody) and self._skip_body:
            self._skip_body = max(0, self._skip_body - len(frame.value))
            return True
        return False

    def _reply_content(self, frame: Any) -> bool:
        """Header and body of a reply; True when the frame was consumed."""
        if isinstance(frame, header.ContentHeader):
            props = frame.properties
            self._reply = {name: getattr(props, name, None) for name in _REPLY_PROPERTIES}
            self._reply_left = frame.body_size
            self._reply_body.clear()
        elif isinstance(frame, pamqp_body.ContentBody):
            self._reply_body += frame.value
            self._reply_left -= len(frame.value)
        else:
            return False
        if self._reply_left <= 0 and self._reply is not None:
            reply, self._reply = self._reply, None
            self._delivering = False
            if self.on_reply is not None:
                self.on_reply(reply, bytes(self._reply_body))
        return True

    def _start(self, frame: commands.Connection.Start) -> None:
        mechanisms = (frame.mechanisms or "").split()
        s = self.settings
        if s.external_auth:
            mechanism, response = "EXTERNAL", ""
        else:
            mechanism, response = "PLAIN", f"\0{s.username}\0{s.password}"
        if mechanisms and mechanism not in mechanisms:
            raise ConnectionRefused(
                403, f"the broker does not offer {mechanism} authentication ({mechanisms})", True
            )
        self.out += frames.method_frame(
            0,
            commands.Connection.StartOk(
                client_properties=client_properties(s.connection_name),
                mechanism=mechanism,
                response=response,
            ),
        )

    def _tune(self, frame: commands.Connection.Tune) -> None:
        s = self.settings
        frame_max = min(s.frame_max, frame.frame_max or s.frame_max)
        wanted = s.heartbeat
        server = frame.heartbeat or 0
        heartbeat = 0 if wanted == 0 else (min(wanted, server) if server else wanted)
        self.heartbeat = heartbeat
        self.builder.frame_max = frame_max
        channel_max = frame.channel_max or 2047
        if s.channel_max:  # the URL's channel_max: the lower of the two
            channel_max = min(channel_max, s.channel_max)
        self.out += frames.method_frame(
            0,
            commands.Connection.TuneOk(
                channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
            ),
        )
        self.out += frames.method_frame(0, commands.Connection.Open(virtual_host=s.vhost))

    def _become_ready(self) -> None:
        self.state = State.READY
        if self.on_reply is not None:
            self._consume_replies()  # ahead of the requests republished below
        resend, self._resend = self._resend, []
        for delivery in resend:
            if delivery.status is Status.PENDING:
                self.publish(delivery)

    def _channel_closed(self, frame: commands.Channel.Close) -> None:
        self.out += frames.method_frame(CHANNEL, commands.Channel.CloseOk())
        self.channel_errors += 1
        code = frame.reply_code or 0
        text = mask_text(frame.reply_text)
        found = _EXCHANGE_IN_TEXT.search(text)
        tracker = self.tracker
        if found is not None and code in (403, 404):
            name = found["name"]
            cls: type[ChannelClosed] = ExchangeNotFound if code == 404 else AccessRefused

            def error(d: Delivery) -> PublishError:
                return cls(f"{describe(d)}: {code} {text}", code)

            tracker.fail_where(lambda d: d.exchange == name, error)
        else:
            # The broker does not say which message it refused: fail every one in flight
            # rather than report a refused message as stored.
            tracker.fail_where(
                lambda d: True, lambda d: ChannelClosed(f"{describe(d)}: {code} {text}", code)
            )
        self._resend.extend(tracker.take_unsettled())
        self.state = State.OPENING_CHANNEL
        self.out += frames.method_frame(CHANNEL, commands.Channel.Open())
