"""The rule that pairs a stream port with the AMQP URL's broker, and the handshake that
gives the stream side's cluster name."""

from __future__ import annotations

import struct

from rabbitry.stream import frames
from rabbitry.stream.frames import RESPONSE, Key, ResponseCode
from rabbitry.stream.pairing import other_broker
from rabbitry.stream.session import Session


def test_two_cluster_names_are_two_brokers_and_the_error_names_both() -> None:
    found = other_broker("rabbit@test", "rabbit@dev", "127.0.0.1:5552")
    assert found is not None
    assert (found.amqp_cluster, found.stream_cluster) == ("rabbit@test", "rabbit@dev")
    assert str(found) == (
        "the stream port at 127.0.0.1:5552 answers for cluster 'rabbit@dev', not for"
        " 'rabbit@test' that the AMQP URL reaches: it is another broker's"
    )


def test_the_same_name_or_a_side_that_gives_none_is_not_called_another_broker() -> None:
    assert other_broker("rabbit@a", "rabbit@a", "h:5552") is None
    assert other_broker(None, "rabbit@a", "h:5552") is None
    assert other_broker("rabbit@a", None, "h:5552") is None
    assert other_broker("rabbit@a", "", "h:5552") is None


def test_the_session_keeps_what_the_broker_says_of_itself_in_the_handshake() -> None:
    session = Session(username="u", password="p")
    session.start()
    props = {"cluster_name": "rabbit@dev", "version": "4.0.5"}
    answer = struct.pack(">IH", 1, ResponseCode.OK) + frames.string_map(props)
    session.receive(frames.frame(Key.PEER_PROPERTIES | RESPONSE, answer))
    assert session.peer_properties == props
