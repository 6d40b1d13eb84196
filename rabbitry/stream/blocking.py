"""The blocking driver of the stream protocol: a socket under a ``Session``.

``StreamClient`` connects with an AMQP URL's settings (credentials, vhost, TLS: the same
``ConnectionSettings`` as every AMQP client of rabbitry) on the stream port, and offers what
the Spark source and sink need: ``read_chunks`` (a range of offsets of one stream, in order)
and ``Producer`` (named producer, publishing ids: the broker drops a message whose id is not
above the last one it stored for that name; ``publish`` drives one message by message).
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import StreamProtocolError, StreamRefused, StreamUnavailable
from rabbitry.stream import frames
from rabbitry.stream.frames import Chunk, OffsetSpec
from rabbitry.stream.pairing import other_broker
from rabbitry.stream.producer import PUBLISH_BATCH, Producer, PublishCount, entries_of
from rabbitry.stream.session import (
    Closed,
    Event,
    MetadataChanged,
    Response,
    Session,
)

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_TLS_PORT",
    "Producer",
    "PublishCount",
    "StreamClient",
    "probe",
]

DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551
READ_SIZE = 1 << 20
_DIRECT = 4096
"""The least of a frame still to come that is received straight into the frame's buffer."""
INITIAL_CREDIT = 128
"""Chunks the broker may send ahead of the reader (one more is granted per chunk read): with
8, a reader of 1 KB messages (chunks of about 56 KB) waited on the broker for over half of its
time; 32 halved a read's time on a loaded 2-core machine (bench/spark_source.py); 128 (with
``CREDIT_STEP`` 32) read a stream of one message a chunk (a publisher that waits for each
confirm writes those) 10% faster again in Spark, and cost streams of larger chunks nothing
(TCP holds back what the reader has not taken)."""
SLOWEST_EDGE = 30.0
"""The longest ``bounds`` waits for a stream's first chunk (a broker short of CPU)."""
CREDIT_STEP = 32
"""Chunks read before they are granted again, in one credit frame (the broker may still send
``INITIAL_CREDIT - CREDIT_STEP`` ahead): one frame a chunk cost a send a chunk."""


