"""``ParkingLot`` (the ``rabbitry dlq`` tools) over a scripted broker whose returned messages
land late, as a quorum queue's do: a show, a replay or a purge returns only once what it read
and kept is back, so that a count or a second show at once finds every parked message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rabbitry.consumer.dlq import ParkingLot, Selection
from rabbitry.testing import ScriptedBroker


@pytest.fixture
def lot_broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as broker:
        broker.declare_queue("work.parking")
        for i in range(10):
            broker.put("work.parking", f"body-{i}".encode(), message_id=f"m-{i}")
        broker.lag_returns(2)
        yield broker


def depth_at_once(broker: ScriptedBroker) -> int:
    with ParkingLot(broker.url, "work.parking") as lot:
        return lot.depth


def test_a_show_returns_once_the_messages_it_read_are_back(lot_broker: ScriptedBroker) -> None:
    with ParkingLot(lot_broker.url, "work.parking") as lot:
        shown = lot.peek(limit=3)
    assert [p.message_id for p in shown] == ["m-0", "m-1", "m-2"]
    assert depth_at_once(lot_broker) == 10
    with ParkingLot(lot_broker.url, "work.parking") as lot:
        assert [p.message_id for p in lot.peek()] == [f"m-{i}" for i in range(10)]


def test_a_purge_of_some_returns_once_the_rest_is_back(lot_broker: ScriptedBroker) -> None:
    with ParkingLot(lot_broker.url, "work.parking", any_queue=True) as lot:
        removed = lot.purge(Selection(ids=frozenset({"m-3", "m-4"})))
    assert removed == 2
    assert depth_at_once(lot_broker) == 8


def test_a_lot_read_by_someone_else_too_is_waited_for_a_bounded_time(
    lot_broker: ScriptedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # returns that never land (another consumer keeps them): peek still returns
    monkeypatch.setattr("rabbitry.consumer.dlq._RETURN_WAIT", 0.2)
    lot_broker.lag_returns(10_000)
    with ParkingLot(lot_broker.url, "work.parking") as lot:
        assert len(lot.peek(limit=3)) == 3
