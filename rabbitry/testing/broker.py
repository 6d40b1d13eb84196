"""A test broker as a value (``Broker``: URLs, credentials, ports) and waiting until it answers.

Providers (``rabbitry.testing.providers``) decide where a broker comes from; containers
(``rabbitry.testing.containers``) start one; both hand out ``Broker`` values from here.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from rabbitry.errors import BrokerError
from rabbitry.errors import BrokerUnavailable as BrokerUnavailable
from rabbitry.uri import mask_text, mask_uri, mask_with

AMQP_DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}
MANAGEMENT_DEFAULT_PORT = 15672
DEFAULT_MANAGEMENT_TIMEOUT = 90.0

SETUP_HINT = (
    "run rabbitry's scripts/setup.sh (Docker, or Podman plus a locally built RabbitMQ image), "
    "or set RABBITMQ_URL (and RABBITRY_MANAGEMENT_URL if the management API is not at "
    "http://<host>:15672)"
)


class BrokerControl(Protocol):
    """What stops and starts a broker rabbitry runs (a container); see ``Broker.stop``."""

    def stop(self) -> None: ...

    def start(self) -> Broker: ...


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Broker:
    """A reachable RabbitMQ broker: AMQP and management endpoints plus credentials.

    ``repr`` never shows the password. Brokers rabbitry runs in a container can be stopped and
    started again (``stop``/``start``/``restart``), for tests of what clients do meanwhile.
    """

    host: str
    amqp_port: int = 5672
    management_port: int = MANAGEMENT_DEFAULT_PORT
    username: str = "guest"
    password: str = "guest"
    amqp_scheme: str = "amqp"
    # The stream protocol's port (rabbitmq_stream) when known to be published; None otherwise.
    stream_port: int | None = None
    # Full base URL of the management API when it is not http://host:management_port
    # (https, another host, a path prefix behind a proxy).
    management_base: str | None = None
    control: BrokerControl | None = field(default=None, compare=False)

    def amqp_url(self, vhost: str = "/") -> str:
        """``amqp://user:pass@host:port/<vhost>``; the vhost ``/`` is written ``%2F``."""
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        return (
            f"{self.amqp_scheme}://{userinfo}@{_netloc(self.host, self.amqp_port)}"
            f"/{quote(vhost, safe='')}"
        )

    @property
    def management_url(self) -> str:
        """Base URL of the management HTTP API, without credentials (``http://host:15672``)."""
        if self.management_base is not None:
            return self.management_base
        return f"http://{_netloc(self.host, self.management_port)}"

    @property
    def management_url_with_credentials(self) -> str:
        """``management_url`` with the broker's user as userinfo (``http://user:pass@host:port``):
        what ``rabbitry.plan``/``apply(management_url=...)`` and ``--management-url`` take, so
        that, given with ``amqp_url()``, they reach this broker and no other."""
        parts = urlsplit(self.management_url)
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        return urlunsplit((parts.scheme, f"{userinfo}@{parts.netloc}", parts.path, "", ""))

    @property
    def auth(self) -> tuple[str, str]:
        return (self.username, self.password)

    def __repr__(self) -> str:
        return (
            f"Broker(amqp_url={mask_uri(self.amqp_url())!r}, "
            f"management_url={self.management_url!r})"
        )

    def stop(self) -> None:
        """Stop the broker (its container); ``start`` brings it back with the same data."""
        self._require_control().stop()

    def start(self) -> Broker:
        """Start a stopped broker and wait for it; use the returned value from then on.

        On a local engine the host ports are fixed when the container is created, so the
        returned broker has the same URLs. On a remote engine the ports may change.
        """
        return self._require_control().start()

    def restart(self) -> Broker:
        self.stop()
        return self.start()

    def _require_control(self) -> BrokerControl:
        if self.control is None:
            raise BrokerError(
                f"{self!r} was not started by rabbitry (it comes from RABBITMQ_URL), so rabbitry "
                "cannot stop or start it; use a container broker (rabbitmq_broker_factory)"
            )
        return self.control


