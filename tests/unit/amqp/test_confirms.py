"""Confirm tracking: tags, multiple acks and nacks as ranges, returns, timeouts, republishing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rabbitry.amqp.confirms import ConfirmTracker, Delivery, Status
from rabbitry.errors import ConfirmTimeout, Nacked, Unroutable


def delivery(i: int, *, mandatory: bool = False, deadline: float | None = None) -> Delivery:
    return Delivery(b"", f"m{i}", "ex", f"k{i}", mandatory, deadline)


def tracked(n: int, **kw: object) -> tuple[ConfirmTracker, list[Delivery]]:
    tracker = ConfirmTracker()
    items = [delivery(i, **kw) for i in range(n)]  # type: ignore[arg-type]
    for d in items:
        tracker.add(d)
    return tracker, items


def test_tags_start_at_one_and_count_up() -> None:
    tracker, items = tracked(3)
    assert [d.tag for d in items] == [1, 2, 3]
    assert tracker.unsettled == 3


def test_multiple_ack_settles_the_range_up_to_its_tag() -> None:
    tracker, items = tracked(10)
    tracker.ack(6, multiple=True)
    assert [d.status for d in items[:6]] == [Status.CONFIRMED] * 6
    assert all(d.status is Status.PENDING for d in items[6:])
    assert tracker.unsettled == 4


def test_single_ack_in_the_middle_leaves_neighbours_pending() -> None:
    tracker, items = tracked(5)
    tracker.ack(3, multiple=False)
    assert [d.status for d in items] == [Status.PENDING] * 2 + [Status.CONFIRMED] + [
        Status.PENDING
    ] * 2
    tracker.ack(5, multiple=True)
    assert all(d.ok for d in items)
    assert tracker.unsettled == 0


def test_multiple_nack_fails_exactly_its_range() -> None:
    tracker, items = tracked(6)
    tracker.ack(2, multiple=True)
    tracker.nack(4, multiple=True)
    tracker.ack(6, multiple=True)
    assert [d.status for d in items] == [Status.CONFIRMED] * 2 + [Status.NACKED] * 2 + [
        Status.CONFIRMED
    ] * 2
    assert isinstance(items[2].error, Nacked)
    assert "m2" in str(items[2].error)
    assert (tracker.confirmed, tracker.nacked) == (4, 2)


def test_duplicate_and_stale_confirms_are_ignored() -> None:
    tracker, items = tracked(3)
    tracker.ack(2, multiple=True)
    tracker.ack(1, multiple=False)
    tracker.nack(2, multiple=True)
    assert [d.status for d in items] == [Status.CONFIRMED, Status.CONFIRMED, Status.PENDING]
    assert tracker.confirmed == 2


def test_return_then_ack_is_unroutable_matched_by_message_id() -> None:
    tracker, items = tracked(3, mandatory=True)
    tracker.returned_message("m1", 312, "NO_ROUTE", "ex", "k1")
    tracker.ack(3, multiple=True)
    assert [d.status for d in items] == [Status.CONFIRMED, Status.RETURNED, Status.CONFIRMED]
    assert isinstance(items[1].error, Unroutable)
    assert "312 NO_ROUTE" in str(items[1].error)


def test_return_without_known_id_matches_the_first_mandatory_with_that_route() -> None:
    tracker = ConfirmTracker()
    a = Delivery(b"", "same", "ex", "k", True)
    b = Delivery(b"", "same", "ex", "k", True)
    tracker.add(a)
    tracker.add(b)
    tracker.returned_message("same", 312, "NO_ROUTE", "ex", "k")
    tracker.returned_message("same", 312, "NO_ROUTE", "ex", "k")
    tracker.ack(2, multiple=True)
    assert a.status is Status.RETURNED and b.status is Status.RETURNED


def test_expire_fails_overdue_messages_in_order() -> None:
    tracker = ConfirmTracker()
    items = [delivery(i, deadline=float(i)) for i in range(4)]
    for d in items:
        tracker.add(d)
    assert tracker.expire(1.5) == 2
    assert isinstance(items[0].error, ConfirmTimeout)
    assert items[2].status is Status.PENDING
    tracker.ack(4, multiple=True)  # late confirms of expired tags change nothing
    assert items[0].status is Status.FAILED and items[3].ok


def test_take_unsettled_returns_pending_in_order_and_restarts_tags() -> None:
    tracker, items = tracked(5)
    tracker.ack(2, multiple=True)
    pending = tracker.take_unsettled()
    assert pending == items[2:]
    assert tracker.unsettled == 0 and tracker.republished == 3
    for d in pending:
        tracker.add(d)
    assert [d.tag for d in pending] == [1, 2, 3]
    assert all(d.republished == 1 for d in pending)
    tracker.ack(3, multiple=True)
    assert all(d.ok for d in items)


def test_settle_hook_runs_once_per_delivery() -> None:
    seen: list[str] = []
    tracker = ConfirmTracker(on_settle=lambda d: seen.append(d.message_id))
    for i in range(4):
        tracker.add(delivery(i))
    tracker.ack(2, multiple=True)
    tracker.ack(2, multiple=True)
    tracker.nack(4, multiple=True)
    assert seen == ["m0", "m1", "m2", "m3"]


def test_long_streams_compact_the_settled_front() -> None:
    tracker = ConfirmTracker()
    for i in range(10_000):
        tracker.add(delivery(i))
        if i % 100 == 99:
            tracker.ack(i + 1, multiple=True)
    assert tracker.unsettled == 0
    assert len(tracker._items) < 2100


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(1, 60)), max_size=40))
def test_any_confirm_sequence_settles_each_message_at_most_once(
    events: list[tuple[bool, bool, int]],
) -> None:
    tracker, items = tracked(60)
    expected: dict[int, Status] = {}
    for is_ack, multiple, tag in events:
        (tracker.ack if is_ack else tracker.nack)(tag, multiple)
        tags = range(1, tag + 1) if multiple else [tag]
        for t in tags:
            expected.setdefault(t, Status.CONFIRMED if is_ack else Status.NACKED)
    for d in items:
        assert d.status is expected.get(d.tag, Status.PENDING)
    assert tracker.unsettled == sum(d.status is Status.PENDING for d in items)
