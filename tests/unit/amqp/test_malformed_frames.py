"""Bytes from the broker that are no AMQP frame are ``rabbitry.FrameError``, a ``BrokerError``
that names the node (host:port): never a bare ValueError outside rabbitry's error tree.

A server that answers the protocol header with garbage (another server on the port) ends the
client at once: a failed try that is a ``BrokerError`` ends the outage
(``rabbitry.amqp.reconnect``), so that node is not asked again. A broken frame on a
connection that was up closes it and counts as a lost connection: the client connects again by
the one rule (the next node first), logging the error; should that node answer with garbage
too, that try ends it as above."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

import rabbitry
from rabbitry.amqp.channel import Channel
from rabbitry.amqp.settings import Backoff
from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.publisher import AsyncPublisher, Publisher
from rabbitry.testing import ScriptedBroker
from tests.unit.http_server import SHUTDOWN_POLL
from tests.unit.testing.test_scripted_worker_features import drive, until

BAD_END = b"\x01\x00\x00\x00\x00\x00\x00\x00"
"""A method frame of size 0 whose frame-end octet is 0x00, not 0xCE."""
QUICK = Backoff(initial=0.01, maximum=0.01, jitter=0.0, give_up_after=5.0)
"""Retries would show as several connections (and end in ConnectionLost, not FrameError)."""
WAIT = 10.0


class GarbageServer(socketserver.ThreadingTCPServer):
    """A TCP server that reads the protocol header and answers ``BAD_END``; counts connections."""

    daemon_threads = True
    accepted = 0


class AnswerGarbage(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, GarbageServer)
        self.server.accepted += 1
        conn: socket.socket = self.request
        conn.settimeout(WAIT)
        with contextlib.suppress(OSError):
            conn.recv(8)
            conn.sendall(BAD_END)
            conn.recv(1)  # until the client closes


@pytest.fixture
def garbage() -> Iterator[GarbageServer]:
    with GarbageServer(("127.0.0.1", 0), AnswerGarbage) as server:
        threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True).start()
        yield server
        server.shutdown()


def a_worker_app(got: list[bytes] | None = None) -> App:
    app = App()

    @app.handler("work")
    def handle(message: IncomingMessage) -> None:
        if got is not None:
            got.append(message.body)

    return app


def publish_once(url: str) -> None:
    with Publisher(url, backoff=QUICK) as publisher:
        publisher.publish(b"x", routing_key="work")


def publish_once_async(url: str) -> None:
    async def main() -> None:
        async with AsyncPublisher(url, backoff=QUICK) as publisher:
            await publisher.publish(b"x", routing_key="work")

    asyncio.run(main())


def run_worker(url: str) -> None:
    Worker(a_worker_app(), url, backoff=QUICK).run()


def run_worker_async(url: str) -> None:
    asyncio.run(AsyncWorker(a_worker_app(), url, backoff=QUICK).run())


def open_channel(url: str) -> None:
    with Channel(url, timeout=WAIT):
        pass


CLIENTS: dict[str, Callable[[str], None]] = {
    "Publisher": publish_once,
    "AsyncPublisher": publish_once_async,
    "Worker": run_worker,
    "AsyncWorker": run_worker_async,
}
TOOLS = {**CLIENTS, "Channel": open_channel}
"""The tools' channel tries each node once (no back-off, no reconnects): it has no place in
the tests of what a client does after its first connection."""


@pytest.mark.parametrize("client", TOOLS.values(), ids=TOOLS.keys())
def test_a_server_that_answers_the_protocol_header_with_garbage_ends_the_client_in_a_frame_error(
    garbage: GarbageServer, client: Callable[[str], None]
) -> None:
    with pytest.raises(rabbitry.BrokerError) as caught:
        client(f"amqp://guest:guest@127.0.0.1:{garbage.server_address[1]}/")
    assert isinstance(caught.value, rabbitry.FrameError)
    message = str(caught.value)
    assert f"127.0.0.1:{garbage.server_address[1]} sent bytes" in message
    assert "does not end with 0xCE" in message
    assert garbage.accepted == 1  # the same node's garbage is not asked for again


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as scripted:
        scripted.declare_queue("work")
        yield scripted


def assert_logged_the_broken_frame(
    caplog: pytest.LogCaptureFixture, broker: ScriptedBroker
) -> None:
    said = [r.getMessage() for r in caplog.records if "no AMQP 0-9-1 frame" in r.getMessage()]
    assert len(said) == 1
    assert f"{urlsplit(broker.url).hostname}:5672 sent bytes" in said[0]
    assert "does not end with 0xCE" in said[0]


def test_the_publisher_connects_again_after_a_broken_frame_on_a_live_connection(
    broker: ScriptedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with Publisher(broker.url, backoff=QUICK) as publisher:
        assert publisher.publish(b"before", routing_key="work").ok
        broker.send_bytes(BAD_END)
        assert publisher.publish(b"after", routing_key="work").ok
    assert broker.connections_opened == 2
    # "after" may have reached the broker before the broken frame was read: unconfirmed, it is
    # published again on the new connection (at least once)
    assert [m.body for m in broker.queue("work").messages] in (
        [b"before", b"after"],
        [b"before", b"after", b"after"],
    )
    assert_logged_the_broken_frame(caplog, broker)


def test_the_async_publisher_connects_again_after_a_broken_frame_on_a_live_connection(
    broker: ScriptedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with AsyncPublisher(broker.url, backoff=QUICK) as publisher:
            assert (await publisher.publish(b"before", routing_key="work")).ok
            broker.send_bytes(BAD_END)
            await asyncio.to_thread(until, broker, lambda b: b.connections_opened == 2)
            assert (await publisher.publish(b"after", routing_key="work")).ok

    asyncio.run(main())
    assert [m.body for m in broker.queue("work").messages] == [b"before", b"after"]
    assert_logged_the_broken_frame(caplog, broker)


@pytest.mark.parametrize("kind", [Worker, AsyncWorker])
def test_a_worker_consumes_again_after_a_broken_frame_on_a_live_connection(
    broker: ScriptedBroker, caplog: pytest.LogCaptureFixture, kind: type[Worker] | type[AsyncWorker]
) -> None:
    got: list[bytes] = []
    broker.put("work", b"before")
    worker = kind(a_worker_app(got), broker.url, backoff=QUICK)

    def script() -> None:
        until(broker, lambda b: got == [b"before"])
        broker.send_bytes(BAD_END)
        until(broker, lambda b: len(b.received("basic.consume")) == 2)
        broker.put("work", b"after")
        until(broker, lambda b: got == [b"before", b"after"])

    drive(worker, script)
    assert broker.connections_opened == 2
    assert_logged_the_broken_frame(caplog, broker)


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
def test_with_two_nodes_answering_garbage_each_is_tried_and_the_first_again_ends_the_client(
    client: Callable[[str], None],
) -> None:
    with (
        GarbageServer(("127.0.0.1", 0), AnswerGarbage) as one,
        GarbageServer(("127.0.0.1", 0), AnswerGarbage) as two,
    ):
        for server in (one, two):
            threading.Thread(
                target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True
            ).start()
        urls = ",".join(f"amqp://guest:guest@127.0.0.1:{s.server_address[1]}/" for s in (one, two))
        with pytest.raises(rabbitry.FrameError):
            client(urls)
        one.shutdown()
        two.shutdown()
    assert sorted((one.accepted, two.accepted)) == [1, 2]
