"""The kill switch on the worker's connection, without a broker: which frames pause and resume
a queue's consumer, that a reconnect keeps a paused queue paused, and that the deliveries held
while it was paused come back first, counted once."""

from __future__ import annotations

import logging

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp.session import State
from rabbitry.consumer import App, IncomingMessage, KillSwitch, SwitchState
from rabbitry.consumer.acks import nack_frame
from rabbitry.consumer.session import ConsumerSession
from rabbitry.consumer.switchboard import HOLD_LIMIT_S
from rabbitry.testing import HandlerHarness
from tests.unit.consumer.payments_down import with_payments_down

SWITCH = KillSwitch(min_messages=2, cool_down_s=30, probes=1)


def make_ready(session: ConsumerSession) -> ConsumerSession:
    session.state = State.OPENING_CHANNEL
    session.take_output()
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    assert session.ready
    return session


def tags_in(data: bytes, method: type[commands.Basic.Cancel | commands.Basic.Consume]) -> list[str]:
    tags, offset = [], 0
    while offset < len(data):
        size, _, frame = pamqp_frame.unmarshal(data[offset:])
        offset += size
        if isinstance(frame, method):
            tags.append(frame.consumer_tag)
    return tags


def harness_with_a_tripped_switch(
    switch: KillSwitch = SWITCH,
) -> tuple[HandlerHarness, list[IncomingMessage]]:
    harness = HandlerHarness(with_payments_down(App(), switch))
    harness.core.start_check.passed = True  # no broker to ask
    harness.core.session = make_ready(harness.core.new_session())
    harness.core.take_output()
    held = [harness.deliver("payments").message for _ in range(3)][2:]
    return harness, held


def test_a_trip_cancels_the_queues_consumer_and_only_it() -> None:
    harness, _ = harness_with_a_tripped_switch()
    out = harness.core.take_output()
    assert tags_in(out, commands.Basic.Cancel) == ["rabbitry.0"]
    assert harness.core.session is not None and harness.core.session.paused == {0}


def test_a_reconnect_while_open_consumes_the_other_queues_only() -> None:
    harness, _ = harness_with_a_tripped_switch()
    core = harness.core
    core.connection_lost()
    session = make_ready(core.new_session())
    core.session = session
    assert tags_in(session.take_output(), commands.Basic.Consume) == ["rabbitry.1"]
    assert core.switchboard.held == {}, "the broker took the held deliveries back with the channel"


def test_after_the_cool_down_it_consumes_again_and_the_held_delivery_comes_first_once() -> None:
    harness, held = harness_with_a_tripped_switch()
    core = harness.core
    session = core.session
    assert session is not None
    core.take_output()
    assert core.take_output() == b"", "nothing before the cool-down"
    harness._offset += SWITCH.cool_down_s  # the clock only: the worker's take_output resumes
    out = core.take_output()
    assert tags_in(out, commands.Basic.Consume) == ["rabbitry.0"]
    assert harness.kill_switch("payments") is SwitchState.HALF_OPEN
    assert session.inbox == held and session.paused == set()
    received = core.metrics["payments"].received
    outstanding = core.acks.outstanding
    assert core.admit(held[0]), "admitted again without its checks"
    assert core.metrics["payments"].received == received and core.acks.outstanding == outstanding


def test_a_delivery_held_for_the_hold_limit_goes_back_to_its_queue_before_the_consumer_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness, held = harness_with_a_tripped_switch(KillSwitch(min_messages=2, cool_down_s=3600))
    core = harness.core
    core.take_output()
    harness._offset += HOLD_LIMIT_S - 1
    assert core.take_output() == b"" and core.switchboard.held["payments"] == held
    harness._offset += 2
    with caplog.at_level(logging.WARNING, logger="rabbitry.worker"):
        out = core.take_output()
    assert out == nack_frame(1, held[0].tag, requeue=True)
    assert core.switchboard.held == {"payments": []}
    assert core.metrics["payments"].requeued == 1
    assert "1 deliveries held for 600 s go back to the queue" in caplog.text
    assert harness.kill_switch("payments") is SwitchState.OPEN
