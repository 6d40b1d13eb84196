"""Deliveries read off the wire by the consuming read loop: what pamqp writes for a broker,
read back by offset into one delivery, however the bytes arrive."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from rabbitry.amqp.confirms import ConfirmTracker
from rabbitry.amqp.consuming import ConsumingSession
from rabbitry.amqp.deliveries import DeliverFields
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.properties import PROPERTY_BITS, decode_properties
from rabbitry.amqp.settings import ConnectionSettings


class Collecting(ConsumingSession):
    def __init__(self) -> None:
        super().__init__(ConnectionSettings(), ConfirmTracker(), MessageBuilder())
        self.got: list[tuple[DeliverFields, int, bytes, bytes]] = []

    def _delivered(self, fields: DeliverFields, flags: int, properties: bytes, body: bytes) -> None:
        self.got.append((fields, flags, properties, body))


def delivery(body: bytes, pieces: int, *, redelivered: bool = False, **props: Any) -> bytes:
    deliver = commands.Basic.Deliver("rabbitry.3", 2**40 + 7, redelivered, "orders.eu", "eu.new")
    data = frame.marshal(deliver, 1)
    data += frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties(**props)), 1)
    step = max(1, -(-len(body) // pieces))
    for start in range(0, len(body), step):
        data += frame.marshal(pamqp_body.ContentBody(body[start : start + step]), 1)
    return data


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_a_delivery_of_several_body_frames_is_one_message_however_the_bytes_arrive(
    chunk: int,
) -> None:
    session = Collecting()
    data = delivery(b"0123456789" * 5, 3, redelivered=True, message_id="m-1", headers={"n": 1})
    data += delivery(b"", 1)  # an empty body has no body frame: the header ends it
    for start in range(0, len(data), chunk):
        session.receive(data[start : start + chunk])
    (fields, flags, raw, body), (empty_fields, _, _, empty) = session.got
    assert fields == (2**40 + 7, "rabbitry.3", True, "orders.eu", "eu.new")
    assert body == b"0123456789" * 5
    assert flags == PROPERTY_BITS["message_id"] | PROPERTY_BITS["headers"]
    assert decode_properties(flags, raw) == {"message_id": "m-1", "headers": {"n": 1}}
    assert empty == b"" and not empty_fields[2]


def test_a_closed_channel_drops_the_delivery_in_progress() -> None:
    session = Collecting()
    data = delivery(b"abc", 1)
    session.receive(data[: len(data) - 11])  # the deliver and header frames, not the body's
    session._drop_delivery()
    session.receive(data[len(data) - 11 :])  # a body frame of no delivery: read as pamqp's
    assert session.got == []
