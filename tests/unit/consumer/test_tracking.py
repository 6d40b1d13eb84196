"""When a stream consumer's position is recorded, and what a record holds (pure)."""

from __future__ import annotations

from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.positions import StreamPosition
from rabbitry.consumer.tracking import RecordSchedule, record_body, record_offset, tracking_stream


def message(body: bytes) -> IncomingMessage:
    return IncomingMessage(1, 0, False, "", "", 0, b"", body, "q")


def test_a_record_holds_the_offset_and_anything_else_is_no_record() -> None:
    assert record_offset(message(record_body(42))) == 42
    assert record_offset(message(b"")) is None
    assert record_offset(message(b'{"offset": -1}')) is None
    assert record_offset(message(b'{"offset": true}')) is None
    assert tracking_stream("events", "billing") == "rabbitry.position.billing.events"


def test_the_committed_position_is_the_lowest_unhandled_offset() -> None:
    position = StreamPosition("next")
    assert position.committed() is None, "nothing delivered: nothing to record"
    for offset in (10, 11, 12):
        position.take(offset)
    position.handled(10)
    position.handled(12)
    assert position.committed() == 11, "11 is not handled: a restart must read it again"
    position.handled(11)
    assert position.committed() == 13


def test_a_record_is_due_each_batch_or_second_and_on_a_forced_flush() -> None:
    schedule = RecordSchedule(batch=10, every_s=1.0)
    assert schedule.due(0, 5, 0.0, force=False), "the first position is written at once"
    assert not schedule.due(0, 5, 5.0, force=True), "an unchanged position is not written"
    assert not schedule.due(0, 9, 0.5, force=False)
    assert schedule.due(0, 15, 0.6, force=False), "moved by a batch"
    assert schedule.due(0, 16, 1.7, force=False), "moved, and a second passed"
    assert schedule.due(0, 17, 1.8, force=True), "idle or stopping: any move"


def test_a_position_read_at_start_is_not_written_again_and_a_failed_record_waits() -> None:
    schedule = RecordSchedule(batch=10, every_s=1.0)
    schedule.known(0, 100)
    assert not schedule.due(0, 100, 0.0, force=True)
    assert schedule.due(0, 101, 0.0, force=True)
    schedule.failed(0, now=0.0)
    assert not schedule.due(0, 101, 0.5, force=True), "retried after every_s, not in a loop"
    assert schedule.due(0, 101, 1.0, force=True)
