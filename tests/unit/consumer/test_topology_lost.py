"""The worker core when a retry tier or parking lot goes away under it: the copy of a failed
message comes back unroutable, the message goes back to its queue once (nack with requeue),
and the core holds the ``TopologyLost`` its shell stops with. A nack is not that: the retry is
parked instead, as before."""

from __future__ import annotations

from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.consumer.preflight import TopologyLost
from rabbitry.policies.retry import NonRetryable
from tests.unit.consumer.test_engine import client_acks, concluded


def returned(message_id: str, routing_key: str, confirm_tag: int, exchange: str = "") -> bytes:
    """The broker's basic.return of a mandatory publish, and its ack."""
    props = commands.Basic.Properties(message_id=message_id)
    return (
        pamqp_frame.marshal(commands.Basic.Return(312, "NO_ROUTE", exchange, routing_key), 1)
        + pamqp_frame.marshal(header.ContentHeader(0, 1, props), 1)
        + pamqp_frame.marshal(pamqp_body.ContentBody(b"x"), 1)
        + pamqp_frame.marshal(commands.Basic.Ack(confirm_tag, False), 1)
    )


def test_a_parked_copy_returned_unroutable_requeues_the_message_and_stops_the_worker() -> None:
    core, session, _ = concluded(NonRetryable("never"))
    assert b"work.parking" in core.take_output()
    session.receive(returned("m-1", "work.parking", 1))
    assert client_acks(core.take_output(flush=True)) == [(120, 1, False)]  # nack, requeue
    assert core.tracker.pending() == [], "not published again"
    lost = core.lost
    assert isinstance(lost, TopologyLost) and lost.queue == "work"
    assert [(n.kind, n.name, n.why) for n in lost.missing] == [
        ("queue", "work.parking", "parking lot of 'work'")
    ]
    assert "run `rabbitry apply SPEC` to make it" in str(lost)
    assert core.metrics["work"].parked == 0 and core.metrics["work"].requeued == 1
    assert core.take_lost() is lost and core.lost is None
    assert not core.start_check.passed, "a run after the stop checks the broker again"


def test_a_retry_copy_returned_unroutable_is_not_parked_in_its_place() -> None:
    core, session, _ = concluded(RuntimeError("boom"))
    core.take_output()
    session.receive(returned("m-1", "work.retry.1s", 1))
    out = core.take_output(flush=True)
    assert b"work.parking" not in out and client_acks(out) == [(120, 1, False)]
    assert core.lost is not None and core.lost.missing[0].name == "work.retry.1s"
    assert "retry tier of 'work', 1000 ms" in str(core.lost)
