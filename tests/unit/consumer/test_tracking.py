"""When a stream consumer's position is recorded, and what a record holds (pure)."""

from __future__ import annotations

from typing import Any

import pytest

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


def stream_delivery(tag: int, offset: int) -> bytes:
    from pamqp import commands, header
    from pamqp import frame as pamqp_frame

    out = pamqp_frame.marshal(commands.Basic.Deliver("rabbitry.0", tag, False, "", "events"), 1)
    props = commands.Basic.Properties(headers={"x-stream-offset": offset})
    out += pamqp_frame.marshal(header.ContentHeader(0, 0, props), 1)
    return out


def test_a_tracked_stream_starts_at_its_stored_position_and_records_what_it_handled(
    monkeypatch: Any,
) -> None:
    from pamqp import commands
    from pamqp import frame as pamqp_frame

    from rabbitry.amqp.session import State
    from rabbitry.amqp.settings import ConnectionSettings
    from rabbitry.consumer import tracking
    from rabbitry.consumer.app import App
    from rabbitry.consumer.engine import WorkerCore, WorkerOptions
    from rabbitry.consumer.streams import StreamUnreachable

    app = App()
    app.add("events", lambda m: None, offset="next", track="billing")
    core = WorkerCore(app, ConnectionSettings(), WorkerOptions(prefetch=10))

    def unreachable(settings: object, streams: object) -> dict[int, int | None]:
        raise StreamUnreachable("cannot reach the broker")

    monkeypatch.setattr(tracking, "stored_positions", unreachable)
    with pytest.raises(ConnectionError):
        core.new_session()  # the shells try again, as for any connection that fails
    asked: list[object] = []

    def stored(settings: object, streams: dict[int, str]) -> dict[int, int | None]:
        asked.append(streams)
        return {0: 40}

    monkeypatch.setattr(tracking, "stored_positions", stored)
    core.start_check.passed = True  # the broker holds the stream (test_preflight: the check)
    session = core.new_session()
    assert asked == [{0: "rabbitry.position.billing.events"}]
    assert core.subscriptions[0].arguments["x-stream-offset"] == 40, "not offset='next'"
    session.state = State.OPENING_CHANNEL
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    core.sync_generation()
    session.take_output()
    assert record_body(40) not in core.take_output(flush=True), "what was read is not written"

    session.receive(b"".join(stream_delivery(tag, 38 + tag) for tag in range(1, 6)))
    messages = list(session.inbox)
    session.inbox.clear()
    assert not core.admit(messages[0]), "offset 39 is below the stored position: a chunk copy"
    for message in messages[1:]:
        assert core.admit(message)
    for message in messages[1:3]:
        core.conclude(message, None, 0.001)
    assert record_body(42) in core.take_output(flush=True), "40 and 41 handled: resume at 42"
    assert core.publishing == 1, "the record is confirmed like a retry"
