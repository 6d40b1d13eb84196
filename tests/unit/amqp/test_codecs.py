"""Typed bodies on the publishing side: models and dataclasses through a codec."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pamqp import frame
from pydantic import BaseModel, ValidationError

from rabbitry.amqp.codecs import JSON, Codec, decode_model, encode_model, is_model
from rabbitry.amqp.message import MessageBuilder, encode_body
from rabbitry.publisher import AsyncPublisher, Publisher


class Order(BaseModel):
    id: int
    placed: datetime


@dataclass
class Mail:
    to: str
    tries: int = 0


class Lines:
    """A codec of its own: one ``key=value`` per line."""

    content_type = "text/x-lines"

    def encode(self, data: Any) -> bytes:
        return "\n".join(f"{k}={v}" for k, v in data.items()).encode()

    def decode(self, body: bytes) -> Any:
        return dict(line.split("=", 1) for line in body.decode().splitlines())


PLACED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def content(frames: bytes) -> tuple[Any, bytes]:
    used, _, _ = frame.unmarshal(frames)
    more, _, head = frame.unmarshal(frames[used:])
    _, _, body = frame.unmarshal(frames[used + more :])
    return head.properties, body.value


def test_a_model_is_sent_as_json_with_its_content_type() -> None:
    data, ctype = encode_body(Order(id=7, placed=PLACED), None)
    assert json.loads(data) == {"id": 7, "placed": "2026-01-02T03:04:05Z"}
    assert ctype == "application/json"


def test_a_dataclass_is_sent_as_json_too_and_a_given_content_type_wins() -> None:
    assert encode_body(Mail(to="a@b"), "application/vnd.mail+json") == (
        b'{"to":"a@b","tries":0}',
        "application/vnd.mail+json",
    )


def test_a_codec_encodes_models_dicts_and_lists_and_names_its_content_type() -> None:
    lines = Lines()
    assert isinstance(lines, Codec)
    assert encode_body(Mail(to="a@b", tries=2), None, lines) == (
        b"to=a@b\ntries=2",
        lines.content_type,
    )
    assert encode_body({"k": "v"}, None, lines) == (b"k=v", "text/x-lines")
    assert encode_body(b"raw", None, lines) == (b"raw", None), "bytes are sent as they are"


def test_the_builder_uses_its_codec() -> None:
    delivery = MessageBuilder(codec=Lines()).build(Mail(to="x"), exchange="", routing_key="q")
    props, body = content(delivery.frames)
    assert props.content_type == "text/x-lines" and body == b"to=x\ntries=0"


@pytest.mark.parametrize("kind", [Publisher, AsyncPublisher])
def test_both_publishers_accept_models_and_set_the_content_type(
    kind: type[Publisher] | type[AsyncPublisher],
) -> None:
    publisher = kind("amqp://localhost")  # prepares only: nothing connects
    props, body = content(publisher.prepare(Order(id=1, placed=PLACED), routing_key="q").frames)
    assert props.content_type == "application/json"
    assert Order.model_validate_json(body) == Order(id=1, placed=PLACED)
    coded = kind("amqp://localhost", codec=Lines()).prepare(Mail(to="a"), routing_key="q")
    assert content(coded.frames)[0].content_type == "text/x-lines"


def test_classes_are_not_models() -> None:
    assert is_model(Mail(to="x")) and is_model(Order(id=1, placed=PLACED))
    assert not is_model(Mail) and not is_model(Order) and not is_model({"a": 1})


def test_decoding_validates_into_the_type_and_round_trips() -> None:
    order = Order(id=3, placed=PLACED)
    assert decode_model(encode_model(order), Order) == order
    assert decode_model(encode_model(Mail(to="a"), Lines()), Mail, Lines()) == Mail(to="a")
    assert decode_model(b"[1, 2]", list[int], JSON) == [1, 2]
    with pytest.raises(ValidationError):
        decode_model(b'{"id": "seven"}', Order)
    with pytest.raises(ValueError):
        decode_model(b"not json", Order)
