"""The stream protocol's state machine driven byte by byte by a scripted broker."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitry.stream.errors import StreamProtocolError, StreamRefused
from rabbitry.stream.frames import Key, OffsetSpec, Reader, frame
from rabbitry.stream.session import Closed, Confirmed, PublishFailed, Response, Session


def requests(session: Session) -> list[tuple[int, Reader]]:
    """The frames the session wrote since last asked: (key, reader after key and version)."""
    out, pos, found = bytes(session.out), 0, []
    while pos < len(out):
        size = struct.unpack_from(">I", out, pos)[0]
        body = memoryview(out[pos + 4 : pos + 4 + size])
        found.append((struct.unpack_from(">H", body)[0], Reader(body, 4)))
        pos += 4 + size
    session.out.clear()
    return found


def respond(key: int, correlation: int, code: int = 1, rest: bytes = b"") -> bytes:
    return frame(key | 0x8000, struct.pack(">IH", correlation, code) + rest)


def feed(session: Session, data: bytes) -> list[object]:
    events: list[object] = []
    for i in range(len(data)):  # one byte at a time: frames may be cut anywhere
        events += session.receive(data[i : i + 1])
    return events


def handshake(session: Session) -> None:
    session.start()
    [(key, r)] = requests(session)
    assert key == Key.PEER_PROPERTIES
    feed(session, respond(Key.PEER_PROPERTIES, r.u32(), rest=struct.pack(">I", 0)))
    [(key, r)] = requests(session)
    assert key == Key.SASL_HANDSHAKE
    mechanisms = struct.pack(">I", 2) + b"\x00\x05PLAIN\x00\x08EXTERNAL"
    feed(session, respond(Key.SASL_HANDSHAKE, r.u32(), rest=mechanisms))
    [(key, r)] = requests(session)
    assert key == Key.SASL_AUTHENTICATE
    correlation = r.u32()
    assert r.string() == "PLAIN"
    secret = r.buf[r.pos + 4 :].tobytes()
    assert secret == b"\0user\0secret"
    feed(session, respond(Key.SASL_AUTHENTICATE, correlation))
    assert not session.ready
    feed(session, frame(Key.TUNE, struct.pack(">II", 65536, 30)))
    (tune_key, tune), (open_key, r) = requests(session)
    assert (tune_key, tune.u32(), tune.u32()) == (Key.TUNE, 65536, 30)
    correlation = r.u32()
    assert (open_key, r.string()) == (Key.OPEN, "vh")
    props = struct.pack(">I", 1) + b"\x00\x0fadvertised_host\x00\x04host"
    feed(session, respond(Key.OPEN, correlation, rest=props))


def test_the_handshake_logs_in_tunes_and_opens_the_vhost() -> None:
    session = Session(username="user", password="secret", vhost="vh")
    handshake(session)
    assert session.ready
    assert session.server_properties == {"advertised_host": "host"}
    assert session.heartbeat == 30


def test_a_refused_login_names_the_user_and_never_the_password() -> None:
    session = Session(username="user", password="secret")
    session.start()
    [(_, r)] = requests(session)
    feed(session, respond(Key.PEER_PROPERTIES, r.u32(), rest=struct.pack(">I", 0)))
    [(_, r)] = requests(session)
    mechanisms = struct.pack(">I", 1) + b"\x00\x05PLAIN"
    feed(session, respond(Key.SASL_HANDSHAKE, r.u32(), rest=mechanisms))
    [(_, r)] = requests(session)
    with pytest.raises(StreamRefused, match="login of user 'user': authentication failure") as e:
        feed(session, respond(Key.SASL_AUTHENTICATE, r.u32(), code=8))
    assert "secret" not in str(e.value)


def test_confirms_errors_heartbeats_and_close_come_out_as_events() -> None:
    session = Session(username="user", password="secret", vhost="vh")
    handshake(session)
    confirm = frame(Key.PUBLISH_CONFIRM, b"\x03" + struct.pack(">IQQ", 2, 7, 8))
    error = frame(Key.PUBLISH_ERROR, b"\x03" + struct.pack(">IQH", 1, 9, 2))
    events = feed(session, confirm + error + frame(Key.HEARTBEAT, b""))
    assert events == [Confirmed(3, [7, 8]), PublishFailed(3, [(9, 2)])]
    assert [k for k, _ in requests(session)] == [Key.HEARTBEAT]
    correlation = session.query_publisher_sequence("job-p0", "s")
    [(key, _)] = requests(session)
    assert key == Key.QUERY_PUBLISHER_SEQUENCE
    [answer] = feed(session, respond(key, correlation, rest=struct.pack(">Q", 41)))
    assert isinstance(answer, Response) and answer.ok and answer.body.u64() == 41
    closing = frame(Key.CLOSE, struct.pack(">IH", 5, 1) + b"\x00\x03bye")
    assert feed(session, closing) == [Closed(1, "bye")]
    assert not session.ready


@pytest.mark.parametrize("key", [Key.PUBLISH_CONFIRM, Key.DELIVER, Key.METADATA_UPDATE, Key.TUNE])
def test_a_frame_shorter_than_its_fields_is_a_stream_protocol_error(key: Key) -> None:
    session = Session(username="user", password="secret")
    with pytest.raises(StreamProtocolError, match=f"a frame of key {int(key)} is cut short"):
        session.receive(frame(key, b""))


def _deliver(first: int, records: list[bytes]) -> bytes:
    from tests.unit.stream.test_frames import chunk, entry

    data = b"".join(entry(r) for r in records)
    return frame(Key.DELIVER, b"\x01" + chunk(data, len(records), len(records), first=first))


@given(st.lists(st.integers(min_value=1, max_value=400), max_size=6))
def test_frames_cut_anywhere_between_reads_give_the_chunks_one_read_gives(cuts: list[int]) -> None:
    stream = b"".join(_deliver(10 * i, [bytes([i]) * (50 + i), b"r" * i]) for i in range(4))
    whole = Session(username="u", password="p").receive(stream)
    session = Session(username="u", password="p")
    got: list[object] = []
    at = 0
    for cut in sorted({min(c, len(stream)) for c in cuts}):
        got += session.receive(stream[at:cut])
        at = cut
    got += session.receive(stream[at:])
    assert [(c.first_offset, [bytes(r) for r in c.records]) for c in got] == [
        (c.first_offset, [bytes(r) for r in c.records]) for c in whole
    ]
    assert len(got) == 4


def test_a_frame_wholly_in_one_read_is_read_in_place_not_copied() -> None:
    data = _deliver(0, [b"a" * 100]) + _deliver(1, [b"b" * 100])
    session = Session(username="u", password="p")
    first, second = session.receive(data)
    for chunk in (first, second):
        entries = chunk.plain_entries()
        assert entries is not None and entries[0].obj is data


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=5))
def test_the_rest_of_a_frame_received_into_its_place_gives_the_chunk_one_read_gives(
    first: int, step: int
) -> None:
    data = _deliver(7, [b"x" * 150, b"yz"]) + _deliver(9, [b"w"])
    [whole, after] = Session(username="u", password="p").receive(data)
    session = Session(username="u", password="p")
    got = session.receive(data[:first])
    at = first
    while (into := session.into()) is not None:
        take = min(len(into), step + 1)
        into[:take] = data[at : at + take]
        got += session.received_into(take)
        at += take
    got += session.receive(data[at:])
    assert [(c.first_offset, [bytes(r) for r in c.records]) for c in got] == [
        (c.first_offset, [bytes(r) for r in c.records]) for c in (whole, after)
    ]


def test_frames_received_into_a_buffer_that_is_reused_are_copied_out() -> None:
    buffer = bytearray(_deliver(0, [b"a" * 64]))
    [chunk] = Session(username="u", password="p").receive(memoryview(buffer))
    buffer[:] = bytes(len(buffer))  # the reader's next bytes
    assert [bytes(r) for r in chunk.records] == [b"a" * 64]


def test_a_frame_size_no_broker_sends_is_a_protocol_error() -> None:
    with pytest.raises(StreamProtocolError, match="a frame of 4294967295 bytes"):
        Session(username="u", password="p").receive(b"\xff\xff\xff\xff\x00")


@pytest.mark.parametrize(
    ("offset", "spec"),
    [
        (None, struct.pack(">H", OffsetSpec.FIRST)),
        (OffsetSpec.LAST, struct.pack(">H", OffsetSpec.LAST)),
        (41, struct.pack(">HQ", OffsetSpec.OFFSET, 41)),
    ],
    ids=["first", "last chunk", "an offset"],
)
def test_a_subscription_starts_where_it_is_asked(offset: object, spec: bytes) -> None:
    session = Session(username="user", password="secret", vhost="vh")
    handshake(session)
    session.subscribe(3, "s", offset, 1)  # type: ignore[arg-type]
    [(key, r)] = requests(session)
    r.u32()  # correlation
    assert key == Key.SUBSCRIBE and r.u8() == 3 and r.string() == "s"
    assert bytes(r.buf[r.pos : r.pos + len(spec)]) == spec
    with pytest.raises(ValueError, match="give the offset"):
        session.subscribe(3, "s", OffsetSpec.TIMESTAMP, 1)