def broker_from_urls(amqp_url: str, management_url: str | None = None) -> Broker:
    """The broker behind an AMQP URL (and optionally a management URL).

    Credentials come from the AMQP URL (guest/guest when absent), or from the management URL's
    userinfo when only that one has them. The AMQP URL's vhost is ignored: tests make their own.
    """
    parts = urlsplit(amqp_url)
    if parts.scheme not in AMQP_DEFAULT_PORTS or not parts.hostname:
        raise BrokerError(
            f"RABBITMQ_URL {mask_text(amqp_url)!r} is not an AMQP URL like amqp://user:pass@host:5672/"
        )
    try:
        amqp_port = parts.port or AMQP_DEFAULT_PORTS[parts.scheme]
    except ValueError as exc:
        raise BrokerError(
            f"RABBITMQ_URL {mask_text(amqp_url)!r}: {mask_with(str(exc), amqp_url)}"
        ) from None
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None

    management_base: str | None = None
    management_port = MANAGEMENT_DEFAULT_PORT
    if management_url:
        mparts = urlsplit(management_url)
        if mparts.scheme not in ("http", "https") or not mparts.hostname:
            raise BrokerError(
                f"RABBITRY_MANAGEMENT_URL {mask_text(management_url)!r} is not an http(s) URL "
                "like http://host:15672"
            )
        try:
            management_port = mparts.port or (443 if mparts.scheme == "https" else 80)
        except ValueError as exc:
            raise BrokerError(
                f"RABBITRY_MANAGEMENT_URL {mask_text(management_url)!r}:"
                f" {mask_with(str(exc), management_url)}"
            ) from None
        if username is None and mparts.username is not None:
            username = unquote(mparts.username)
            password = unquote(mparts.password) if mparts.password is not None else None
        netloc = _netloc(mparts.hostname, management_port)
        management_base = urlunsplit((mparts.scheme, netloc, mparts.path.rstrip("/"), "", ""))
        if management_base == f"http://{_netloc(parts.hostname, management_port)}":
            management_base = None  # the plain default form: keep the value simple
    return Broker(
        host=parts.hostname,
        amqp_port=amqp_port,
        management_port=management_port,
        username=username if username is not None else "guest",
        password=password if password is not None else "guest",
        amqp_scheme=parts.scheme,
        management_base=management_base,
    )


Check = Callable[[], None]
"""Called between attempts while waiting; raises ``BrokerError`` to give up (a dead container)."""


def _no_check() -> None:
    return None


def _poll(
    attempt: Callable[[], str | None],
    timeout: float,
    check: Check,
    *,
    what: str,
    hint: str = "",
) -> None:
    """Call ``attempt`` every quarter second until it answers None (ready); after ``timeout``
    seconds, ``BrokerError`` saying that ``what`` did not answer, the last thing ``attempt``
    said was wrong (secrets masked) and ``hint``."""
    deadline = time.monotonic() + timeout
    while True:
        last = attempt()
        if last is None:
            return
        if time.monotonic() >= deadline:
            raise BrokerError(
                f"{what} did not answer within {timeout:.0f} s (last: {mask_text(last)}){hint}"
            )
        check()
        time.sleep(0.25)


def wait_for_management(
    broker: Broker, timeout: float = DEFAULT_MANAGEMENT_TIMEOUT, *, check: Check = _no_check
) -> Broker:
    """Return ``broker`` once ``GET /api/overview`` answers 200; ``BrokerError`` after ``timeout``.

    A broker accepts AMQP connections a little before its management API is up, and the
    fixtures create vhosts through that API.
    """
    with httpx.Client(auth=broker.auth, timeout=5.0) as client:

        def overview() -> str | None:
            try:
                response = client.get(f"{broker.management_url}/api/overview")
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}: {exc}"
            if response.status_code == 200:
                return None
            if response.status_code == 401:
                raise BrokerError(
                    f"{broker.management_url}/api/overview refused user "
                    f"{broker.username!r} (HTTP 401): check the credentials"
                )
            return f"HTTP {response.status_code}"

        _poll(
            overview,
            timeout,
            check,
            what=f"the management API of {broker!r}",
            hint="; is the rabbitmq_management plugin enabled?",
        )
    return broker


def wait_for_amqp(
    broker: Broker, timeout: float = DEFAULT_MANAGEMENT_TIMEOUT, *, check: Check = _no_check
) -> Broker:
    """Return ``broker`` once its AMQP port answers the protocol header with connection.start.

    A bare TCP connect is not enough: a port published by a proxy accepts connections while
    nothing listens behind it. TLS ports (amqps) are only checked for a TCP connect.
    """

    def greeting() -> str | None:
        try:
            with socket.create_connection((broker.host, broker.amqp_port), timeout=5.0) as sock:
                if broker.amqp_scheme != "amqp":
                    return None
                sock.sendall(b"AMQP\x00\x00\x09\x01")
                if sock.recv(1) == b"\x01":  # a method frame: connection.start
                    return None
                return "the connection was closed before connection.start"
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"

    _poll(greeting, timeout, check, what=f"AMQP on {broker.host}:{broker.amqp_port}")
    return broker


def wait_until_ready(
    broker: Broker, timeout: float = DEFAULT_MANAGEMENT_TIMEOUT, *, check: Check = _no_check
) -> Broker:
    """Wait for both AMQP and the management API, within one ``timeout``."""
    started = time.monotonic()
    wait_for_amqp(broker, timeout, check=check)
    remaining = max(1.0, timeout - (time.monotonic() - started))
    return wait_for_management(broker, remaining, check=check)
