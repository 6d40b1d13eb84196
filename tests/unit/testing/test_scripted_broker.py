"""The scripted broker's own rules: its routing model, its faults, and what it refuses to
pretend (methods and exchange types it does not model)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp import frames
from rabbitry.amqp.errors import ChannelClosed
from rabbitry.publisher import Publisher
from rabbitry.testing import ScriptedBroker


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as scripted:
        for queue in ("eu", "us", "audit"):
            scripted.declare_queue(queue)
        scripted.declare_exchange("orders", "topic")
        scripted.bind("eu", "orders", "order.*.eu")
        scripted.bind("us", "orders", "order.*.us")
        scripted.bind("audit", "orders", "#")
        scripted.declare_exchange("all", "fanout")
        scripted.bind("eu", "all")
        scripted.bind("us", "all")
        yield scripted


def depths(broker: ScriptedBroker) -> dict[str, int]:
    return {name: len(broker.queue(name).messages) for name in ("eu", "us", "audit")}


def test_publishes_are_routed_by_the_exchange_type(broker: ScriptedBroker) -> None:
    with Publisher(broker.url) as publisher:
        publisher.publish(b"1", exchange="orders", routing_key="order.new.eu")
        publisher.publish(b"2", exchange="all", routing_key="ignored")
    assert depths(broker) == {"eu": 2, "us": 1, "audit": 1}


def test_a_scripted_channel_close_fails_the_message_with_the_code(broker: ScriptedBroker) -> None:
    broker.close_channel_on("basic.publish", 406, "PRECONDITION_FAILED - scripted")
    with Publisher(broker.url) as publisher:
        with pytest.raises(ChannelClosed) as failed:
            publisher.publish(b"x", routing_key="eu")
        assert failed.value.reply_code == 406
        assert publisher.publish(b"y", routing_key="eu").ok, "the channel reopened"
    assert [m.body for m in broker.queue("eu").messages] == [b"y"]


def test_a_connection_dropped_after_n_frames_is_reopened_by_the_publisher(
    broker: ScriptedBroker,
) -> None:
    with Publisher(broker.url) as publisher:
        broker.drop_after(1)  # the next publish's method frame
        assert publisher.publish(b"x", routing_key="eu").ok
        assert publisher.stats.reconnects == 1
    assert [m.body for m in broker.queue("eu").messages] == [b"x"]


def test_a_method_it_does_not_model_closes_the_connection_with_540_and_says_so() -> None:
    answers: list[bytes] = []
    lost: list[bool] = []
    with ScriptedBroker() as broker:
        link = broker.open(answers.append, lambda: lost.append(True))
        link.write(frames.PROTOCOL_HEADER)
        link.write(frames.method_frame(1, commands.Basic.Get(queue="eu")))
    data = b"".join(answers)
    _, _, start = pamqp_frame.unmarshal(data)  # connection.start first
    assert isinstance(start, commands.Connection.Start)
    assert b"NOT_IMPLEMENTED - the scripted broker does not model basic.get" in data
    assert lost == [True]
    assert broker.not_modelled == [
        "the scripted broker does not model basic.get: test it on a real broker"
    ]


def test_the_pytest_fixture_gives_an_attached_broker_without_the_broker_marker(
    scripted_broker: ScriptedBroker, request: pytest.FixtureRequest
) -> None:
    scripted_broker.declare_queue("eu")
    with Publisher(scripted_broker.url) as publisher:
        assert publisher.publish(b"x", routing_key="eu").ok
    assert request.node.get_closest_marker("broker") is None
