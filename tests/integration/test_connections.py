"""Connecting, as every client of the AMQP layer does it: the same tests drive the blocking and
asyncio publishers and workers, so the one reconnect rule shows the same behaviour in all four."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from rabbitry.amqp.errors import ConnectionLost
from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.errors import BrokerError
from rabbitry.publisher import AsyncPublisher, Backoff, Publisher

pytestmark = pytest.mark.broker

SECRET = "wrong-S3cret-pw"


def _app() -> App:
    app = App()

    @app.handler("connections.q")
    def handle(message: IncomingMessage) -> None:
        pass

    return app


def _publisher(url: str, backoff: Backoff) -> None:
    Publisher(url, backoff=backoff).connect()


def _async_publisher(url: str, backoff: Backoff) -> None:
    asyncio.run(AsyncPublisher(url, backoff=backoff).connect())


def _worker(url: str, backoff: Backoff) -> None:
    Worker(_app(), url, backoff=backoff).run()


def _async_worker(url: str, backoff: Backoff) -> None:
    asyncio.run(AsyncWorker(_app(), url, backoff=backoff).run())


CLIENTS: dict[str, Callable[[str, Backoff], None]] = {
    "Publisher": _publisher,
    "AsyncPublisher": _async_publisher,
    "Worker": _worker,
    "AsyncWorker": _async_worker,
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.versions
@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_login_stops_at_once_naming_the_user_and_what_to_check(
    client: str, rabbitmq_vhost: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    bad = rabbitmq_vhost.amqp_url.replace(
        f":{quote(rabbitmq_vhost.password, safe='')}@", f":{SECRET}@"
    )
    started = time.monotonic()
    with pytest.raises(BrokerError) as refused:
        CLIENTS[client](bad, Backoff(initial=0.05, give_up_after=30.0))
    assert time.monotonic() - started < 10, "a refused login must not be retried"
    text = str(refused.value)
    assert not isinstance(refused.value, ConnectionLost)
    assert f"user {rabbitmq_vhost.username!r}" in text
    assert "403" in text and "check the user name and password" in text
    assert SECRET not in text and SECRET not in caplog.text
    # nothing was ever connected: no "lost, reconnecting" and no retry before the error
    assert "lost" not in caplog.text and "retrying" not in caplog.text


@pytest.mark.parametrize("client", CLIENTS)
def test_give_up_after_ends_the_retries_of_every_client(client: str) -> None:
    url = f"amqp://someone:{SECRET}@127.0.0.1:{_closed_port()}/%2F"
    started = time.monotonic()
    with pytest.raises(ConnectionLost) as lost:
        CLIENTS[client](url, Backoff(initial=0.05, maximum=0.2, give_up_after=1.0))
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 5.0
    assert "could not connect to amqp://someone@127.0.0.1" in str(lost.value)
    assert SECRET not in str(lost.value)
    # a worker that gives up is a broker error too: one except catches it in either client
    assert isinstance(lost.value, BrokerError)
