"""Deliveries assembled off the wire: what pamqp writes for a broker, read back by offset."""

from __future__ import annotations

from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from rabbitry.amqp.deliveries import DeliveryAssembler, RawDelivery
from rabbitry.amqp.properties import PROPERTY_BITS, decode_properties


def _payload(value: object) -> bytes:
    """The payload of one frame (after type, channel and size; before the frame end)."""
    raw = frame.marshal(value, 1)  # type: ignore[arg-type]
    return raw[7:-1]


def _assemble(body: bytes, pieces: int, *, redelivered: bool = False) -> RawDelivery | None:
    assembler = DeliveryAssembler()
    deliver = commands.Basic.Deliver(
        consumer_tag="rabbitry.3",
        delivery_tag=2**40 + 7,
        redelivered=redelivered,
        exchange="orders.eu",
        routing_key="eu.new",
    )
    assembler.deliver(_payload(deliver), 4)
    assert assembler.pending
    props = commands.Basic.Properties(message_id="m-1", headers={"n": 1})
    head = _payload(header.ContentHeader(0, len(body), props))
    done = assembler.header(bytearray(b"xx" + head + b"yy"), 2, 2 + len(head))
    step = max(1, -(-len(body) // pieces))
    for start in range(0, len(body), step):
        assert done is None
        done = assembler.body(_payload(pamqp_body.ContentBody(body[start : start + step])))
    assert not assembler.pending
    return done


def test_a_delivery_of_several_body_frames_is_one_message() -> None:
    done = _assemble(b"0123456789" * 5, 3, redelivered=True)
    assert done is not None
    assert done.delivery_tag == 2**40 + 7 and done.consumer_tag == "rabbitry.3"
    assert done.redelivered and done.exchange == "orders.eu" and done.routing_key == "eu.new"
    assert done.body == b"0123456789" * 5
    assert done.flags == PROPERTY_BITS["message_id"] | PROPERTY_BITS["headers"]
    assert decode_properties(done.flags, done.properties) == {
        "message_id": "m-1",
        "headers": {"n": 1},
    }


def test_an_empty_body_ends_with_the_header() -> None:
    done = _assemble(b"", 1)
    assert done is not None and done.body == b"" and not done.redelivered


def test_a_closed_channel_drops_the_delivery_in_progress() -> None:
    assembler = DeliveryAssembler()
    assembler.deliver(_payload(commands.Basic.Deliver("t", 1, False, "", "q")), 4)
    assembler.drop()
    assert not assembler.pending
