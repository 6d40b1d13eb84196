"""Requests waiting for replies: matched by correlation id; a late reply is dropped."""

from __future__ import annotations

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.amqp.confirms import ConfirmTracker, Delivery, Status
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.session import Session, State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import PublishError
from rabbitry.publisher.requests import REPLY_TO, PendingReplies, ReplyLost


def test_a_reply_goes_to_the_request_with_its_correlation_id() -> None:
    replies = PendingReplies()
    first, second = replies.expect("a"), replies.expect("b")
    assert replies.deliver({"correlation_id": "b", "content_type": "text/plain"}, b"to b")
    assert second.reply is not None and second.reply.text == "to b"
    assert second.reply.content_type == "text/plain"
    assert first.reply is None and len(replies) == 1


def test_a_reply_nobody_waits_for_is_dropped_not_given_to_a_later_request() -> None:
    replies = PendingReplies()
    replies.expect("old")
    replies.forget("old")  # timed out
    later = replies.expect("new")
    assert not replies.deliver({"correlation_id": "old"}, b"late")
    assert later.reply is None and replies.late == 1
    assert not replies.deliver({}, b"no id at all")
    assert replies.late == 2


def test_two_waiting_requests_cannot_share_a_correlation_id() -> None:
    replies = PendingReplies()
    replies.expect("same")
    with pytest.raises(PublishError, match="already waiting"):
        replies.expect("same")


def test_a_lost_channel_fails_the_confirmed_requests_and_keeps_the_ones_sent_again() -> None:
    replies = PendingReplies()
    confirmed, unconfirmed = replies.expect("c"), replies.expect("u")
    confirmed.delivery = Delivery(b"", "m1", "", "rpc", True, status=Status.CONFIRMED)
    unconfirmed.delivery = Delivery(b"", "m2", "", "rpc", True)
    replies.channel_lost("the connection was lost")
    assert isinstance(confirmed.error, ReplyLost)
    assert unconfirmed.error is None and len(replies) == 1


def test_a_request_needs_confirms_and_a_positive_timeout_and_says_so_before_connecting() -> None:
    from rabbitry.publisher import Publisher

    unconfirmed = Publisher("amqp://nobody@127.0.0.1:1/", confirms=False)
    with pytest.raises(PublishError, match="needs publisher confirms"):
        unconfirmed.request(b"x", routing_key="rpc")
    with pytest.raises(ValueError, match="timeout must be positive"):
        Publisher("amqp://nobody@127.0.0.1:1/").request(b"x", routing_key="rpc", timeout=0)


def ready_session(on_reply: object = None) -> Session:
    session = Session(
        ConnectionSettings(),
        ConfirmTracker(),
        MessageBuilder(),
        on_reply=on_reply,  # type: ignore[arg-type]
    )
    session.state = State.OPENING_CHANNEL
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    session.take_output()
    return session


def request_frames(builder: MessageBuilder) -> Delivery:
    return builder.build(
        b"ask",
        exchange="",
        routing_key="rpc",
        mandatory=True,
        reply_to=REPLY_TO,
        correlation_id="c-1",
    )


def test_the_reply_consumer_is_written_ahead_of_the_request_and_again_on_a_new_channel() -> None:
    session = ready_session()
    got: list[tuple[object, bytes]] = []
    session.consume_replies(lambda props, body: got.append((props, body)))
    session.consume_replies(lambda props, body: None)  # once per channel
    request = request_frames(session.builder)
    session.publish(request)
    out = session.take_output()
    assert out.count(b"amq.rabbitmq.reply-to") == 2  # the consume, then the request's reply_to
    assert out.index(b"\x00\x3c\x00\x14") < out.index(b"\x00\x3c\x00\x28")  # consume < publish
    session.receive(
        pamqp_frame.marshal(
            commands.Channel.Close(404, "NOT_FOUND - no exchange 'other' in vhost '/'", 60, 40),
            1,
        )
    )  # another message's exchange: the request is republished on the reopened channel
    session.receive(pamqp_frame.marshal(commands.Channel.OpenOk(), 1))
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    again = session.take_output()
    assert again.index(b"\x00\x3c\x00\x14") < again.index(b"\x00\x3c\x00\x28")


def test_a_reply_delivery_reaches_the_hook_with_its_properties_and_body() -> None:
    got: list[tuple[dict[str, object], bytes]] = []
    session = ready_session(lambda props, body: got.append((dict(props), body)))
    props = commands.Basic.Properties(correlation_id="c-1", content_type="application/json")
    data = pamqp_frame.marshal(
        commands.Basic.Deliver("rabbitry-replies", 1, False, "", "amq.rabbitmq.reply-to.x"), 1
    )
    data += pamqp_frame.marshal(header.ContentHeader(0, 7, props), 1)
    data += pamqp_frame.marshal(pamqp_body.ContentBody(b'{"a":'), 1)
    data += pamqp_frame.marshal(pamqp_body.ContentBody(b"1}"), 1)
    session.receive(data)
    assert [(p["correlation_id"], p["content_type"], b) for p, b in got] == [
        ("c-1", "application/json", b'{"a":1}')
    ]
