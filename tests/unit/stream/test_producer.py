"""A named producer's publish frames and confirms, against a scripted connection: frames cut to
the broker's frame size, each message counted once confirmed, a refusal raised at the end."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from rabbitry.stream.blocking import Producer, StreamClient
from rabbitry.stream.errors import StreamRefused
from rabbitry.stream.frames import Key
from rabbitry.stream.session import Confirmed, Event, PublishFailed, Session


class ScriptedClient:
    """What ``Producer`` uses of a ``StreamClient``: each publish frame it writes is confirmed
    (or refused, for the ids in ``refuse``) when the producer next waits."""

    def __init__(self, frame_max: int, last: int = 0, refuse: frozenset[int] = frozenset()) -> None:
        self.session = Session(username="u", password="p", frame_max=frame_max)
        self.last, self.refuse = last, refuse
        self.frames: list[list[tuple[int, bytes]]] = []
        self.declared: list[str] = []
        self._events: list[Event] = []
        self.display = "scripted"

    def send(self, *parts: bytes | memoryview) -> None:
        self.session.out += b"".join(parts)

    def _ok(self, correlation: int, what: str) -> None:
        if what.startswith("declaring"):
            self.declared.append(what)

    def last_publishing_id(self, reference: str, stream: str) -> int:
        return self.last

    def _round(self, timeout: float) -> bool:
        out, pos = bytes(self.session.out), 0
        self.session.out.clear()
        while pos < len(out):
            size, key = struct.unpack_from(">IH", out, pos)
            if key == Key.PUBLISH:
                publisher, count = struct.unpack_from(">BI", out, pos + 8)
                at, entries = pos + 13, []
                for _ in range(count):
                    publishing_id, length = struct.unpack_from(">QI", out, at)
                    entries.append((publishing_id, out[at + 12 : at + 12 + length]))
                    at += 12 + length
                self.frames.append(entries)
                ids = [i for i, _ in entries]
                self._events.append(Confirmed(publisher, [i for i in ids if i not in self.refuse]))
                failed = [(i, 17) for i in ids if i in self.refuse]
                if failed:
                    self._events.append(PublishFailed(publisher, failed))
            pos += 4 + size
        return True


def entries(messages: list[tuple[int, bytes]]) -> tuple[list[int], bytes]:
    offsets, data = [0], b""
    for publishing_id, message in messages:
        data += struct.pack(">QI", publishing_id, len(message)) + message
        offsets.append(len(data))
    return offsets, data


def producer(client: ScriptedClient) -> Producer:
    return Producer(client, "job:0:1", timeout=1.0)  # type: ignore[arg-type]


def test_frames_are_cut_to_the_broker_frame_size_and_every_message_confirmed() -> None:
    client = ScriptedClient(frame_max=64 + 3 * 112)  # three entries of 112 bytes a frame
    messages = [(i, bytes([i]) * 100) for i in range(1, 11)]
    with producer(client) as p:
        p.send("s", *entries(messages))
        count = p.finish()
    assert [len(f) for f in client.frames] == [3, 3, 3, 1]
    assert [m for f in client.frames for m in f] == messages
    assert (count.sent, count.skipped) == (10, 0)
    assert client.declared == ["declaring producer 'job:0:1' on stream 's'"]


def test_a_message_larger_than_a_frame_goes_alone_for_the_broker_to_refuse() -> None:
    client = ScriptedClient(frame_max=100)
    with producer(client) as p:
        p.send("s", *entries([(1, b"x" * 500), (2, b"y")]))
        p.finish()
    assert [len(f) for f in client.frames] == [1, 1]


def test_entries_sent_from_a_part_of_a_buffer_start_at_its_first_offset() -> None:
    client = ScriptedClient(frame_max=1 << 20)
    offsets, data = entries([(1, b"a"), (2, b"bb"), (3, b"ccc")])
    with producer(client) as p:
        p.send("s", offsets[1:], memoryview(data)[offsets[1] :])
        p.finish()
    assert client.frames == [[(2, b"bb"), (3, b"ccc")]]


def test_refused_messages_are_raised_once_all_are_settled() -> None:
    client = ScriptedClient(frame_max=1 << 20, refuse=frozenset({2, 3}))
    refused = r"refused 2 message\(s\) of producer 'job:0:1'"
    with pytest.raises(StreamRefused, match=refused), producer(client) as p:
        p.send("s", *entries([(1, b"a"), (2, b"b"), (3, b"c")]))
        p.finish()


def test_publish_skips_the_ids_the_broker_holds_and_sends_the_rest() -> None:
    client: Any = ScriptedClient(frame_max=1 << 20, last=2)
    client.publish = StreamClient.publish.__get__(client)
    count = client.publish("job:0:1", [("s", i, b"m%d" % i) for i in range(1, 5)])
    assert (count.sent, count.skipped) == (2, 2)
    assert client.frames == [[(3, b"m3"), (4, b"m4")]]
