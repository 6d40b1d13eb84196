"""Reading stream queues by offset over AMQP 0-9-1: what a stream holds, and exact ranges.

A stream consumer is a ``basic.consume`` with an ``x-stream-offset`` argument (``first``,
``last``, ``next``, an offset or a timestamp) on a channel with a prefetch; acks only return
credit (the stream keeps its messages), and every delivery carries its offset in the
``x-stream-offset`` header. ``StreamReader`` speaks it over rabbitry's own connection
(``SocketWire`` and ``ConsumerSession``), blocking, one connection per reader:

- ``bounds(stream)``: the first offset the stream holds and the one after its last message.
  AMQP 0-9-1 has no method that answers this (``queue.declare-ok`` counts 0 messages for a
  stream; the management API's count lags and says nothing of offsets), so the reader consumes
  from ``first`` for the one and from ``last`` (which starts at the stream's last chunk, and
  arrives right after ``consume-ok``) for the other, and takes the highest offset delivered
  until deliveries pause. Messages published meanwhile can only raise it: the answer is always
  an offset the stream holds, so a range that ends there can be read to its end.
- ``check(streams)``: each exists and is a stream (a consumer at ``next``, at once cancelled).
- ``offset_at(stream, when)``: the first offset at or after a point in time; ``first_offset``
  the first one held.
- ``read(stream, start, end)``: the messages of ``[start, end)``, in offset order, the same ones
  on every call while retention keeps them.
- ``latest(stream, accept)``: the last message of a stream that ``accept`` takes, found exactly
  (no waiting for deliveries to pause): the reader appends a marker message of its own after
  subscribing at ``last`` and reads until the marker comes back, then steps back a chunk at a
  time while the stream holds nothing it accepts after a point. ``declare_stream`` and
  ``append`` make and write the small streams this is meant for (``consumer.tracking``).

A missing stream, a queue that is not a stream and a refused login raise ``StreamError``
naming the stream, the vhost and what to do.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rabbitry.amqp.acks import ack_frame
from rabbitry.amqp.blocking import Disconnected, SocketWire
from rabbitry.amqp.connector import Outage, connect
from rabbitry.amqp.message import CHANNEL
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.settings import Backoff, ConnectionSettings
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.stream_session import OFFSET_HEADER, StreamSession, offset_of
from rabbitry.errors import (
    BrokerError,
    ConnectionLost,
    StreamError,
    StreamNotFound,
    StreamUnreachable,
)
from rabbitry.uri import mask_text

__all__ = [  # the session's names stay importable from here, where they were first
    "FIRST_WAIT",
    "OFFSET_HEADER",
    "StreamError",
    "StreamNotFound",
    "StreamReader",
    "StreamSession",
    "StreamUnreachable",
    "offset_of",
]

FIRST_WAIT = 1.0
"""Seconds to wait for the first delivery of ``first``/``last`` before calling a stream empty:
a stream that holds messages delivers its first chunk within milliseconds of ``consume-ok``
on a broker with time to spare (see ``Waits`` for a busy one)."""
QUIET = 0.2
"""Deliveries from ``last`` that pause this long have delivered the last chunk."""
SETTLE_LIMIT = 5.0
"""``bounds`` stops following a stream that keeps growing after this long."""
SLOWEST_WAIT = 30.0
"""The longest a busy broker is given to deliver a stream's first chunk."""


@dataclass(frozen=True)
class Waits:
    """How long silence must last before ``bounds`` concludes, scaled to the broker's pace.

    Only silence tells an empty stream from one that has not delivered yet, and a broker
    short of CPU (sharing it with Spark executors, say) can take seconds to deliver a chunk
    it holds: a fixed second then reads a stream of 1,000 messages as empty, and a batch read
    of it as no rows at all. Each wait is at least a multiple of the time the broker took to
    answer ``basic.consume`` (``answered``, seconds). That answer can come fast while the
    deliveries lag (seen on 3.10 beside a starting Spark session), so a caller that cannot
    afford a false empty also gives a longer ``patience`` (a batch read: ``BATCH_PATIENCE``)."""

    first: float
    quiet: float
    limit: float

    @classmethod
    def after(cls, answered: float, patience: float = FIRST_WAIT) -> Waits:
        """``patience``: the least wait for a first delivery (longer where calling a stream
        empty by mistake would lose rows: a batch read)."""
        first = min(SLOWEST_WAIT, max(patience, 20 * answered))
        quiet = min(first, max(QUIET, 4 * answered))
        return cls(first, quiet, max(SETTLE_LIMIT, first + quiet))


ONE_ROUND = Backoff(give_up_after=None)  # each node once (rounds=1), never a pause


