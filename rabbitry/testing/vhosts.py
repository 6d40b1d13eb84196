"""One fresh vhost per test: created through the management API, deleted afterwards."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from rabbitry.errors import BrokerError
from rabbitry.testing.broker import Broker

VHOST_PREFIX = "rabbitry-test-"


@dataclass(frozen=True)
class TestVhost:
    """A vhost of its own for one test, on ``broker``, with full permissions for its user."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    name: str
    broker: Broker

    @property
    def amqp_url(self) -> str:
        """AMQP URL with credentials, for this vhost."""
        return self.broker.amqp_url(self.name)

    @property
    def management_url(self) -> str:
        """Base URL of the broker's management API (no credentials: see username/password)."""
        return self.broker.management_url

    @property
    def management_url_with_credentials(self) -> str:
        """The management API's URL with credentials: with ``amqp_url``, what
        ``rabbitry.apply(spec, url=..., management_url=...)`` takes to work on this broker."""
        return self.broker.management_url_with_credentials

    @property
    def username(self) -> str:
        return self.broker.username

    @property
    def password(self) -> str:
        return self.broker.password

    def __repr__(self) -> str:
        return f"TestVhost(name={self.name!r}, broker={self.broker!r})"


def new_vhost_name(prefix: str = VHOST_PREFIX) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _check(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise BrokerError(f"{what}: HTTP {response.status_code} {response.text[:300]}")


def create_test_vhost(broker: Broker, name: str | None = None) -> TestVhost:
    """Create a vhost (default: ``rabbitry-test-<8 hex>``) and grant the broker user everything."""
    name = name or new_vhost_name()
    path = quote(name, safe="")
    user = quote(broker.username, safe="")
    with httpx.Client(base_url=broker.management_url, auth=broker.auth, timeout=30.0) as client:
        try:
            _check(client.put(f"/api/vhosts/{path}", json={}), f"creating vhost {name!r}")
            _check(
                client.put(
                    f"/api/permissions/{path}/{user}",
                    json={"configure": ".*", "write": ".*", "read": ".*"},
                ),
                f"granting {broker.username!r} permissions on vhost {name!r}",
            )
        except httpx.HTTPError as exc:
            raise BrokerError(f"creating vhost {name!r} on {broker!r}: {exc}") from exc
    return TestVhost(name=name, broker=broker)


def _vhost_call(broker: Broker, method: str, name: str, doing: str) -> bool:
    """``method`` on the vhost's API resource; False when the vhost does not exist."""
    with httpx.Client(base_url=broker.management_url, auth=broker.auth, timeout=30.0) as client:
        try:
            response = client.request(method, f"/api/vhosts/{quote(name, safe='')}")
        except httpx.HTTPError as exc:
            raise BrokerError(f"{doing} vhost {name!r} on {broker!r}: {exc}") from exc
    if response.status_code == 404:
        return False
    _check(response, f"{doing} vhost {name!r}")
    return True


def delete_vhost(broker: Broker, name: str) -> bool:
    """Delete a vhost and everything in it; False when it did not exist."""
    return _vhost_call(broker, "DELETE", name, "deleting")


def vhost_exists(broker: Broker, name: str) -> bool:
    return _vhost_call(broker, "GET", name, "reading")
