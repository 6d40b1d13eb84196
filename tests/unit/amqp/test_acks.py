"""Ack batching: multiple acks over finished runs, out-of-order completions, nacks."""

from __future__ import annotations

import struct

from rabbitry.amqp.acks import AckTracker, ack_frame, nack_frame, reject_frame

_ACK = struct.Struct(">BHIHHQBB")


def frames(data: bytes) -> list[tuple[str, int, int]]:
    out = []
    for offset in range(0, len(data), 21):
        _, _, _, _, method, tag, bits, end = _ACK.unpack_from(data, offset)
        assert end == 0xCE
        out.append(({80: "ack", 90: "reject"}.get(method, "nack"), tag, bits))
    return out


def test_frames_match_pamqp() -> None:
    from pamqp import commands, frame

    assert ack_frame(1, 7, True) == frame.marshal(commands.Basic.Ack(7, True), 1)
    assert nack_frame(1, 9, True) == frame.marshal(
        commands.Basic.Nack(9, multiple=False, requeue=True), 1
    )
    for multiple in (False, True):  # the tools' channel gives back a run of deliveries
        for requeue in (False, True):
            assert nack_frame(2, 2**40, requeue, multiple) == frame.marshal(
                commands.Basic.Nack(2**40, multiple=multiple, requeue=requeue), 2
            )


def test_a_failed_return_is_a_basic_reject_which_quorum_queues_count() -> None:
    from pamqp import commands, frame

    assert reject_frame(1, 5, True) == frame.marshal(commands.Basic.Reject(5, requeue=True), 1)
    tracker = AckTracker()
    for tag in (1, 2, 3):
        tracker.received(tag)
    tracker.done(1)
    tracker.fail(2, requeue=True)
    tracker.done(3)
    assert frames(tracker.take_frames()) == [("reject", 2, 1), ("ack", 1, 0), ("ack", 3, 0)]
    assert tracker.outstanding == 0


def test_in_order_completions_become_one_multiple_ack() -> None:
    acks = AckTracker()
    for tag in range(1, 151):
        acks.received(tag)
        acks.done(tag)
    assert frames(acks.take_frames()) == [("ack", 150, 1)]
    assert acks.outstanding == 0 and acks.acked == 150 and acks.frames == 1


def test_a_slow_message_holds_the_run_until_flushed() -> None:
    acks = AckTracker()
    for tag in (1, 2, 3, 4):
        acks.received(tag)
    for tag in (1, 3, 4):
        acks.done(tag)
    assert frames(acks.take_frames()) == [("ack", 1, 0)]
    assert acks.outstanding == 3
    assert frames(acks.take_frames(flush=True)) == [("ack", 3, 0), ("ack", 4, 0)]
    assert acks.outstanding == 1
    acks.done(2)
    assert frames(acks.take_frames()) == [("ack", 2, 0)]
    assert acks.outstanding == 0


def test_a_nack_splits_the_multiple_acks() -> None:
    acks = AckTracker()
    for tag in range(1, 6):
        acks.received(tag)
    for tag in (1, 2, 4, 5):
        acks.done(tag)
    acks.reject(3, requeue=False)
    assert frames(acks.take_frames()) == [("nack", 3, 0), ("ack", 2, 1), ("ack", 5, 1)]
    assert acks.outstanding == 0 and acks.nacked == 1


def test_batch_threshold_and_forgetting_a_channel() -> None:
    acks = AckTracker(batch=3)
    for tag in (1, 2, 3):
        acks.received(tag)
    acks.done(1)
    acks.done(2)
    assert not acks.should_send()
    acks.done(3)
    assert acks.should_send()
    acks.received(4)
    assert acks.forget() == [4]
    assert acks.outstanding == 0 and acks.take_frames() == b""
