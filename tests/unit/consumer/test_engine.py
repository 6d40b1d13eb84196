"""The worker core without a broker: a retry is acked only after its publish is confirmed."""

from __future__ import annotations

import logging
import struct
from typing import Any

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.app import App
from rabbitry.consumer.engine import WorkerCore, WorkerOptions
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.session import ConsumerSession
from rabbitry.policies.retry import Backoff, RetryPolicy
from rabbitry.topology.patterns.retries import QueueRetry
from tests.unit.consumer.test_session_and_app import delivery

RETRY = QueueRetry(
    queue="work",
    policy=RetryPolicy(attempts=2, backoff=Backoff(tiers_ms=(1000,))),
    parking_queue="work.parking",
    tier_queues={1000: "work.retry.1s"},
)


def client_acks(data: bytes) -> list[tuple[int, int, bool]]:
    """(method, tag, multiple) of the basic.ack/nack frames the client wrote."""
    out = []
    offset = 0
    while offset < len(data):
        kind, _, size = struct.unpack_from(">BHI", data, offset)
        if kind == 1:
            cls, method = struct.unpack_from(">HH", data, offset + 7)
            if cls == 60 and method in (80, 120):
                tag, bits = struct.unpack_from(">QB", data, offset + 11)
                out.append((method, tag, bool(bits & 1)))
        offset += 8 + size
    return out


def core_with(handler_queue: str = "work") -> WorkerCore:
    app = App()
    app.add(handler_queue, lambda m: None, retry=RETRY)
    core = WorkerCore(app, ConnectionSettings(), WorkerOptions(prefetch=10))
    ready(core)
    return core


def ready(core: WorkerCore) -> None:
    """Connect ``core`` to no broker: its session as after the start-up check and the
    channel's confirm.select-ok."""
    core.start_check.passed = True  # as after the start-up check (test_preflight)
    session = core.new_session()
    session.state = State.OPENING_CHANNEL
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    core.sync_generation()
    session.take_output()


def concluded(
    error: BaseException | None, *, frames: bytes | None = None, tag: int = 1, result: Any = None
) -> tuple[WorkerCore, ConsumerSession, IncomingMessage]:
    """A core whose one delivery (``frames``, else a plain one tagged ``tag``) was admitted
    and concluded with ``error`` (None: its handler returned ``result``)."""
    core = core_with()
    session = core.session
    assert session is not None
    session.receive(frames or delivery(tag, b"payload", consumer="rabbitry.0"))
    (message,) = session.inbox
    core.admit(message)
    core.conclude(message, error, 0.001, result=result)
    return core, session, message


def test_success_is_acked_in_one_multiple_frame() -> None:
    core = core_with()
    session = core.session
    assert session is not None
    session.receive(b"".join(delivery(tag, b"x", consumer="rabbitry.0") for tag in (1, 2, 3)))
    for message in session.inbox:
        assert core.admit(message)
        core.conclude(message, None, 0.001)
    assert client_acks(core.take_output()) == [(80, 3, True)]
    assert core.metrics["work"].acked == 3


def test_a_failure_publishes_the_retry_and_acks_only_after_the_confirm() -> None:
    core, session, _ = concluded(RuntimeError("boom"), tag=7)
    out = core.take_output()
    assert b"work.retry.1s" in out and b"x-rabbitry-attempt" in out
    assert client_acks(out) == [], "no ack before the confirm"
    session.receive(pamqp_frame.marshal(commands.Basic.Ack(1, False), 1))
    assert client_acks(core.take_output()) == [(80, 7, False)]
    assert core.metrics["work"].retried == {"1s": 1}


def test_a_nacked_retry_is_parked_instead() -> None:
    core, session, _ = concluded(RuntimeError("boom"))
    core.take_output()
    session.receive(pamqp_frame.marshal(commands.Basic.Nack(1, False), 1))
    out = core.take_output()
    assert b"work.parking" in out and client_acks(out) == []
    session.receive(pamqp_frame.marshal(commands.Basic.Ack(2, False), 1))
    assert client_acks(core.take_output()) == [(80, 1, False)]
    assert core.metrics["work"].parked == 1


def test_a_retry_or_parking_is_logged_once_stored_and_a_refused_one_says_what_happened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The line never claims an outcome the broker did not confirm: a retry copy the broker
    refused is no 'retry in', a parking only counts once its copy is stored."""
    caplog.set_level(logging.INFO, "rabbitry.worker")
    _, session, _ = concluded(RuntimeError("boom"))
    assert caplog.records == [], "nothing is stored yet"
    session.receive(pamqp_frame.marshal(commands.Basic.Nack(1, False), 1))
    (refused,) = [r.getMessage() for r in caplog.records]
    assert "RuntimeError: boom; could not store its retry copy" in refused
    assert refused.endswith(": parking it instead") and "retry in" not in refused
    session.receive(pamqp_frame.marshal(commands.Basic.Ack(2, False), 1))
    parked = caplog.records[-1].getMessage()
    assert "RuntimeError: boom; parked (the retry could not be published" in parked


def test_tags_of_a_lost_channel_are_never_acked() -> None:
    core = core_with()
    session = core.session
    assert session is not None
    session.receive(delivery(1, b"x", consumer="rabbitry.0"))
    (message,) = session.inbox
    core.admit(message)
    session.receive(
        pamqp_frame.marshal(commands.Channel.Close(406, "PRECONDITION_FAILED", 60, 80), 1)
    )
    session.receive(pamqp_frame.marshal(commands.Channel.OpenOk(), 1))
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    core.sync_generation()
    core.conclude(message, None, 0.001)
    assert client_acks(core.take_output(flush=True)) == []