def _connect_socket(settings: ConnectionSettings) -> socket.socket:
    sock = socket.create_connection((settings.host, settings.port), settings.connect_timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if settings.tls is not None:
        sock = settings.tls.wrap_socket(sock, server_hostname=settings.server_hostname)
    return sock


class StreamClient:
    """One stream-protocol connection. Not thread-safe: one caller drives it."""

    def __init__(self, settings: ConnectionSettings, *, port: int = DEFAULT_PORT) -> None:
        self.settings = dataclasses.replace(settings, port=port, nodes=())
        self.display = f"{self.settings.host}:{port}"
        try:
            self._sock = _connect_socket(self.settings)
        except OSError as exc:
            raise StreamUnavailable(
                f"cannot connect to {self.display}: {type(exc).__name__}: {exc}"
            ) from None
        self.session = Session(
            username=self.settings.username,
            password=self.settings.password,
            vhost=self.settings.vhost,
            external=self.settings.external_auth,
            client_properties={"connection_name": self.settings.connection_name or "rabbitry"},
        )
        self._timeout_now: float | None = self.settings.connect_timeout
        self._received = bytearray(READ_SIZE)
        """Where bytes are received (the session copies each frame out of it)."""
        self._events: list[Event] = []
        """What the broker said that a caller has not taken yet, but chunks."""
        self._chunks: list[Chunk] = []
        """The chunks delivered that a reader has not taken yet, in order."""
        self._publishers = 0
        try:
            self.session.start()
            deadline = time.monotonic() + self.settings.connect_timeout
            while not self.session.ready:
                if time.monotonic() > deadline:
                    raise StreamUnavailable(
                        f"no stream-protocol handshake with {self.display} in"
                        f" {self.settings.connect_timeout:g} s"
                    )
                self._round(0.5)
        except BaseException:
            self.close()
            raise

    # --- I/O --------------------------------------------------------------------------------

    def _flush(self) -> None:
        out = self.session.out
        if out:
            self._timeout(self.settings.connect_timeout)
            self._sock.sendall(out)
            out.clear()

    def _timeout(self, seconds: float) -> None:
        # each change of a socket's timeout is a system call: made only when it changes
        if seconds != self._timeout_now:
            self._sock.settimeout(seconds)
            self._timeout_now = seconds

    def send(self, *parts: bytes | memoryview) -> None:
        """Write what is due, then ``parts`` as they are: a publish frame's entries are not
        copied into the session's output."""
        self._flush()
        self._timeout(self.settings.connect_timeout)
        try:
            for part in parts:
                self._sock.sendall(part)
        except OSError as exc:
            raise StreamUnavailable(f"the connection to {self.display} broke: {exc}") from None

    def _round(self, timeout: float) -> bool:
        """Write what is due, read once (up to ``timeout``); True when bytes came."""
        self._flush()
        self._timeout(timeout)
        # the rest of a large frame begun (a chunk, mostly) straight into its place; else
        # into one buffer reused, from which the session copies each frame out
        into = self.session.into()
        direct = into if into is not None and len(into) >= _DIRECT else None
        try:
            count = self._sock.recv_into(self._received if direct is None else direct)
        except TimeoutError:
            return False
        except OSError as exc:
            raise StreamUnavailable(f"the connection to {self.display} broke: {exc}") from None
        if not count:
            raise StreamUnavailable(f"{self.display} closed the stream-protocol connection")
        if direct is not None:
            events = self.session.received_into(count)
        else:
            events = self.session.receive(memoryview(self._received)[:count])
        for event in events:
            if isinstance(event, Closed):
                raise StreamRefused(
                    f"{self.display} closed the connection: {event.reason or event.code}",
                    event.code,
                )
            if isinstance(event, Chunk):
                self._chunks.append(event)
            else:
                self._events.append(event)
        self._flush()
        return True

    def _answer(self, correlation: int, what: str) -> Response:
        deadline = time.monotonic() + self.settings.connect_timeout
        while True:
            for i, event in enumerate(self._events):
                if isinstance(event, Response) and event.correlation_id == correlation:
                    del self._events[i]
                    return event
            if time.monotonic() > deadline:
                raise StreamUnavailable(f"{self.display} did not answer {what}")
            self._round(0.5)

    def _ok(self, correlation: int, what: str) -> Response:
        response = self._answer(correlation, what)
        if not response.ok:
            raise StreamRefused(
                f"{what} at {self.display}: {frames.code_name(response.code)}", response.code
            )
        return response

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.session.ready:
                self.session.close()
                self._flush()
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------

    def read_chunks(
        self,
        stream: str,
        start: int,
        end: int,
        *,
        idle_timeout: float = 60.0,
        missing: Callable[[int], None] | None = None,
    ) -> Iterator[Chunk]:
        """The chunks holding offsets ``start`` to ``end - 1``, in order, each cut to the
        records of that range (``first_offset`` is its first record's). ``StreamRefused`` for
        a stream that does not exist; ``StreamUnavailable`` when nothing of the range comes
        for ``idle_timeout`` seconds. When retention has removed ``start``, ``missing`` is
        called with the first offset held (it may raise)."""
        if end <= start:
            return
        sub = 1
        self._ok(
            self.session.subscribe(sub, stream, start, INITIAL_CREDIT),
            f"subscribing to stream {stream!r} at offset {start}",
        )
        checked = False
        owed = 0
        last_seen = time.monotonic()
        try:
            while True:
                chunks, self._chunks = self._chunks, []
                for chunk in chunks:
                    if chunk.subscription_id != sub:
                        continue
                    owed += 1
                    if owed >= CREDIT_STEP:
                        self.session.credit(sub, owed)
                        owed = 0
                    first = chunk.first_offset
                    after = first + chunk.count
                    if not checked and after > start:
                        checked = True
                        if first > start and missing is not None:
                            missing(first)
                    if after <= start:
                        continue
                    if first < start or after > end:
                        chunk = chunk.cut(start, end)
                    if chunk.count:
                        yield chunk
                    if after >= end:
                        return
                now = time.monotonic()
                if chunks:
                    last_seen = now
                elif now - last_seen > idle_timeout:
                    raise StreamUnavailable(
                        f"stream {stream!r}: no message of offsets {start}-{end - 1} came for"
                        f" {idle_timeout:g} s (at {self.display}); has retention removed them?"
                    )
                self._round(0.5)
        finally:
            self._unsubscribe(sub)

    def bounds(self, stream: str, *, patience: float) -> tuple[int, int] | None:
        """(first offset, offset after the last message) of ``stream``, from its first and its
        last chunk (one chunk each: a chunk says how many records it holds, so nothing waits
        for deliveries to pause); (0, 0) when no chunk comes in ``patience`` seconds (more on
        a broker slow to answer: twenty times its answer); None when an edge chunk holds no
        message (a tracking chunk), which only reading messages can settle."""
        first = self._edge(stream, OffsetSpec.FIRST, patience)
        if first is None:
            return (0, 0)
        last = self._edge(stream, OffsetSpec.LAST, patience)
        if last is None or not first.count or not last.count:
            return None
        return first.first_offset, max(last.first_offset + last.count, first.first_offset + 1)

    def _edge(self, stream: str, spec: OffsetSpec, patience: float) -> Chunk | None:
        """The one chunk delivered from ``spec`` with a credit of one; None when none comes."""
        sub = 2
        asked = time.monotonic()
        self._ok(
            self.session.subscribe(sub, stream, spec, 1),
            f"subscribing to stream {stream!r} at its {spec.name.lower()} chunk",
        )
        answered = time.monotonic() - asked
        deadline = time.monotonic() + min(SLOWEST_EDGE, max(patience, 20 * answered))
        try:
            while True:
                for chunk in self._chunks:
                    if chunk.subscription_id == sub:
                        return chunk
                if time.monotonic() > deadline:
                    return None
                self._round(0.05)
        finally:
            self._unsubscribe(sub)

    def _unsubscribe(self, sub: int) -> None:
        """End subscription ``sub`` (if the connection still stands); drop chunks it left."""
        with contextlib.suppress(Exception):
            if self.session.ready:
                self.session.unsubscribe(sub)
                self._flush()
        self._chunks = []

    # --- publishing -------------------------------------------------------------------------

    def last_publishing_id(self, reference: str, stream: str) -> int:
        """The highest publishing id the broker stored for producer ``reference`` (0: none)."""
        response = self._ok(
            self.session.query_publisher_sequence(reference, stream),
            f"the sequence of producer {reference!r} on stream {stream!r}",
        )
        return int(response.body.u64())

    def publish(
        self,
        reference: str,
        messages: Iterable[tuple[str, int, bytes]],
        *,
        timeout: float = 60.0,
    ) -> PublishCount:
        """Publish ``(stream, publishing id, message)`` triples as producer ``reference`` and
        wait for every confirm; ids must rise within each stream (see ``Producer``)."""
        pending: dict[str, list[tuple[int, bytes]]] = {}
        with Producer(self, reference, timeout=timeout) as producer:
            for stream, publishing_id, message in messages:
                if publishing_id <= producer.last(stream):
                    producer.count.skipped += 1
                    continue
                batch = pending.setdefault(stream, [])
                batch.append((publishing_id, message))
                if len(batch) >= PUBLISH_BATCH:
                    producer.send(stream, *entries_of(pending.pop(stream)))
            for stream, batch in pending.items():
                producer.send(stream, *entries_of(batch))
            return producer.finish()

    def route(self, routing_key: str, super_stream: str) -> list[str]:
        """The partition streams of ``super_stream`` that ``routing_key`` goes to."""
        response = self._ok(
            self.session.route(routing_key, super_stream),
            f"routing key {routing_key!r} of super stream {super_stream!r}",
        )
        return response.body.strings()

    def partitions(self, super_stream: str) -> list[str]:
        """The partition streams of ``super_stream``; ``StreamRefused`` if it is none."""
        response = self._ok(
            self.session.partitions(super_stream),
            f"the partitions of super stream {super_stream!r}",
        )
        return response.body.strings()

    def metadata(self, streams: Sequence[str]) -> dict[str, Any]:
        """Each stream's response code and leader ``(host, port)`` as the broker advertises."""
        response = self._answer(self.session.metadata(streams), "a metadata request")
        r = response.body
        brokers = {}
        for _ in range(r.u32()):
            ref = r.u16()
            host = r.string()
            brokers[ref] = (host, r.u32())
        out: dict[str, Any] = {}
        for _ in range(r.u32()):
            name, code, leader = r.string(), r.u16(), r.u16()
            replicas = [r.u16() for _ in range(r.u32())]
            out[name] = {
                "code": code,
                "leader": brokers.get(leader),
                "replicas": [brokers[x] for x in replicas if x in brokers],
            }
        return out

    def changed(self) -> list[MetadataChanged]:
        return [e for e in self._events if isinstance(e, MetadataChanged)]


def probe(
    settings: ConnectionSettings,
    port: int,
    streams: Sequence[str] = (),
    timeout: float = 5.0,
    *,
    cluster: str | None = None,
) -> str | None:
    """None when the stream protocol answers on ``port`` with these credentials and knows
    ``streams``, else why not. ``OtherBroker`` when it answers for another cluster than
    ``cluster`` (the AMQP URL's ``cluster_name``): another broker on the same host."""
    quick = dataclasses.replace(settings, connect_timeout=timeout)
    where = f"{settings.host}:{port}"
    try:
        with StreamClient(quick, port=port) as client:
            found_cluster = client.session.peer_properties.get("cluster_name")
            other = other_broker(cluster, found_cluster, where)
            if other is not None:
                raise other
            if streams:
                found = client.metadata(streams)
                unknown = [s for s in streams if found.get(s, {}).get("code") != 1]
                if unknown:
                    return (
                        f"the broker there has no stream {unknown[0]!r} in vhost"
                        f" {settings.vhost!r}: is it another broker?"
                    )
            return None
    except (StreamUnavailable, StreamRefused, StreamProtocolError) as exc:
        return str(exc)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
