"""Management calls and endpoints of a cluster given as several URLs: a node that does not
answer hands over to the next; an HTTP error answer is final. Small local HTTP servers play
the nodes; a closed port plays a node that is down."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient
from rabbitry.management.endpoints import resolve_endpoints
from tests.unit.http_server import JsonAnswers, QuietServer, serving, url_of


class _Node(JsonAnswers):
    def do_GET(self) -> None:
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        if self.path.endswith("/broken"):
            self.answer(500, b'{"error":"boom","reason":"boom"}')
        else:
            self.answer(200, b'{"node":"up"}')


def _node() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    with serving(QuietServer(("127.0.0.1", 0), _Node)) as server:
        server.seen = seen  # type: ignore[attr-defined]
        yield url_of(server, "s3cret"), seen


@pytest.fixture
def up() -> Iterator[tuple[str, list[str]]]:
    yield from _node()


@pytest.fixture
def also_up() -> Iterator[tuple[str, list[str]]]:
    yield from _node()


@pytest.fixture
def down() -> str:
    """The URL of a port nothing listens on: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://guest:s3cret@127.0.0.1:{port}"


def test_a_refused_node_hands_the_call_to_the_next_and_the_client_stays_there(
    up: tuple[str, list[str]], down: str
) -> None:
    url, seen = up
    with ManagementClient(f"{down},{url}") as client:
        assert client.get("/overview") == {"node": "up"}
        assert client.base_url == url.replace("guest:s3cret@", "")
        assert client.get("/vhosts") == {"node": "up"}
    assert seen == ["/api/overview", "/api/vhosts"]


def test_an_http_error_answer_is_never_retried_on_another_node(
    up: tuple[str, list[str]], also_up: tuple[str, list[str]]
) -> None:
    (first, seen_first), (second, seen_second) = up, also_up
    with ManagementClient(f"{first},{second}") as client, pytest.raises(BrokerError, match="500"):
        client.get("/broken")
    assert seen_first == ["/api/broken"] and seen_second == []


def test_reads_made_at_once_all_hand_over_from_a_refused_node_and_none_goes_back(
    up: tuple[str, list[str]], down: str
) -> None:
    """The vhost reads go out together: each that a refused node turns away moves on from the
    node it was sent to, not from whichever node another read has already moved to."""
    url, seen = up
    for _ in range(10):  # refusals come back in microseconds: give the race many chances
        with ManagementClient(f"{down},{url}") as client:
            start = threading.Barrier(8)

            def read(client: ManagementClient = client, start: threading.Barrier = start) -> Any:
                start.wait()
                return client.get("/overview")

            with ThreadPoolExecutor(max_workers=8) as pool:
                answers = list(pool.map(lambda _: read(), range(8)))
            assert answers == [{"node": "up"}] * 8
            assert client.base_url == url.replace("guest:s3cret@", "")
    assert len(seen) == 10 * 8


def test_when_no_node_answers_the_error_names_every_node_without_passwords(down: str) -> None:
    other = down.replace("127.0.0.1", "localhost")
    with ManagementClient(f"{down},{other}") as client, pytest.raises(BrokerError) as exc:
        client.get("/overview")
    text = str(exc.value)
    assert "tried every node" in text and "127.0.0.1" in text and "localhost" in text
    assert "s3cret" not in text


def test_a_clone_starts_at_the_node_in_use(up: tuple[str, list[str]], down: str) -> None:
    url, _ = up
    with ManagementClient(f"{down},{url}") as client:
        client.get("/overview")
        with client.clone() as clone:
            assert clone.base_url == client.base_url
            assert len(clone.base_urls) == 2


# -- endpoints --------------------------------------------------------------------------------


def test_comma_separated_rabbitry_url_derives_one_management_url_per_node() -> None:
    env = {"RABBITRY_URL": "amqp://app:pw@r1:5672/,amqp://app:pw@r2:5672/"}
    endpoints = resolve_endpoints(environ=env)
    assert endpoints.management_url == "http://app:pw@r1:15672,http://app:pw@r2:15672"
    assert endpoints.amqp_url_for("shop") == "amqp://app:pw@r1:5672/shop,amqp://app:pw@r2:5672/shop"
    assert "pw" not in repr(endpoints)


def test_a_spec_list_of_urls_is_one_comma_separated_value() -> None:
    endpoints = resolve_endpoints(
        spec_url=["amqp://app:pw@r1/", "amqp://app:pw@r2/"],
        spec_management_url=["http://app:pw@r1:15672", "http://app:pw@r2:15672"],
        environ={},
    )
    assert endpoints.amqp_url == "amqp://app:pw@r1/,amqp://app:pw@r2/"
    assert endpoints.management_url == "http://app:pw@r1:15672,http://app:pw@r2:15672"


def test_a_bad_url_in_a_list_is_named_masked() -> None:
    with pytest.raises(BrokerError) as exc:
        resolve_endpoints(environ={"RABBITRY_URL": "amqp://app:pw@r1/,http://app:pw@r2/"})
    assert "must start with amqp://" in str(exc.value) and "pw@" not in str(exc.value)


def test_one_url_resolves_as_it_always_did() -> None:
    endpoints = resolve_endpoints(environ={"RABBITRY_URL": "amqp://app:pw@r1:5672/"})
    assert endpoints.management_url == "http://app:pw@r1:15672"
    assert endpoints.amqp_url_for("/") == "amqp://app:pw@r1:5672/%2F"