class StreamReader:
    """One connection that reads streams by offset. Not thread-safe; close it when done."""

    def __init__(
        self,
        url: str | ConnectionSettings,
        *,
        prefetch: int = 2000,
        connection_name: str = "rabbitry-stream-reader",
        connect_timeout: float = 10.0,
    ) -> None:
        if isinstance(url, ConnectionSettings):
            self.settings = replace(
                url,
                connection_name=connection_name,
                connect_timeout=connect_timeout,
                backoff=ONE_ROUND,
            )
        else:
            self.settings = ConnectionSettings.from_url(
                url,
                connection_name=connection_name,
                connect_timeout=connect_timeout,
                backoff=ONE_ROUND,
            )
        self.prefetch = prefetch
        self._wire: SocketWire | None = None
        self._trying: SocketWire | None = None
        self._failure: BaseException | None = None
        self._session: StreamSession | None = None
        self._unacked = 0
        self._last_tag = 0
        self._acked_tag = 0

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> tuple[SocketWire, StreamSession]:
        if self._wire is not None and self._session is not None:
            if self._session.refused is None:
                return self._wire, self._session
            self.close()  # the channel is gone: a fresh connection for what comes next
        rule = Reconnect(self.settings, time.monotonic(), rounds=1)
        try:
            opened = connect(Outage(rule, tidy=self._failed_try), self._open)
        except ConnectionLost:  # every node failed once: say why the last one did
            assert self._failure is not None
            raise self._unreachable(self._failure) from None
        assert opened is not None  # a reader never stops an outage half way
        self._wire, self._session = opened
        self._unacked = self._last_tag = self._acked_tag = 0
        return opened

    def _open(self, target: ConnectionSettings) -> tuple[SocketWire, StreamSession]:
        self._trying = wire = SocketWire(target)
        session = StreamSession(target, prefetch=self.prefetch)
        wire.handshake(session)
        self._trying = None
        return wire, session

    def _failed_try(self, exc: BaseException) -> None:
        """A failed try: the next node, once each (one round); a broker that refused the
        reader (a login, a vhost) is final at once."""
        if self._trying is not None:
            self._trying.close()
            self._trying = None
        if isinstance(exc, BrokerError):
            raise StreamError(str(exc)) from None
        self._failure = exc

    def _unreachable(self, exc: BaseException) -> StreamUnreachable:
        """What a reader reports when no node took its connection: it never waits."""
        shown = self.settings.display
        if isinstance(exc, Disconnected):
            return StreamUnreachable(f"no AMQP connection to {shown}: {exc}")
        return StreamUnreachable(
            f"cannot reach the broker at {shown}: {mask_text(str(exc)) or type(exc).__name__};"
            " check the URL (host, port) and that the broker runs"
        )

    def close(self) -> None:
        wire, session = self._wire, self._session
        self._wire = self._session = None
        if wire is None or session is None:
            return
        wire.close_session(session, within=2.0)

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one round of I/O ---------------------------------------------------------------------

    def _poll(self, wire: SocketWire, session: StreamSession, timeout: float) -> list[Any]:
        """Deliveries that arrived within ``timeout``; credit goes back as they are taken."""
        try:
            wire.exchange(session, timeout)
        except Disconnected as exc:
            self._wire = self._session = None
            wire.close()
            raise StreamUnreachable(f"connection to {self.settings.display} lost: {exc}") from None
        if session.refused is not None:
            self._refusal(session.refused)
        if not session.tick(time.monotonic()):
            raise StreamUnreachable(f"no heartbeat from {self.settings.display}")
        inbox = session.inbox
        if inbox:
            session.inbox = []
            self._last_tag = inbox[-1].tag
            self._unacked += len(inbox)
            if self._unacked >= max(1, self.prefetch // 2):
                self._ack(session)
        return inbox

    def _ack(self, session: StreamSession) -> None:
        if self._last_tag > self._acked_tag:
            session.out += ack_frame(CHANNEL, self._last_tag, True)
            self._acked_tag = self._last_tag
        self._unacked = 0

    def _refusal(self, refused: tuple[int, str, str]) -> None:
        code, text, queue = refused
        where = f"in vhost {self.settings.vhost!r} at {self.settings.display}"
        if code == 404:
            raise StreamNotFound(
                f"stream {queue!r} does not exist {where}: declare it (a queue of type stream,"
                " or a super_streams: entry, then rabbitry apply) or fix the stream name"
            )
        if code == 406 and OFFSET_HEADER in text:
            raise StreamError(
                f"queue {queue!r} {where} is not a stream ({text}): the source reads stream"
                " queues (x-queue-type: stream) and super streams"
            )
        raise StreamError(f"reading stream {queue!r} {where}: {code} {text}")

    def _started(self, wire: SocketWire, session: StreamSession, indexes: list[int]) -> list[Any]:
        """Wait for every ``consume-ok`` (or a refusal); deliveries that came meanwhile."""
        deadline = time.monotonic() + self.settings.connect_timeout
        got: list[Any] = []
        while not session.consuming.issuperset(indexes):
            if time.monotonic() > deadline:
                raise StreamError(f"{self.settings.display} did not answer basic.consume")
            got += self._poll(wire, session, 0.05)
        return got

    def _collect(
        self,
        streams: Sequence[str],
        offset: int | str | dt.datetime,
        *,
        first_only: bool,
        patience: float = FIRST_WAIT,
    ) -> dict[str, tuple[int, int] | None]:
        """Per stream, (lowest, highest) offset delivered from ``offset`` until its deliveries
        pause (or its first delivery with ``first_only``); None when nothing came. All the
        streams at once, on one channel."""
        wire, session = self._connect()
        asked = time.monotonic()
        index = {session.consume(stream, offset): stream for stream in streams}
        found: dict[str, list[int]] = {}
        quiet_from: dict[str, float] = {}
        try:
            pending = self._started(wire, session, list(index))
            started = time.monotonic()
            waits = Waits.after(started - asked, patience)
            while True:
                now = time.monotonic()
                for message in pending:
                    stream = index.get(message.consumer)
                    if stream is None:
                        continue
                    at = offset_of(message)
                    seen = found.setdefault(stream, [at, at])
                    seen[0], seen[1] = min(seen[0], at), max(seen[1], at)
                    quiet_from[stream] = now
                done = all(
                    (s in found and (first_only or now - quiet_from[s] >= waits.quiet))
                    or (s not in found and now - started >= waits.first)
                    for s in streams
                )
                if done or now - started >= waits.limit:
                    break
                pending = self._poll(wire, session, 0.02)
        finally:
            if session.refused is None and self._session is session:
                for i in index:
                    session.cancel(i)
                self._ack(session)
        return {s: (found[s][0], found[s][1]) if s in found else None for s in streams}

    # -- what callers use ---------------------------------------------------------------------

    def check(self, streams: Sequence[str]) -> None:
        """Raise ``StreamError`` unless every one of ``streams`` exists and is a stream: a
        consumer at ``next`` on each (nothing is delivered), cancelled once the broker took it."""
        wire, session = self._connect()
        indexes = [session.consume(stream, "next") for stream in streams]
        self._started(wire, session, indexes)
        for index in indexes:
            session.cancel(index)

    def bounds(self, stream: str) -> tuple[int, int]:
        """(first offset, offset after the last message); (0, 0) for a stream never written."""
        return self.bounds_of([stream])[stream]

    def bounds_of(
        self, streams: Sequence[str], *, patience: float = FIRST_WAIT
    ) -> dict[str, tuple[int, int]]:
        """``bounds`` of each stream, asked of all of them at once; a stream that delivers
        nothing for ``patience`` seconds (more on a slow broker: ``Waits``) is empty."""
        firsts = self._collect(streams, "first", first_only=True, patience=patience)
        written = [s for s in streams if firsts[s] is not None]
        lasts = (
            self._collect(written, "last", first_only=False, patience=patience) if written else {}
        )
        out: dict[str, tuple[int, int]] = {}
        for stream in streams:
            first = firsts[stream]
            if first is None:
                out[stream] = (0, 0)
                continue
            last = lasts.get(stream)
            high = last[1] if last is not None else first[0]
            out[stream] = (first[0], max(high, first[0]) + 1)
        return out

    def first_offset(self, stream: str) -> int | None:
        """The offset of the first message ``stream`` holds; None if it holds none."""
        found = self._collect([stream], "first", first_only=True)[stream]
        return None if found is None else found[0]

    def offset_at(self, stream: str, when: dt.datetime) -> int | None:
        """The first offset of the first chunk written at or after ``when``; None if none."""
        found = self._collect([stream], when, first_only=True)[stream]
        return None if found is None else found[0]

    def read(
        self,
        stream: str,
        start: int,
        end: int,
        *,
        idle_timeout: float = 60.0,
        missing: Callable[[int], None] | None = None,
    ) -> Iterator[IncomingMessage]:
        """The messages with offsets ``start`` up to ``end - 1``, in order. Fails with
        ``StreamError`` when no message of the range comes for ``idle_timeout`` seconds
        (the range goes past the stream's end). When retention has removed ``start``, the
        broker begins at the first offset it holds: ``missing`` is called with that offset
        (it may raise) before the rest of the range is read."""
        if end <= start:
            return
        silent = f"no message of offsets {start}-{end - 1} came for {idle_timeout:g} s"
        checked = False
        with contextlib.closing(
            self._follow(stream, start, idle_timeout, 0.5, silent, "; has retention removed them?")
        ) as deliveries:
            for message in deliveries:
                at = offset_of(message)
                if at < start:
                    continue
                if not checked:
                    checked = True
                    if at > start and missing is not None:
                        missing(at)
                if at >= end:
                    return
                yield message
                if at >= end - 1:
                    return

    def _follow(
        self,
        stream: str,
        offset: int | str,
        idle_timeout: float,
        poll: float,
        silent: str,
        advice: str = "",
    ) -> Generator[IncomingMessage, None, None]:
        """The deliveries of a consumer on ``stream`` from ``offset``, as they come; it is
        subscribed before the first one is asked for, and cancelled when the caller closes
        the iterator. ``StreamError`` saying ``silent`` when none comes for
        ``idle_timeout`` seconds."""
        wire, session = self._connect()
        index = session.consume(stream, offset)
        pending = self._started(wire, session, [index])
        silence = f"stream {stream!r}: {silent} (at {self.settings.display}){advice}"
        return self._deliveries(wire, session, index, pending, idle_timeout, poll, silence)

    def _deliveries(
        self,
        wire: SocketWire,
        session: StreamSession,
        index: int,
        pending: list[Any],
        idle_timeout: float,
        poll: float,
        silence: str,
    ) -> Generator[IncomingMessage, None, None]:
        last_seen = time.monotonic()
        try:
            while True:
                for message in pending:
                    if message.consumer == index:
                        yield message
                now = time.monotonic()
                if pending:
                    last_seen = now
                elif now - last_seen > idle_timeout:
                    raise StreamError(silence)
                pending = self._poll(wire, session, poll)
        finally:
            if self._session is session and session.refused is None:
                session.cancel(index)
                self._ack(session)

    def declare_stream(self, stream: str, arguments: Mapping[str, Any]) -> None:
        """Declare the stream queue ``stream`` (``x-queue-type: stream`` among ``arguments``);
        one that exists with other arguments is refused by the broker (``StreamError``)."""
        wire, session = self._connect()
        session.declare(stream, arguments)
        deadline = time.monotonic() + self.settings.connect_timeout
        while stream not in session.declared:
            if time.monotonic() > deadline:
                raise StreamError(f"{self.settings.display} did not answer queue.declare")
            self._poll(wire, session, 0.05)

    def append(self, stream: str, body: bytes, *, message_id: str | None = None) -> None:
        """Publish ``body`` to ``stream`` (through the default exchange); not waited for."""
        _, session = self._connect()
        session.publish(
            session.builder.build(
                body, exchange="", routing_key=stream, message_id=message_id, persistent=True
            )
        )

    def latest(
        self,
        stream: str,
        accept: Callable[[IncomingMessage], bool],
        *,
        idle_timeout: float = 30.0,
    ) -> tuple[int, IncomingMessage] | None:
        """(offset, message) of the last message of ``stream`` that ``accept`` takes; None
        when it holds none. Appends one marker message to ``stream`` (a message with an id
        and an empty body, which ``accept`` should refuse)."""
        silent = f"a message appended to it did not come back within {idle_timeout:g} s"
        deliveries = self._follow(stream, "last", idle_timeout, 0.05, silent)
        marker = f"rabbitry-marker-{uuid.uuid4().hex}"
        self.append(stream, b"", message_id=marker)
        found: tuple[int, IncomingMessage] | None = None
        lowest: int | None = None
        end: int | None = None
        with contextlib.closing(deliveries):
            for message in deliveries:
                at = offset_of(message)
                lowest = at if lowest is None else min(lowest, at)
                if message.message_id == marker:
                    end = lowest  # the chunk at "last" read whole, up to the marker
                    break
                if accept(message):
                    found = (at, message)
        assert end is not None
        while found is None and end > 0:
            found, end = self._chunk_before(stream, end, accept, idle_timeout)
        return found

    def _chunk_before(
        self,
        stream: str,
        end: int,
        accept: Callable[[IncomingMessage], bool],
        idle_timeout: float,
    ) -> tuple[tuple[int, IncomingMessage] | None, int]:
        """The last accepted message of the chunk that holds offset ``end - 1``, and the
        chunk's first offset (0 when the stream holds nothing before ``end``: retention)."""
        silent = f"offsets before {end} did not come within {idle_timeout:g} s"
        found: tuple[int, IncomingMessage] | None = None
        lowest: int | None = None
        with contextlib.closing(self._follow(stream, end - 1, idle_timeout, 0.05, silent)) as got:
            for message in got:
                at = offset_of(message)
                if at >= end:
                    # nothing delivered below ``end``: retention removed what was there
                    return found, (0 if lowest is None else lowest)
                lowest = at if lowest is None else min(lowest, at)
                if accept(message):
                    found = (at, message)
        raise AssertionError("a stream's deliveries end only with an error")  # pragma: no cover
