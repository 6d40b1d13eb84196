"""Requests waiting for replies: matched by correlation id; a late reply is dropped."""

from __future__ import annotations

import pytest

from rabbitry.amqp.confirms import Delivery, Status
from rabbitry.errors import PublishError
from rabbitry.publisher.requests import PendingReplies, ReplyLost


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
