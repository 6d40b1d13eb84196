"""Confirm tracking: which messages in flight the broker has confirmed, refused or returned.

Publisher confirms number the messages of a channel 1, 2, 3, ...; an ack or nack with
``multiple`` settles every tag up to its own. Deliveries are kept in a list indexed by
``tag - first_tag``: a single ack is one index, a multiple ack walks only the entries it settles
(each entry is walked once in its life), and settled entries leave from the front. Everything
here is pure: no sockets, no event loop, and a clock only when the shell gives one (to measure
how long confirms take: ``latency``).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from rabbitry.errors import ConfirmTimeout, Nacked, PublishError, Unroutable


class Status(enum.Enum):
    """Where one message stands."""

    PENDING = "pending"
    CONFIRMED = "confirmed"
    NACKED = "nacked"
    RETURNED = "returned"
    FAILED = "failed"
    SENT = "sent"
    """Written with confirms off: nothing more is known."""


@dataclass(slots=True, eq=False, repr=False)
class Delivery:
    """One published message and its outcome (``ok``, ``status``, ``error``).

    ``publish_many`` returns these; in async code a pending delivery is awaitable (it returns
    itself once confirmed, or raises its error). ``republished`` counts how often the message
    was sent again after a connection or channel loss: the broker may hold that many copies.
    """

    frames: bytes
    message_id: str
    exchange: str
    routing_key: str
    mandatory: bool
    deadline: float | None = None
    status: Status = Status.PENDING
    error: PublishError | None = None
    returned: tuple[int, str] | None = None
    tag: int = 0
    republished: int = 0
    waiter: Any = None
    sent: float = 0.0
    """When it was handed to the connection (by the tracker's clock, when it has one)."""

    @property
    def ok(self) -> bool:
        """True once the broker confirmed the message (and, if mandatory, routed it).

        With confirms off, True once the message was handed to the connection."""
        return self.status is Status.CONFIRMED or self.status is Status.SENT

    @property
    def settled(self) -> bool:
        return self.status is not Status.PENDING

    def result(self) -> Delivery:
        """Return self when confirmed; raise the error otherwise (or if still pending)."""
        if self.error is not None:
            raise self.error
        if self.status is Status.PENDING:
            raise PublishError(f"message {self.message_id} is not confirmed yet")
        return self

    def __await__(self) -> Generator[Any, None, Delivery]:
        if self.status is Status.PENDING:
            if self.waiter is None:
                import asyncio

                self.waiter = asyncio.get_running_loop().create_future()
            yield from self.waiter.__await__()
        return self.result()

    def __repr__(self) -> str:
        return f"<Delivery {self.message_id} {self.status.value} to {self.exchange!r}>"


SettleHook = Callable[[Delivery], None]


def describe(delivery: Delivery) -> str:
    target = delivery.exchange or "(default exchange)"
    return f"message {delivery.message_id} to {target} [{delivery.routing_key}]"


CONFIRM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
"""Upper bounds (seconds) of the confirm-latency histogram."""


class Latency:
    """A histogram of seconds: counts per bucket of ``CONFIRM_BUCKETS`` (+Inf last), sum, count."""

    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(CONFIRM_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(CONFIRM_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1


class ConfirmTracker:
    """Deliveries in flight on one confirm-mode channel, by delivery tag.

    ``on_settle`` is called once per delivery when it settles (async shells wake waiters there).
    With a ``clock``, ``latency`` holds how long each confirm took (one clock reading per
    message written and one per confirm frame).
    """

    def __init__(
        self, on_settle: SettleHook | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self.clock = clock
        self.latency = Latency()
        self._now = 0.0
        self._items: list[Delivery] = []
        self._start = 0
        self._first_tag = 1
        self._next_tag = 1
        self._by_message_id: dict[str, Delivery] = {}
        self.unsettled = 0
        self.on_settle = on_settle
        self.confirmed = 0
        self.nacked = 0
        self.returned = 0
        self.failed = 0
        self.republished = 0

    # -- publishing -------------------------------------------------------------------------

    def add(self, delivery: Delivery) -> int:
        """Register a delivery about to be written; its delivery tag."""
        tag = self._next_tag
        self._next_tag = tag + 1
        delivery.tag = tag
        if self.clock is not None:
            delivery.sent = self.clock()
        self._items.append(delivery)
        self.unsettled += 1
        if delivery.mandatory:
            self._by_message_id[delivery.message_id] = delivery
        return tag

    @property
    def next_tag(self) -> int:
        return self._next_tag

    # -- what the broker says ---------------------------------------------------------------

    def ack(self, tag: int, multiple: bool) -> None:
        if self.clock is not None:
            self._now = self.clock()
        if multiple:
            self._settle_through(tag, None)
        else:
            self._settle_one(tag, None)

    def nack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self._settle_through(tag, "nack")
        else:
            self._settle_one(tag, "nack")

    def returned_message(
        self, message_id: str | None, reply_code: int, reply_text: str, exchange: str, key: str
    ) -> Delivery | None:
        """A ``basic.return``; it precedes the ack of the same message, which then fails it."""
        delivery = self._by_message_id.get(message_id) if message_id is not None else None
        if delivery is None or delivery.status is not Status.PENDING or delivery.returned:
            # A caller-chosen id reused in flight: the broker returns in publish order.
            delivery = next(
                (
                    d
                    for d in self._pending()
                    if d.mandatory
                    and d.returned is None
                    and d.exchange == exchange
                    and d.routing_key == key
                ),
                None,
            )
        if delivery is not None:
            delivery.returned = (reply_code, reply_text)
        return delivery

    # -- failures the client decides ----------------------------------------------------------

    def expire(self, now: float) -> int:
        """Fail pending deliveries whose deadline passed (checked in publish order)."""
        count = 0
        for delivery in self._pending():
            if delivery.deadline is None or delivery.deadline > now:
                break
            self._finish(
                delivery,
                Status.FAILED,
                ConfirmTimeout(
                    f"{describe(delivery)}: no confirm in time; it may or may not be stored"
                ),
            )
            count += 1
        self._trim()
        return count

    def fail(self, delivery: Delivery, error: PublishError) -> None:
        if delivery.status is Status.PENDING:
            self._finish(delivery, Status.FAILED, error)

    def fail_detached(self, delivery: Delivery, error: PublishError) -> None:
        """Fail a delivery taken out with ``take_unsettled`` that will not be sent again."""
        if delivery.status is Status.PENDING:
            self.unsettled += 1  # _finish counts it out again
            self._finish(delivery, Status.FAILED, error)

    def fail_where(
        self, matches: Callable[[Delivery], bool], error: Callable[[Delivery], PublishError]
    ) -> int:
        count = 0
        for delivery in list(self._pending()):
            if matches(delivery):
                self._finish(delivery, Status.FAILED, error(delivery))
                count += 1
        self._trim()
        return count

    def take_unsettled(self) -> list[Delivery]:
        """The pending deliveries, in order, for republishing on a new channel (tags restart)."""
        pending = list(self._pending())
        self._items = []
        self._start = 0
        self._first_tag = 1
        self._next_tag = 1
        self._by_message_id.clear()
        self.unsettled = 0
        for delivery in pending:
            delivery.republished += 1
            delivery.returned = None
        self.republished += len(pending)
        return pending

    def pending(self) -> list[Delivery]:
        return list(self._pending())

    # -- internals ------------------------------------------------------------------------------

    def _pending(self) -> Iterator[Delivery]:
        items = self._items
        for i in range(self._start, len(items)):
            delivery = items[i]
            if delivery.status is Status.PENDING:
                yield delivery

    def _settle_one(self, tag: int, how: str | None) -> None:
        index = tag - self._first_tag
        if index < self._start or index >= len(self._items):
            return  # already settled and gone (timed out, or a duplicate confirm)
        delivery = self._items[index]
        if delivery.status is Status.PENDING:
            self._conclude(delivery, how)
        if index == self._start:
            self._trim()

    def _settle_through(self, tag: int, how: str | None) -> None:
        items = self._items
        stop = min(tag - self._first_tag + 1, len(items))
        i = self._start
        while i < stop:
            delivery = items[i]
            if delivery.status is Status.PENDING:
                self._conclude(delivery, how)
            i += 1
        if i > self._start:
            self._start = i
        self._trim()

    def _conclude(self, delivery: Delivery, how: str | None) -> None:
        if how == "nack":
            self._finish(
                delivery,
                Status.NACKED,
                Nacked(f"{describe(delivery)}: the broker refused it (basic.nack)"),
            )
        elif delivery.returned is not None:
            code, text = delivery.returned
            self._finish(
                delivery,
                Status.RETURNED,
                Unroutable(f"{describe(delivery)}: reached no queue ({code} {text})"),
            )
        else:
            delivery.status = Status.CONFIRMED
            self.unsettled -= 1
            self.confirmed += 1
            if self.clock is not None:
                self.latency.observe(self._now - delivery.sent)
            if delivery.mandatory:
                self._by_message_id.pop(delivery.message_id, None)
            hook = self.on_settle
            if hook is not None:
                hook(delivery)

    def _finish(self, delivery: Delivery, status: Status, error: PublishError) -> None:
        delivery.status = status
        delivery.error = error
        self.unsettled -= 1
        if status is Status.NACKED:
            self.nacked += 1
        elif status is Status.RETURNED:
            self.returned += 1
        else:
            self.failed += 1
        if delivery.mandatory and self._by_message_id.get(delivery.message_id) is delivery:
            del self._by_message_id[delivery.message_id]
        hook = self.on_settle
        if hook is not None:
            hook(delivery)

    def _trim(self) -> None:
        items = self._items
        start = self._start
        end = len(items)
        while start < end and items[start].status is not Status.PENDING:
            start += 1
        self._start = start
        if start >= 1024 and start * 2 >= end:
            del items[:start]
            self._first_tag += start
            self._start = 0
