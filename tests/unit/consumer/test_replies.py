"""A handler's return value as the reply: built from the delivery, sent before the ack."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.amqp.codecs import JSON
from rabbitry.consumer.app import App
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.replies import InvalidReply, reply_body
from rabbitry.testing.handlers import HandlerHarness
from tests.unit.consumer.test_engine import client_acks, concluded

REPLY_TO = "amq.rabbitmq.reply-to.g1h2AA5yZXBseUA0MjA4NjEzOQAAIlwAAAAAZWJp.x8o9"


def request(tag: int, body: bytes, correlation_id: str = "c-1") -> bytes:
    out = pamqp_frame.marshal(commands.Basic.Deliver("rabbitry.0", tag, False, "", "work"), 1)
    props = commands.Basic.Properties(
        message_id=f"m-{tag}", correlation_id=correlation_id, reply_to=REPLY_TO
    )
    out += pamqp_frame.marshal(header.ContentHeader(0, len(body), props), 1)
    return out + pamqp_frame.marshal(pamqp_body.ContentBody(body), 1)


@dataclass
class Total:
    total: int


def test_the_reply_body_follows_the_publishers_rules_and_none_is_an_empty_reply() -> None:
    assert reply_body(None, JSON) == (b"", None)
    assert reply_body(b"raw", JSON) == (b"raw", None)
    assert reply_body({"a": 1}, JSON) == (b'{"a":1}', "application/json")
    assert reply_body(Total(3), JSON) == (b'{"total":3}', "application/json")
    assert reply_body(42, JSON) == (b"42", "application/json")


def test_a_value_the_codec_cannot_encode_is_a_non_retryable_error() -> None:
    with pytest.raises(InvalidReply, match="returned object, which cannot be sent as its reply"):
        reply_body(object(), JSON)


def test_the_reply_goes_out_first_and_the_request_is_acked_only_once_it_is_confirmed() -> None:
    core, session, message = concluded(None, frames=request(7, b"2"), result={"double": 4})
    assert message.reply_to == REPLY_TO
    out = core.take_output(flush=True)
    assert REPLY_TO.encode() in out and b'{"double":4}' in out and b"c-1" in out
    assert client_acks(out) == [], "no ack before the reply is confirmed"
    session.receive(pamqp_frame.marshal(commands.Basic.Ack(1, False), 1))
    assert client_acks(core.take_output(flush=True)) == [(80, 7, False)]
    assert core.publishing == 0


def test_a_message_without_reply_to_sends_nothing_whatever_the_handler_returns() -> None:
    core, _, _ = concluded(None, tag=3, result={"ignored": True})
    out = core.take_output(flush=True)
    assert b"ignored" not in out and client_acks(out) == [(80, 3, False)]


def test_a_failed_handler_sends_no_reply() -> None:
    core, _, _ = concluded(RuntimeError("boom"), frames=request(5, b"2"))
    (retry,) = core.tracker.pending()  # the retry copy (it keeps reply_to for the next attempt)
    assert retry.routing_key == "work.retry.1s"


def harness_app() -> App:
    app = App()

    @app.handler("double")
    def double(message: IncomingMessage) -> dict[str, int]:
        return {"double": 2 * int(message.json()["n"])}

    @app.handler("typed")
    async def typed(total: Total) -> Total:
        await asyncio.sleep(0)
        return Total(total.total + 1)

    @app.handler("at-once")
    async def at_once(message: IncomingMessage) -> str:
        return "no wait"

    @app.handler("bad")
    def bad(message: IncomingMessage) -> object:
        return object()

    return app


def test_the_harness_gives_the_reply_a_requester_would_get() -> None:
    with HandlerHarness(harness_app()) as harness:
        outcome = harness.deliver(
            "double", {"n": 21}, reply_to="amq.rabbitmq.reply-to.x", correlation_id="c-9"
        )
        assert outcome.acked
        assert outcome.reply is not None
        assert outcome.reply.json() == {"double": 42}
        assert outcome.reply.correlation_id == "c-9"
        assert harness.deliver("double", {"n": 1}).reply is None  # no reply_to: no reply
        typed = harness.deliver("typed", {"total": 1}, reply_to="amq.rabbitmq.reply-to.x")
        assert typed.reply is not None and typed.reply.json() == {"total": 2}


def test_the_harness_replies_from_the_async_dispatch_too() -> None:
    harness = HandlerHarness(harness_app())
    outcome = asyncio.run(
        harness.deliver_async("typed", {"total": 4}, reply_to="amq.rabbitmq.reply-to.x")
    )
    assert outcome.reply is not None and outcome.reply.json() == {"total": 5}


def test_a_reply_that_cannot_be_encoded_parks_the_request_without_a_reply() -> None:
    with HandlerHarness(harness_app()) as harness:
        outcome = harness.deliver("bad", b"", reply_to="amq.rabbitmq.reply-to.x")
        assert outcome.reply is None
        assert isinstance(outcome.error, InvalidReply)
        assert not outcome.acked


def test_every_path_of_the_async_dispatch_sends_the_return_value() -> None:
    """A plain handler, a coroutine that never waits (finished inline) and one that waits (in
    a task): three ways AsyncWorker runs a handler, one reply each."""
    harness = HandlerHarness(harness_app())

    async def main() -> list[bytes]:
        replies = []
        for queue, body in (("double", {"n": 3}), ("at-once", b""), ("typed", {"total": 1})):
            outcome = await harness.deliver_async(queue, body, reply_to="amq.rabbitmq.reply-to.x")
            assert outcome.reply is not None
            replies.append(outcome.reply.body)
        return replies

    assert asyncio.run(main()) == [b'{"double":6}', b"no wait", b'{"total":2}']
