"""Methods that carry names are encoded by rabbitry: byte for byte pamqp's frames for ASCII
names, and UTF-8 names (which pamqp refuses, RabbitMQ takes) read back whole."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp import frames

ASCII_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789-_.:", max_size=40)
ARGUMENTS = st.dictionaries(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12),
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.text(max_size=20), st.booleans()),
    max_size=3,
)


@given(ASCII_NAME, ARGUMENTS, st.booleans(), st.booleans(), st.integers(1, 65535))
def test_ascii_names_give_pamqps_bytes(
    name: str, arguments: dict[str, object], passive: bool, durable: bool, channel: int
) -> None:
    assert frames.queue_declare_frame(
        channel, name, passive=passive, durable=durable, arguments=arguments
    ) == pamqp_frame.marshal(
        commands.Queue.Declare(queue=name, passive=passive, durable=durable, arguments=arguments),
        channel,
    )
    assert frames.exchange_declare_frame(
        channel, name, "topic", passive=passive, durable=durable
    ) == pamqp_frame.marshal(
        commands.Exchange.Declare(
            exchange=name, exchange_type="topic", passive=passive, durable=durable
        ),
        channel,
    )
    assert frames.consume_frame(channel, name, "tag-1", arguments=arguments) == pamqp_frame.marshal(
        commands.Basic.Consume(queue=name, consumer_tag="tag-1", arguments=arguments), channel
    )
    assert frames.cancel_frame(channel, name) == pamqp_frame.marshal(
        commands.Basic.Cancel(consumer_tag=name), channel
    )


@pytest.mark.parametrize("name", ["café", "commandes-été", "注文", "emoji-📦"])
def test_utf8_names_pamqp_refuses_are_encoded_and_read_back(name: str) -> None:
    with pytest.raises(ValueError):
        commands.Basic.Consume(queue=name)
    _, channel, consume = pamqp_frame.unmarshal(frames.consume_frame(7, name, "t"))
    assert (channel, consume.queue, consume.consumer_tag) == (7, name, "t")
    _, _, declare = pamqp_frame.unmarshal(frames.queue_declare_frame(1, name, passive=True))
    assert declare.queue == name and declare.passive


def test_a_name_over_255_bytes_is_refused_as_it_is_encoded() -> None:
    with pytest.raises(ValueError, match="256 bytes long; AMQP allows at most 255"):
        frames.queue_declare_frame(1, "é" * 128)
