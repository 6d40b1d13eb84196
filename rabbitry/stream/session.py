"""The stream protocol's client state machine: bytes in, typed events out, requests as bytes.

``Session`` does the handshake itself (peer properties, SASL PLAIN or EXTERNAL, tune, open)
and answers heartbeats and tune; everything else comes out of ``receive`` as events
(``Response``, ``Chunk``, ``Confirmed``, ``PublishFailed``, ``Closed``, ``MetadataChanged``)
for the driver to act on. No sockets, no clock, no logging: the driver writes ``out`` and feeds
``receive`` (as ``rabbitry.amqp.session`` does for AMQP 0-9-1).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from rabbitry.errors import StreamProtocolError, StreamRefused
from rabbitry.stream import frames
from rabbitry.stream.frames import RESPONSE, Chunk, Key, OffsetSpec, Reader, ResponseCode

__all__ = [
    "Closed",
    "Confirmed",
    "MetadataChanged",
    "PublishFailed",
    "Response",
    "Session",
    "State",
]

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_LARGEST_FRAME = 1 << 29
"""A frame's size past which the bytes are taken for garbage, not a frame (512 MiB: a chunk
of the largest messages a broker takes is far smaller)."""
_U64 = struct.Struct(">Q")
_HEAD = struct.Struct(">IHH")
_DELIVER = int(Key.DELIVER)


class State(enum.Enum):
    HANDSHAKE = "handshake"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True)
class Response:
    """The answer to a request: its correlation id, code and the rest of its body."""

    key: int
    correlation_id: int
    code: int
    body: Reader

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.OK


@dataclass(frozen=True)
class Confirmed:
    publisher_id: int
    publishing_ids: list[int]


@dataclass(frozen=True)
class PublishFailed:
    publisher_id: int
    failures: list[tuple[int, int]]
    """(publishing id, response code) pairs."""


@dataclass(frozen=True)
class Closed:
    code: int
    reason: str


@dataclass(frozen=True)
class MetadataChanged:
    stream: str
    code: int


Event = Response | Chunk | Confirmed | PublishFailed | Closed | MetadataChanged


@dataclass
class Session:
    """One stream-protocol connection's state. Call ``start`` and write ``out``."""

    username: str
    password: str = field(repr=False)
    vhost: str = "/"
    external: bool = False
    heartbeat: int = 60
    frame_max: int = 1048576
    client_properties: dict[str, str] = field(default_factory=dict)
    state: State = State.HANDSHAKE
    out: bytearray = field(default_factory=bytearray)
    server_properties: dict[str, str] = field(default_factory=dict)
    """What ``open`` answered: ``advertised_host`` and ``advertised_port`` among them."""
    peer_properties: dict[str, str] = field(default_factory=dict)
    """What the broker said of itself in the handshake's first answer (``cluster_name``,
    ``version``): which broker this is, beside another on the same host."""
    tuned_frame_max: int = 0
    _partial: bytearray = field(default_factory=lambda: bytearray(4))
    """The frame being received: its size and then (once the size is known) room for all of
    it; ``_have`` bytes of it came."""
    _have: int = 0
    _correlation: int = 0
    _handshake: dict[int, Key] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.state is State.OPEN

    def start(self) -> None:
        props = {"product": "rabbitry", **self.client_properties}
        self._handshake[self._request(Key.PEER_PROPERTIES, frames.string_map(props))] = (
            Key.PEER_PROPERTIES
        )

    def _next(self) -> int:
        self._correlation += 1
        return self._correlation

    def _request(self, key: Key, body: bytes = b"") -> int:
        correlation = self._next()
        self.out += frames.frame(key, _U32.pack(correlation) + body)
        return correlation

    # --- requests ---------------------------------------------------------------------------

    def subscribe(
        self,
        subscription_id: int,
        stream: str,
        offset: int | OffsetSpec | None,
        credit: int,
        properties: dict[str, str] | None = None,
    ) -> int:
        """From ``offset`` (None: the first message the stream holds; ``OffsetSpec.LAST``:
        the last chunk it holds)."""
        if offset is None:
            offset = OffsetSpec.FIRST
        if isinstance(offset, OffsetSpec):
            if offset not in (OffsetSpec.FIRST, OffsetSpec.LAST, OffsetSpec.NEXT):
                raise ValueError(f"subscribe at {offset.name} needs a value: give the offset")
            spec = _U16.pack(offset)
        else:
            spec = _U16.pack(OffsetSpec.OFFSET) + _U64.pack(offset)
        body = (
            _U8.pack(subscription_id)
            + frames.string(stream)
            + spec
            + _U16.pack(credit)
            + frames.string_map(properties or {})
        )
        return self._request(Key.SUBSCRIBE, body)

    def credit(self, subscription_id: int, credit: int) -> None:
        self.out += frames.frame(Key.CREDIT, _U8.pack(subscription_id) + _U16.pack(credit))

    def unsubscribe(self, subscription_id: int) -> int:
        return self._request(Key.UNSUBSCRIBE, _U8.pack(subscription_id))

    def declare_publisher(self, publisher_id: int, reference: str, stream: str) -> int:
        body = _U8.pack(publisher_id) + frames.string(reference) + frames.string(stream)
        return self._request(Key.DECLARE_PUBLISHER, body)

    def query_publisher_sequence(self, reference: str, stream: str) -> int:
        return self._request(
            Key.QUERY_PUBLISHER_SEQUENCE, frames.string(reference) + frames.string(stream)
        )

    def delete_publisher(self, publisher_id: int) -> int:
        return self._request(Key.DELETE_PUBLISHER, _U8.pack(publisher_id))

    # Publish frames do not pass through ``out``: ``blocking.Producer`` sends
    # ``frames.publish_head`` and the encoded entries to the socket as they are (no copy of the
    # bodies); their confirms and errors come back here as events.

    def route(self, routing_key: str, super_stream: str) -> int:
        return self._request(Key.ROUTE, frames.string(routing_key) + frames.string(super_stream))

    def partitions(self, super_stream: str) -> int:
        return self._request(Key.PARTITIONS, frames.string(super_stream))

    def metadata(self, streams: Sequence[str]) -> int:
        body = _U32.pack(len(streams)) + b"".join(frames.string(s) for s in streams)
        return self._request(Key.METADATA, body)

    def close(self, reason: str = "closed by rabbitry") -> int:
        self.state = State.CLOSED
        return self._request(Key.CLOSE, _U16.pack(ResponseCode.OK) + frames.string(reason))

    # --- input ------------------------------------------------------------------------------

    def receive(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Every complete frame in the bytes so far, as events (handshake frames are handled).

        Frames wholly in ``data`` given as ``bytes`` are read in place (events keep views of
        it); from a buffer the caller will reuse, each frame is copied out once. A frame cut
        by the end of ``data`` is kept, in a buffer of its full size, for the next bytes:
        ``into`` offers its missing part to be received straight into.
        """
        events: list[Event] = []
        view = memoryview(data)
        in_place = isinstance(data, bytes)
        pos = self._fill(view, events) if self._have else 0
        end = len(view)
        while end - pos >= 4:
            size = _U32.unpack_from(view, pos)[0]
            if end - pos - 4 < size:
                break
            body = view[pos + 4 : pos + 4 + size]
            self._body(body if in_place else memoryview(bytes(body)), events)
            pos += 4 + size
        if pos < end:
            self._fill(view[pos:], events)
        return events

    def into(self) -> memoryview | None:
        """The missing part of the frame being received, to receive into (then say how much
        came with ``received_into``); None when no frame is begun past its size."""
        if self._have < 4:
            return None
        return memoryview(self._partial)[self._have :]

    def received_into(self, count: int) -> list[Event]:
        """``count`` bytes were received into what ``into`` gave: the frame's events when
        it is whole now."""
        self._have += count
        events: list[Event] = []
        if self._have == len(self._partial):
            self._whole(events)
        return events

    def _fill(self, view: memoryview, events: list[Event]) -> int:
        """Add what ``view`` holds of the frame being received (reading it when it is whole);
        how many bytes of ``view`` that took."""
        buf, have = self._partial, self._have
        used = 0
        if have < 4:
            used = min(4 - have, len(view))
            buf[have : have + used] = view[:used]
            have += used
            if have < 4:
                self._have = have
                return used
            size = _U32.unpack_from(buf, 0)[0]
            if size > _LARGEST_FRAME:
                raise StreamProtocolError(f"a frame of {size} bytes: more than rabbitry reads")
            buf = bytearray(4 + size)
            buf[:4] = _U32.pack(size)
            self._partial = buf
        more = min(len(buf) - have, len(view) - used)
        buf[have : have + more] = view[used : used + more]
        self._have = have + more
        if self._have == len(buf):
            self._whole(events)
        return used + more

    def _whole(self, events: list[Event]) -> None:
        frame = self._partial
        self._partial, self._have = bytearray(4), 0
        self._body(memoryview(frame)[4:], events)

    def _body(self, body: memoryview, events: list[Event]) -> None:
        if len(body) < 4:
            raise StreamProtocolError(f"a frame of {len(body)} bytes is shorter than its key")
        if body[1] == _DELIVER and body[0] == 0:  # most of what comes: no Reader, no unpacks
            try:
                events.append(frames.chunk_records(body[4], body[5:]))
            except IndexError as exc:  # no subscription id
                cut = f"a frame of key {_DELIVER} is cut short: {exc}"
                raise StreamProtocolError(cut) from None
            return
        try:
            self._frame(body, events)
        except (IndexError, struct.error) as exc:  # a frame shorter than its fields
            key = _U16.unpack_from(body, 0)[0]
            raise StreamProtocolError(f"a frame of key {key} is cut short: {exc}") from None

    def _frame(self, body: memoryview, events: list[Event]) -> None:
        key, _version = _U16.unpack_from(body, 0)[0], _U16.unpack_from(body, 2)[0]
        r = Reader(body, 4)
        if key == Key.PUBLISH_CONFIRM:
            publisher = r.u8()
            count = r.u32()  # the ids read at once: a confirm may hold thousands
            events.append(Confirmed(publisher, list(struct.unpack_from(f">{count}Q", body, r.pos))))
        elif key == Key.PUBLISH_ERROR:
            publisher = r.u8()
            events.append(PublishFailed(publisher, [(r.u64(), r.u16()) for _ in range(r.u32())]))
        elif key == Key.HEARTBEAT:
            self.out += frames.frame(Key.HEARTBEAT, b"")
        elif key == Key.TUNE:
            self._tune(r)
        elif key == Key.METADATA_UPDATE:
            code = r.u16()
            events.append(MetadataChanged(r.string(), code))
        elif key == Key.CLOSE:
            correlation, code = r.u32(), r.u16()
            reason = r.string()
            self.out += frames.frame(
                Key.CLOSE | RESPONSE, _U32.pack(correlation) + _U16.pack(ResponseCode.OK)
            )
            self.state = State.CLOSED
            events.append(Closed(code, reason))
        elif key == Key.CREDIT | RESPONSE:  # only sent when a credit was refused
            code = r.u16()
            events.append(Response(key, 0, code, r))
        elif key == Key.METADATA | RESPONSE:  # no response code: brokers and streams follow
            events.append(Response(key, r.u32(), ResponseCode.OK, r))
        elif key & RESPONSE:
            correlation, code = r.u32(), r.u16()
            response = Response(key & ~RESPONSE, correlation, code, r)
            step = self._handshake.pop(correlation, None)
            if step is None:
                events.append(response)
            else:
                self._handshake_step(step, response)
        else:
            raise StreamProtocolError(f"unexpected stream-protocol frame key 0x{key:04x}")

    def _handshake_step(self, step: Key, response: Response) -> None:
        if not response.ok:
            self.state = State.CLOSED
            what = {
                Key.PEER_PROPERTIES: "peer properties",
                Key.SASL_HANDSHAKE: "the SASL handshake",
                Key.SASL_AUTHENTICATE: f"the login of user {self.username!r}",
                Key.OPEN: f"opening vhost {self.vhost!r}",
            }[step]
            raise StreamRefused(
                f"the broker refused {what}: {frames.code_name(response.code)}", response.code
            )
        if step is Key.PEER_PROPERTIES:
            self.peer_properties = response.body.string_map() if response.body.rest() else {}
            self._handshake[self._request(Key.SASL_HANDSHAKE)] = Key.SASL_HANDSHAKE
        elif step is Key.SASL_HANDSHAKE:
            mechanisms = response.body.strings()
            mechanism = "EXTERNAL" if self.external else "PLAIN"
            if mechanism not in mechanisms:
                self.state = State.CLOSED
                raise StreamRefused(
                    f"the broker offers SASL {', '.join(mechanisms)}, not {mechanism}",
                    ResponseCode.SASL_MECHANISM_NOT_SUPPORTED,
                )
            secret = b"" if self.external else b"\0" + self.username.encode() + b"\0"
            secret += b"" if self.external else self.password.encode()
            body = frames.string(mechanism) + _U32.pack(len(secret)) + secret
            self._handshake[self._request(Key.SASL_AUTHENTICATE, body)] = Key.SASL_AUTHENTICATE
        elif step is Key.OPEN:
            self.server_properties = response.body.string_map() if response.body.rest() else {}
            self.state = State.OPEN

    def _tune(self, r: Reader) -> None:
        frame_max, heartbeat = r.u32(), r.u32()

        def lower(ours: int, theirs: int) -> int:
            return min(ours, theirs) if ours and theirs else ours or theirs

        self.tuned_frame_max = lower(self.frame_max, frame_max)
        self.heartbeat = lower(self.heartbeat, heartbeat)
        self.out += frames.frame(
            Key.TUNE, _U32.pack(self.tuned_frame_max) + _U32.pack(self.heartbeat)
        )
        self._handshake[self._request(Key.OPEN, frames.string(self.vhost))] = Key.OPEN
