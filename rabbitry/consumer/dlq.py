"""Parking lots (dead-letter queues): look at them, send messages back, clear them out.

- ``peek``: read messages without removing them: they are consumed unacked on one channel and
  returned to the queue, in order, when the channel closes.
- ``replay``: send the selected messages back to where they failed (the ``x-rabbitry-queue``
  header the worker sets, else the queue named in the broker's ``x-death``) or to a given
  exchange, each with a publisher confirm; only a confirmed copy lets the parked original be
  acked. A crash between the two leaves a duplicate, never a loss; unselected messages stay.
  The replayed copy gets a fresh retry ladder (rabbitry's attempt headers and ``x-death``
  dropped) and ``x-rabbitry-replayed`` counts how often it was sent back.
- ``purge``: delete the selected messages (or all of them).

``replay`` and ``purge`` act only on a parking lot unless told otherwise (``any_queue``): a
queue the spec declares as one (``parking_lots_of``, when the caller has the spec), else a
queue named like the ones rabbitry declares (``<queue>.parking``, ``<queue>.dead``). A live
work queue is never emptied by a slip of the queue name.

Selection: at most ``count`` messages, only these message ids, only messages whose headers
match every ``key=value`` given; messages are scanned once, in queue order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pamqp.commands import Basic

from rabbitry.amqp.channel import Channel
from rabbitry.amqp.message import Message
from rabbitry.consumer.decision import replay_headers
from rabbitry.errors import ChannelRefused
from rabbitry.errors import DlqError as DlqError
from rabbitry.errors import NotAParkingLot as NotAParkingLot
from rabbitry.policies.retry import (
    ATTEMPT_HEADER,
    LAST_ERROR_HEADER,
    LAST_FAILURE_HEADER,
    PARKED_REASON_HEADER,
    QUEUE_HEADER,
)
from rabbitry.publisher import Publisher

if TYPE_CHECKING:
    from rabbitry.topology.spec.model import Spec

_IDLE = 1.0
_RETURN_WAIT = 5.0
PARKING_SUFFIXES = (".parking", ".dead")
"""How rabbitry names the parking lots it declares (``parking: true``, ``dead_letter: true``)."""


def parking_lots_of(spec: Spec, vhost: str) -> frozenset[str]:
    """The parking lots and dead-letter queues the spec declares in ``vhost``."""
    from rabbitry.topology.patterns.retries import dead_letter_queue_of, parking_queue_of

    lots: set[str] = set()
    for candidate in spec.vhosts:
        if candidate.name != vhost:
            continue
        for queue in candidate.queues:
            for name in (parking_queue_of(queue), dead_letter_queue_of(queue)):
                if name is not None:
                    lots.add(name)
        lots.update(f"{delay.name}.parking" for delay in candidate.delays)
    return frozenset(lots)


_DONE = {"replay": "replayed", "purge": "deleted"}


def refuse_unless_parking_lot(
    queue: str, verb: str, parking_lots: Collection[str] | None = None
) -> None:
    """Raise ``NotAParkingLot`` (``verb``: ``replay`` or ``purge``) unless ``queue`` is one
    of ``parking_lots`` (the spec's, when known) or, without them, is named ``*.parking`` or
    ``*.dead``."""
    if parking_lots is not None:
        if queue in parking_lots:
            return
        how = "the spec given does not declare it as a parking lot or dead-letter queue"
    else:
        if queue.endswith(PARKING_SUFFIXES):
            return
        how = (
            "its name does not end in .parking or .dead, the names rabbitry gives parking lots"
            " (give --spec SPEC to recognise the ones a spec names otherwise)"
        )
    raise NotAParkingLot(
        f"queue {queue!r} is not a parking lot: {how}; nothing was {_DONE[verb]}. To {verb} a"
        " queue that is not a parking lot, pass --any-queue (any_queue=True from code)"
    )


@dataclass(frozen=True)
class Selection:
    """Which parked messages an operation applies to; the empty selection takes all."""

    count: int | None = None
    ids: frozenset[str] = frozenset()
    match: Mapping[str, str] = field(default_factory=dict)

    def accepts(self, message: Parked) -> bool:
        if self.ids and message.message_id not in self.ids:
            return False
        headers = message.headers
        for key, wanted in self.match.items():
            value = headers.get(key)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value is None or str(value) != wanted:
                return False
        return True

    @property
    def everything(self) -> bool:
        return self.count is None and not self.ids and not self.match


@dataclass
class Parked:
    """One message in a parking lot, with what rabbitry and the broker recorded about it."""

    position: int
    body: bytes
    properties: Basic.Properties
    routing_key: str
    exchange: str
    delivery_tag: int = 0

    @property
    def headers(self) -> dict[str, Any]:
        return dict(self.properties.headers or {})

    @property
    def message_id(self) -> str | None:
        value = self.properties.message_id
        return str(value) if value is not None else None

    @property
    def origin(self) -> str | None:
        """The queue it failed in: rabbitry's header, else the broker's first x-death."""
        headers = self.headers
        value = headers.get(QUEUE_HEADER)
        if value:
            return value.decode() if isinstance(value, bytes) else str(value)
        deaths = headers.get("x-death")
        if isinstance(deaths, list) and deaths and isinstance(deaths[-1], dict):
            queue = deaths[-1].get("queue")
            if queue:
                return queue.decode() if isinstance(queue, bytes) else str(queue)
        return None

    @property
    def attempts(self) -> int | None:
        value = self.headers.get(ATTEMPT_HEADER)
        if value is None:
            deaths = self.headers.get("x-death")
            if isinstance(deaths, list) and deaths and isinstance(deaths[-1], dict):
                count = deaths[-1].get("count")
                return int(count) if isinstance(count, int) else None
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    @property
    def reason(self) -> str:
        headers = self.headers
        value = headers.get(PARKED_REASON_HEADER)
        if value:
            return str(value.decode() if isinstance(value, bytes) else value)
        deaths = headers.get("x-death")
        if isinstance(deaths, list) and deaths and isinstance(deaths[-1], dict):
            reason = deaths[-1].get("reason")
            if reason:
                text = reason.decode() if isinstance(reason, bytes) else str(reason)
                return f"dead-lettered by the broker: {text}"
        return ""

    @property
    def last_error(self) -> str:
        value = self.headers.get(LAST_ERROR_HEADER)
        return str(value.decode() if isinstance(value, bytes) else value) if value else ""

    @property
    def parked_at_ms(self) -> int | None:
        value = self.headers.get(LAST_FAILURE_HEADER)
        return int(value) if isinstance(value, int) else None


@dataclass
class ReplayReport:
    scanned: int = 0
    moved: int = 0
    kept: int = 0
    failed: list[tuple[str | None, str]] = field(default_factory=list)
    """(message id, why) of selected messages that were not moved (they stay parked)."""


ProgressHook = Callable[[int, int], None]
"""Called with (messages done, messages selected so far)."""


class ParkingLot:
    """One parking queue on one broker vhost: ``with ParkingLot(url, queue) as lot: ...``."""

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        any_queue: bool = False,
        parking_lots: Collection[str] | None = None,
    ) -> None:
        """``replay`` and ``purge`` refuse a queue that is not a parking lot (see
        ``refuse_unless_parking_lot``; ``parking_lots``: the spec's, ``parking_lots_of``)
        unless ``any_queue``."""
        self.url = url
        self.queue = queue
        self.any_queue = any_queue
        self.parking_lots = parking_lots
        self._channel = Channel(url)
        self._consumer: str | None = None
        try:
            declared = self._channel.queue_declare(queue, passive=True)
        except ChannelRefused as exc:
            self._channel.close()
            raise DlqError(f"no queue {queue!r} in this vhost ({exc.reply_text})") from None
        self.depth = int(declared.message_count or 0)

    def __enter__(self) -> ParkingLot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _scan(self, prefetch: int = 0) -> Iterator[Parked]:
        """Every message present at the start, once, unacked (they return when we close)."""
        channel = self._channel
        channel.qos(prefetch)
        self._consumer = channel.consume(self.queue)
        position = 0
        total = self.depth
        idle_since = time.monotonic()
        while True:
            delivered = channel.next_delivery(0.1)
            if delivered is None:
                if position >= total or time.monotonic() - idle_since > _IDLE:
                    break
                continue
            idle_since = time.monotonic()
            position += 1
            yield Parked(
                position,
                delivered.body,
                delivered.properties,
                delivered.routing_key,
                delivered.exchange,
                delivered.delivery_tag,
            )
            if position >= total:
                break

    def peek(self, selection: Selection = Selection(), limit: int | None = None) -> list[Parked]:
        """The selected messages, left in place."""
        out: list[Parked] = []
        cap = selection.count if limit is None else min(limit, selection.count or limit)
        unfiltered = not selection.ids and not selection.match
        prefetch = cap if cap is not None and unfiltered and cap < 65535 else 0
        for parked in self._scan(prefetch):
            if selection.accepts(parked):
                out.append(parked)
                if cap is not None and len(out) >= cap:
                    break
        self._return_all()
        return out

    def _refuse_unless_lot(self, verb: str) -> None:
        if not self.any_queue:
            refuse_unless_parking_lot(self.queue, verb, self.parking_lots)

    def _return_all(self, acked: int = 0) -> None:
        """Stop consuming and give every unacked message back, in its order (``acked``: how
        many of those read were acked, the others to wait for)."""
        channel = self._channel
        if self._consumer is not None:
            channel.cancel(self._consumer)
            self._consumer = None
        channel.nack(0, multiple=True, requeue=True)
        channel.flush()
        self._until_returned(self.depth - acked)

    def _until_returned(self, expected: int) -> None:
        """Wait (up to ``_RETURN_WAIT`` seconds) until the queue holds ``expected`` messages
        again (what it held at the start less those acked here): the broker puts nacked
        messages back after it answered the nack, and a ``show`` run at once after this one
        must not see them gone."""
        deadline = time.monotonic() + _RETURN_WAIT
        while True:
            ready = int(self._channel.queue_declare(self.queue, passive=True).message_count or 0)
            if ready >= expected or time.monotonic() >= deadline:
                return
            time.sleep(0.01)

    def replay(
        self,
        selection: Selection = Selection(),
        *,
        exchange: str | None = None,
        routing_key: str | None = None,
        window: int = 256,
        on_progress: ProgressHook | None = None,
    ) -> ReplayReport:
        """Move the selected messages back, each confirmed before its parked copy is acked."""
        self._refuse_unless_lot("replay")
        report = ReplayReport()
        chosen: list[Parked] = []
        for parked in self._scan():
            report.scanned += 1
            if selection.count is not None and len(chosen) >= selection.count:
                report.kept += 1
                continue
            if not selection.accepts(parked):
                report.kept += 1
                continue
            chosen.append(parked)

        def outgoing(parked: Parked) -> Message:
            if exchange is not None:
                target_exchange = exchange
                key = routing_key if routing_key is not None else parked.routing_key
            else:
                origin = parked.origin
                if origin is None:
                    raise DlqError(
                        f"message {parked.message_id or parked.position} names no origin queue"
                        " (no x-rabbitry-queue or x-death header): give --exchange"
                    )
                target_exchange, key = "", origin
            props = parked.properties
            return Message(
                parked.body,
                exchange=target_exchange,
                routing_key=key,
                headers=replay_headers(props.headers),
                message_id=props.message_id or f"replay-{parked.position}",
                mandatory=True,
                content_type=props.content_type,
                correlation_id=props.correlation_id,
                reply_to=props.reply_to,
                priority=props.priority,
                message_type=props.message_type,
                persistent=props.delivery_mode != 1,
            )

        sendable: list[tuple[Parked, Message]] = []
        for parked in chosen:
            try:
                sendable.append((parked, outgoing(parked)))
            except DlqError as exc:
                report.failed.append((parked.message_id, str(exc)))
        done = 0
        if on_progress is not None:
            on_progress(0, len(sendable))
        with Publisher(self.url, window=window) as publisher:
            deliveries = publisher.stream(m for _, m in sendable)
            for (parked, _), delivery in zip(sendable, deliveries, strict=True):
                if delivery.ok:
                    self._channel.ack(parked.delivery_tag)
                    report.moved += 1
                else:
                    report.failed.append((parked.message_id, str(delivery.error)))
                done += 1
                if on_progress is not None:
                    on_progress(done, len(sendable))
        self._return_all(acked=report.moved)
        report.kept += len(report.failed)
        return report

    def purge(self, selection: Selection = Selection()) -> int:
        """Delete the selected messages (all of them with the empty selection); how many."""
        self._refuse_unless_lot("purge")
        if selection.everything:
            return self._channel.queue_purge(self.queue)
        removed = 0
        for parked in self._scan():
            if selection.count is not None and removed >= selection.count:
                continue
            if selection.accepts(parked):
                self._channel.ack(parked.delivery_tag)
                removed += 1
        self._return_all(acked=removed)
        return removed


def parse_matches(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``key=value`` pairs from the command line."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise DlqError(f"--match wants key=value, got {pair!r}")
        out[key] = value
    return out
