"""The basic properties table: what the publisher's builder encodes, the one decoder reads back
exactly, and both agree with pamqp on where each property sits and how it is typed."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import frame

from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.properties import BASIC_PROPERTIES, PROPERTY_BITS, decode_properties
from rabbitry.consumer.message import decode_properties as decode_from_consumer

_TEXT = st.text(max_size=12)
_HEADERS = st.dictionaries(
    st.text(min_size=1, max_size=8), st.one_of(st.integers(-(2**31), 2**31 - 1), _TEXT), max_size=3
)
_PROPERTY_SETS = st.fixed_dictionaries(
    {},
    optional={
        "content_type": st.text(min_size=1, max_size=12),  # an empty one means none
        "content_encoding": _TEXT,
        "headers": _HEADERS,
        "persistent": st.booleans(),
        "priority": st.integers(0, 255),
        "correlation_id": _TEXT,
        "reply_to": _TEXT,
        "expiration": st.integers(0, 10**9).map(str),
        "message_id": _TEXT,
        "timestamp": st.integers(0, 2**32 - 1),  # pamqp reads larger ones as milliseconds
        "message_type": _TEXT,
        "user_id": _TEXT,
        "app_id": _TEXT,
    },
)


def _content_header(encoded: bytes) -> tuple[int, bytes, Any]:
    """The property flags and bytes of a publish's content header, and pamqp's reading of it."""
    used, _, _ = frame.unmarshal(encoded)  # the basic.publish method frame
    size = int.from_bytes(encoded[used + 3 : used + 7], "big")
    payload = encoded[used + 7 : used + 7 + size]
    _, _, head = frame.unmarshal(encoded[used:])
    return int.from_bytes(payload[12:14], "big"), payload[14:], head.properties


@settings(max_examples=300, deadline=None)
@given(_PROPERTY_SETS)
def test_what_the_builder_encodes_the_decoder_reads_back(given_props: dict[str, Any]) -> None:
    props = dict(given_props)
    app_id = props.pop("app_id", None)
    builder = MessageBuilder(app_id=app_id, timestamps=False)
    delivery = builder.build(b"body", exchange="ex", routing_key="key", **props)
    flags, raw, pamqp_props = _content_header(delivery.frames)

    decoded = decode_properties(flags, raw)

    expected: dict[str, Any] = {
        "delivery_mode": 2 if props.pop("persistent", True) else 1,
        "message_id": delivery.message_id,
    }
    if "message_type" in props:
        expected["type"] = props.pop("message_type")
    if app_id is not None:
        expected["app_id"] = app_id
    expected.update(props)
    assert decoded == expected
    # an independent reader of the wire agrees on every slot and type (absent: its default)
    for name, _, _ in BASIC_PROPERTIES:
        theirs = getattr(pamqp_props, "message_type" if name == "type" else name)
        if isinstance(theirs, dt.datetime):
            theirs = int(theirs.replace(tzinfo=dt.UTC).timestamp())
        assert decoded[name] == theirs if name in decoded else not theirs, name
    assert decode_from_consumer is decode_properties


def test_flag_bits_are_in_wire_order_from_the_highest() -> None:
    bits = [PROPERTY_BITS[name] for name, _, _ in BASIC_PROPERTIES]
    assert bits == [1 << (15 - slot) for slot in range(14)]
    assert len(BASIC_PROPERTIES) == 14
