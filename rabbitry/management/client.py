"""A small client for the RabbitMQ management HTTP API: the provisioner's I/O (and the Spark
source's, for a super stream's partitions).

Every error becomes a ``BrokerError`` whose text names the request and the broker's reason, with
credentials masked. Names in paths are percent-encoded (vhost ``/`` is ``%2F``). Every answer,
those read ahead in threads too, is read as it streams in and no further than a limit
(``answer_limit``: ``RABBITRY_MANAGEMENT_MAX_BYTES``, 256 MiB decoded by default).

Given several URLs (a cluster's nodes, comma-separated), a request that cannot reach a node
(connection refused, no connection within the timeout, or no first answer at all to a read)
goes to the next node, and the client stays there. An HTTP error answer is the broker's word:
it is never retried on another node.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

import httpx

from rabbitry.errors import BrokerError, NoAnswer, ObjectNotFound, TLSHandshakeError
from rabbitry.management.answer_limit import ACCEPT_ENCODING, max_answer_bytes, read_capped
from rabbitry.management.failures import describe_failure
from rabbitry.management.node_urls import api_url, q, split_credentials, trust
from rabbitry.management.vhost_objects import read_vhost_objects
from rabbitry.uri import mask_text, split_uris

JSONDict = dict[str, Any]
log = logging.getLogger(__name__)


VANISHED_RETRIES = 4
"""How often a read answered HTTP 500 with an empty body is asked again (``get``)."""
VANISHED_PAUSE = 0.2
FIRST_ANSWER_TIMEOUT = 8.0
"""Seconds to wait for the first answer of a management API (later calls wait ``timeout``)."""


_ANY_STATUS = tuple(range(400, 600))
"""Every error status: a read made ahead keeps its answer for the reader to judge."""


class ManagementClient(contextlib.AbstractContextManager["ManagementClient"]):
    """Synchronous management API client (one keep-alive connection, JSON in and out)."""

    def __init__(
        self,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
        verify: bool | str = True,
        max_answer: int | None = None,
    ) -> None:
        nodes = [split_credentials(one) for one in split_uris(url)] or [split_credentials(url)]
        base, url_user, url_password = nodes[0]
        self.base_url = base
        self.base_urls = tuple(node[0] for node in nodes)
        """Every node's API, credentials left out; ``base_url`` is the one in use."""
        self._answered = False
        self._switching = threading.Lock()
        self._ahead: dict[str, Future[Any]] = {}
        self.username = username or url_user or "guest"
        self.write_guard: Callable[[], None] | None = None
        """Called before every request that may change the broker; raises to stop it (an
        apply's lock holder checks it still holds the lock: ``provisioner.lock``)."""
        password = password if password is not None else url_password
        self._settings = (username, password, timeout, verify)
        self.max_answer = max_answer if max_answer is not None else max_answer_bytes()
        """The most bytes of one answer read, decoded (``RABBITRY_MANAGEMENT_MAX_BYTES``):
        ``answer_limit``."""
        self._client = httpx.Client(
            base_url=base + "/api",
            auth=(self.username, password if password is not None else "guest"),
            timeout=timeout,
            verify=trust(verify),
            headers={"content-type": "application/json", "accept-encoding": ACCEPT_ENCODING},
        )

    def __repr__(self) -> str:
        return f"ManagementClient({self.base_url!r}, username={self.username!r})"

    def clone(self) -> ManagementClient:
        """A client with the same settings and its own connection (for another thread)."""
        username, password, timeout, verify = self._settings
        at = self.base_urls.index(self.base_url)
        clone = ManagementClient(
            ",".join(self.base_urls[at:] + self.base_urls[:at]),
            username=username or self.username,
            password=password,
            timeout=timeout,
            verify=verify,
            max_answer=self.max_answer,
        )
        clone._answered = self._answered  # the same broker: it is known to answer
        return clone

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # -- transport -----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        allow: tuple[int, ...] = (),
        timeout: float | None = None,
    ) -> httpx.Response:
        if method == "GET" and params is None and self._ahead:
            found, ahead = self._taken_ahead(f"GET {path}")
            if found:
                return self._checked(method, path, ahead, allow)
        if method != "GET" and self.write_guard is not None:
            self.write_guard()
        first = not self._answered and method == "GET"
        short = timeout is None and first
        if short:
            # until the API has answered once, a silent port is more likely than a busy broker
            # (reads only: a first delete or import may rightly take long)
            timeout = min(FIRST_ANSWER_TIMEOUT, self._client.timeout.read or FIRST_ANSWER_TIMEOUT)
        call_timeout = httpx.USE_CLIENT_DEFAULT if timeout is None else timeout
        started = time.perf_counter()
        try:
            try:
                response = self._send_to_a_node(method, path, json, params, call_timeout, first)
            except httpx.TimeoutException:
                if not (short and self._answered):
                    raise
                # reads sent together (a plan's, ahead) are all first ones: another has had
                # its answer since, so the API is alive and only slow with this one (the
                # listing of a large vhost on a busy broker): ask again as any later read
                first, timeout = False, None
                response = self._send_to_a_node(
                    method, path, json, params, httpx.USE_CLIENT_DEFAULT, first
                )
        except httpx.TimeoutException:
            waited = timeout if timeout is not None else self._client.timeout.read
            if first:
                raise BrokerError(
                    f"{self._tried} accepted the connection but sent no answer within"
                    f" {waited:g} s: is it the management API of a running RabbitMQ (port 15672"
                    " by default)? check --management-url or RABBITRY_MANAGEMENT_URL"
                ) from None
            raise NoAnswer(
                f"{method} /api{path} got no answer from {self.base_url} within {waited:g} s;"
                " the broker may still be working on it: run the same command again to see"
                " where it stands"
            ) from None
        except httpx.DecodingError as exc:
            # the node answered: its body (or a proxy's rewrite of it) is what is wrong
            raise BrokerError(
                f"{method} /api{path} at {self.base_url} answered a body that cannot be"
                f" decoded: {mask_text(str(exc))}; a proxy between may be altering it"
            ) from None
        except httpx.HTTPError as exc:
            text = mask_text(str(exc))
            if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
                raise TLSHandshakeError(
                    f"the management API at {self.base_url} has a certificate this machine does"
                    f" not trust ({text}): pass --ca-file PEM (or RABBITRY_CA_FILE) with the CA"
                    " that signed it, or --insecure to skip the check"
                ) from None
            raise BrokerError(
                f"cannot reach the management API at {self._tried}: {text}"
                " (is the broker running with the rabbitmq_management plugin? "
                "set --management-url or RABBITRY_MANAGEMENT_URL)"
            ) from None
        self._answered = True
        log.info(
            "%s /api%s -> %d (%.0f ms)",
            method,
            path,
            response.status_code,
            (time.perf_counter() - started) * 1000,
        )
        return self._checked(method, path, response, allow)

    @property
    def _tried(self) -> str:
        """Where a request that reached no node went, for its error."""
        if len(self.base_urls) == 1:
            return self.base_url
        return f"{self.base_url} (tried every node: {', '.join(self.base_urls)})"

    def _send_to_a_node(
        self,
        method: str,
        path: str,
        json: Any,
        params: Mapping[str, str] | None,
        timeout: Any,
        first: bool,
    ) -> httpx.Response:
        """Send to the node in use; one that cannot be reached hands over to the next node
        (each tried once), and the last one's failure is raised. Requests may be made from
        several threads at once (``vhost_objects``): each is sent to the node it read, so
        that a failure moves on from that node, not from one another request moved to."""
        for left in range(len(self.base_urls) - 1, -1, -1):
            node = self.base_url
            url = api_url(node, path)
            try:
                try:
                    return self._exchange(method, path, url, json, params, timeout)
                except httpx.RemoteProtocolError:
                    # the broker closes keep-alive connections left idle (a long apply, a wait
                    # for a lock): an idempotent request goes again once on a fresh connection
                    if method not in ("GET", "PUT", "DELETE"):
                        raise
                    return self._exchange(method, path, url, json, params, timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout) as exc:
                # nothing reached a node that refused or timed out connecting; a read timeout
                # moves on only for a first read (a node that never answered, not a slow apply)
                unanswered = not isinstance(exc, httpx.ReadTimeout) or first
                if not left or not unanswered:
                    raise
                self._next_node(node, exc)
        raise AssertionError("unreachable: the last node's failure is raised")

    def _exchange(
        self,
        method: str,
        path: str,
        url: httpx.URL,
        json: Any,
        params: Mapping[str, str] | None,
        timeout: Any,
    ) -> httpx.Response:
        """One request and its answer, the body read as it streams in and no further than
        ``max_answer`` bytes decoded (``answer_limit``)."""
        request = self._client.build_request(method, url, json=json, params=params, timeout=timeout)
        response = self._client.send(request, stream=True)
        return read_capped(response, self.max_answer, f"{method} /api{path}")

    def _next_node(self, failed: str, exc: httpx.HTTPError) -> None:
        """Move on from ``failed``, unless a request made at the same time already did."""
        with self._switching:
            if self.base_url != failed:
                return
            at = self.base_urls.index(failed)
            self.base_url = self.base_urls[(at + 1) % len(self.base_urls)]
            self._client.base_url = httpx.URL(self.base_url + "/api")
        log.warning(
            "management API at %s does not answer (%s): trying %s",
            failed,
            mask_text(str(exc)) or type(exc).__name__,
            self.base_url,
        )

    def _checked(
        self, method: str, path: str, response: httpx.Response, allow: tuple[int, ...]
    ) -> httpx.Response:
        if response.status_code >= 400 and response.status_code not in allow:
            failure = ObjectNotFound if response.status_code == 404 else BrokerError
            raise failure(self._describe_failure(method, path, response))
        return response

    def _describe_failure(self, method: str, path: str, response: httpx.Response) -> str:
        return describe_failure(
            method, path, response, base_url=self.base_url, username=self.username
        )

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """A read; one answered HTTP 500 with an empty body is asked again a few times:
        RabbitMQ answers so when an object it lists vanishes while it reads it (a vhost another
        client deletes during ``GET /vhosts``)."""
        for _ in range(VANISHED_RETRIES):
            response = self.request("GET", path, params=params, allow=(500,))
            if response.status_code != 500 or response.content:
                return self._checked("GET", path, response, ()).json()
            time.sleep(VANISHED_PAUSE)
        return self.request("GET", path, params=params).json()

    def get_optional(self, path: str) -> Any | None:
        response = self.request("GET", path, allow=(404,))
        return None if response.status_code == 404 else response.json()

    def get_vanishing(self, path: str, attempts: int = 5, pause: float = 0.2) -> Any | None:
        """GET an object that may be deleting itself (a shovel with ``src-delete-after``).

        RabbitMQ 3.x checks that a parameter exists and then reads it again to answer; when it
        vanishes in between, the API answers HTTP 500 with an empty body. Asked again, it
        answers 404: an object that is going away is read a few times before a 500 counts.
        """
        for _ in range(attempts - 1):
            response = self.request("GET", path, allow=(404, 500))
            if response.status_code != 500:
                return None if response.status_code == 404 else response.json()
            log.info("GET /api%s -> 500 while it may be deleting itself: asking again", path)
            time.sleep(pause)
        return self.get_optional(path)

    def put(self, path: str, body: Any) -> None:
        self.request("PUT", path, json=body)

    def delete(
        self, path: str, params: Mapping[str, str] | None = None, missing_ok: bool = True
    ) -> bool:
        """Delete; returns False when the object was already gone (and that was allowed)."""
        response = self.request("DELETE", path, params=params, allow=(404,) if missing_ok else ())
        return response.status_code != 404

    # -- reads ---------------------------------------------------------------------------------

    def overview(self) -> JSONDict:
        result: JSONDict = self.get("/overview")
        return result

    def vhosts(self) -> list[JSONDict]:
        """Every vhost. RabbitMQ 4.3 lists a vhost that is being deleted while it reads as its
        statistics alone, without a name; such an entry is passed over (that vhost is gone)."""
        listed: list[JSONDict] = self.get("/vhosts")
        return [vhost for vhost in listed if "name" in vhost]

    def vhost_exists(self, vhost: str) -> bool:
        return self.get_optional(f"/vhosts/{q(vhost)}") is not None

    def vhost_definitions(self, vhost: str) -> JSONDict:
        result: JSONDict = self.get(f"/definitions/{q(vhost)}")
        return result

    def read_ahead(
        self,
        vhosts: Iterable[str],
        global_parameters: Iterable[str] = (),
        paths: Iterable[str] = (),
    ) -> None:
        """Start reading these vhosts' objects, global parameters and API paths in the
        background, for ``vhost_objects``, ``global_parameter`` and a GET of the path to take
        once when asked: ``rabbitry plan`` reads while it loads and checks the spec. Only for
        reads that need no lock: the answer is as of now, not as of when it is taken."""
        reads: list[tuple[str, Callable[[], Any]]] = [
            (f"vhost {vhost}", functools.partial(self._read_vhost_objects, vhost))
            for vhost in vhosts
        ]
        reads += [
            (f"global {name}", functools.partial(self._read_global_parameter, name))
            for name in global_parameters
        ]
        reads += [
            (f"GET {path}", functools.partial(self.request, "GET", path, allow=_ANY_STATUS))
            for path in paths
        ]
        for key, read in reads:
            if key in self._ahead:
                continue
            future: Future[Any] = Future()

            def run(read: Callable[[], Any] = read, future: Future[Any] = future) -> None:
                try:
                    future.set_result(read())
                except BaseException as exc:  # taken by the reader, which reads again
                    future.set_exception(exc)

            # a daemon: a spec that fails its checks exits without waiting for the answer
            threading.Thread(target=run, name=f"read-ahead {key}", daemon=True).start()
            self._ahead[key] = future

    def forget_read_ahead(self) -> None:
        """Drop what ``read_ahead`` read or is reading: it is out of date (a lock that had to
        be waited for: its holder may have changed the broker since)."""
        self._ahead.clear()

    def _taken_ahead(self, key: str) -> tuple[bool, Any]:
        """(True, what was read ahead for ``key``), or (False, None) when nothing was. A read
        that failed as any read fails (``BrokerError``: a silent port waits its timeout once,
        not once per read) raises here; anything else is read again by the caller."""
        future = self._ahead.pop(key, None)
        if future is not None:
            try:
                return True, future.result()
            except BrokerError:
                raise
            except Exception:
                pass
        return False, None

    def vhost_objects(self, vhost: str) -> JSONDict:
        """``_read_vhost_objects``, or what ``read_ahead`` read of ``vhost``."""
        found, objects = self._taken_ahead(f"vhost {vhost}")
        return objects if found else self._read_vhost_objects(vhost)

    def _read_vhost_objects(self, vhost: str) -> JSONDict:
        """``vhost_objects.read_vhost_objects`` through this client."""
        return read_vhost_objects(self.get, vhost)

    def definitions(self) -> JSONDict:
        result: JSONDict = self.get("/definitions")
        return result

    def bindings(self, vhost: str) -> list[JSONDict]:
        result: list[JSONDict] = self.get(f"/bindings/{q(vhost)}")
        return result

    def queue_stats(self, vhost: str) -> list[JSONDict]:
        result: list[JSONDict] = self.get(
            f"/queues/{q(vhost)}",
            params={"columns": "name,messages,messages_ready,messages_unacknowledged,consumers"},
        )
        return result

    def permissions(self, vhost: str) -> list[JSONDict]:
        result: list[JSONDict] = self.get(f"/vhosts/{q(vhost)}/permissions")
        return result

    def topic_permissions(self, vhost: str) -> list[JSONDict]:
        result: list[JSONDict] = self.get(f"/vhosts/{q(vhost)}/topic-permissions")
        return result

    def users(self) -> list[JSONDict]:
        result: list[JSONDict] = self.get("/users")
        return result

    def global_parameters(self) -> list[JSONDict]:
        result: list[JSONDict] = self.get("/global-parameters")
        return result

    def global_parameter(self, name: str) -> Any | None:
        """A global parameter's value (None when there is none), or what ``read_ahead`` read."""
        found, value = self._taken_ahead(f"global {name}")
        return value if found else self._read_global_parameter(name)

    def _read_global_parameter(self, name: str) -> Any | None:
        body = self.get_optional(f"/global-parameters/{q(name)}")
        return None if body is None else body.get("value")

    # -- writes --------------------------------------------------------------------------------

    def import_definitions(
        self, definitions: JSONDict, vhost: str | None = None, *, timeout: float | None = None
    ) -> None:
        """The broker's own bulk import: the fastest way to create many objects at once. It
        answers when every object is made, so a large one needs a ``timeout`` to match."""
        path = "/definitions" if vhost is None else f"/definitions/{q(vhost)}"
        self.request("POST", path, json=definitions, timeout=timeout)

    def put_global_parameter(self, name: str, value: Any) -> None:
        self.put(f"/global-parameters/{q(name)}", {"name": name, "value": value})


__all__ = [
    "FIRST_ANSWER_TIMEOUT",
    "JSONDict",
    "ManagementClient",
    "ObjectNotFound",
    "q",
    "split_credentials",
]
