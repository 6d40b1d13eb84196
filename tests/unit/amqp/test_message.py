"""Message building: ids, persistence, content types, bodies."""

from __future__ import annotations

import pytest
from pamqp import frame

from rabbitry.amqp.message import MessageBuilder, MessageIds, encode_body


def properties(frames: bytes):  # type: ignore[no-untyped-def]
    used, _, _ = frame.unmarshal(frames)
    _, _, head = frame.unmarshal(frames[used:])
    return head.properties


def test_every_message_gets_a_unique_id_and_caller_ids_are_kept() -> None:
    ids = MessageIds()
    made = {ids.next() for _ in range(10_000)}
    assert len(made) == 10_000 and all(len(i) == 32 for i in made)
    assert MessageIds().next()[:20] != ids.next()[:20]
    d = MessageBuilder().build(b"", exchange="", routing_key="q", message_id="mine")
    assert d.message_id == "mine" and properties(d.frames).message_id == "mine"


def test_persistent_by_default_and_transient_on_request() -> None:
    b = MessageBuilder()
    assert properties(b.build(b"x", exchange="", routing_key="q").frames).delivery_mode == 2
    assert (
        properties(
            b.build(b"x", exchange="", routing_key="q", persistent=False).frames
        ).delivery_mode
        == 1
    )
    assert (
        properties(
            MessageBuilder(persistent=False).build(b"x", exchange="", routing_key="q").frames
        ).delivery_mode
        == 1
    )


def test_timestamp_and_headers_are_set() -> None:
    d = MessageBuilder().build(b"x", exchange="e", routing_key="k", headers={"a": 1})
    props = properties(d.frames)
    assert props.timestamp is not None and props.headers == {"a": 1}


@pytest.mark.parametrize(
    ("body", "ctype", "data", "expected"),
    [
        (b"x", None, b"x", None),
        ("h\u00e9", None, "h\u00e9".encode(), "text/plain; charset=utf-8"),
        ({"a": 1}, None, b'{"a":1}', "application/json"),
        ([1], "application/x-custom", b"[1]", "application/x-custom"),
        (bytearray(b"y"), "a/b", b"y", "a/b"),
    ],
)
def test_bodies_and_content_types(
    body: object, ctype: str | None, data: bytes, expected: str | None
) -> None:
    assert encode_body(body, ctype) == (data, expected)  # type: ignore[arg-type]


def test_other_bodies_are_refused() -> None:
    with pytest.raises(TypeError, match="bytes, str, dict, list, a pydantic model or a dataclass"):
        encode_body(3, None)  # type: ignore[arg-type]


def test_cached_prefixes_do_not_leak_between_messages() -> None:
    b = MessageBuilder()
    one = properties(b.build(b"x", exchange="", routing_key="q", correlation_id="a").frames)
    two = properties(b.build(b"x", exchange="", routing_key="q").frames)
    assert one.correlation_id == "a" and two.correlation_id is None
