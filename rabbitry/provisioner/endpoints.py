"""Where the broker is: flags, then environment, then the spec, then localhost defaults.

One URL is enough: the other is derived from its host and credentials (AMQP 5672 <-> management
15672; amqps/https use 5671/15671).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

from rabbitry.uri import mask_uri

DEFAULT_AMQP_URL = "amqp://guest:guest@localhost:5672/"
DEFAULT_MANAGEMENT_URL = "http://guest:guest@localhost:15672"


@dataclass(frozen=True)
class Endpoints:
    """The AMQP URL (clients, exact queue counts) and the management URL (provisioning)."""

    amqp_url: str
    management_url: str

    def __repr__(self) -> str:
        amqp, mgmt = mask_uri(self.amqp_url), mask_uri(self.management_url)
        return f"Endpoints(amqp_url={amqp!r}, management_url={mgmt!r})"

    def amqp_url_for(self, vhost: str) -> str:
        """The AMQP URL with its path set to ``vhost`` (``/`` is encoded as ``%2F``)."""
        parts = urlsplit(self.amqp_url)
        return urlunsplit(
            (parts.scheme, parts.netloc, "/" + quote(vhost, safe=""), parts.query, "")
        )


def _swap(url: str, scheme_map: Mapping[str, tuple[str, int]]) -> str:
    parts = urlsplit(url)
    scheme, port = scheme_map.get(parts.scheme, next(iter(scheme_map.values())))
    userinfo = ""
    if parts.username is not None:
        userinfo = (
            parts.username + (f":{parts.password}" if parts.password is not None else "") + "@"
        )
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    path = "/" if scheme.startswith("amqp") else ""
    return urlunsplit((scheme, f"{userinfo}{host}:{port}", path, "", ""))


def management_from_amqp(url: str) -> str:
    return _swap(url, {"amqp": ("http", 15672), "amqps": ("https", 15671)})


def amqp_from_management(url: str) -> str:
    return _swap(url, {"http": ("amqp", 5672), "https": ("amqps", 5671)})


def resolve_endpoints(
    url: str | None = None,
    management_url: str | None = None,
    *,
    spec_url: str | None = None,
    spec_management_url: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Endpoints:
    env = os.environ if environ is None else environ
    amqp = url or env.get("RABBITRY_URL") or None
    mgmt = management_url or env.get("RABBITRY_MANAGEMENT_URL") or None
    if amqp is None and mgmt is None:
        amqp, mgmt = spec_url, spec_management_url
    if amqp is None and mgmt is None:
        return Endpoints(DEFAULT_AMQP_URL, DEFAULT_MANAGEMENT_URL)
    if mgmt is None:
        assert amqp is not None
        mgmt = management_from_amqp(amqp)
    if amqp is None:
        amqp = amqp_from_management(mgmt)
    return Endpoints(amqp, mgmt)
