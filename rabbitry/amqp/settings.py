"""Connection settings of a client: URL (or a cluster's URLs), TLS, heartbeat, name, back-off."""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, TypedDict, Unpack
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from rabbitry.amqp.url_options import mask_query, plaintext_refusal, url_options
from rabbitry.errors import BrokerError, TLSHandshakeError
from rabbitry.uri import mask_text, mask_uri, mask_with, split_uris

if TYPE_CHECKING:  # imported when a URL asks for TLS: a plain connection never needs it
    import ssl

DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}

_TLS_KEYWORDS = ("ca_file", "cert_file", "key_file", "ssl_context", "verify")
"""Keyword options only a TLS connection uses: given with an amqp:// URL, they are an error."""

_HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH

# TLS alerts by which the broker refuses our client certificate (OpenSSL reason codes). Only
# these are permanent: a reset or an EOF may as well be a broker restarting.
_CLIENT_CERT_ALERTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": (
        "the broker requires a client certificate: pass cert_file and key_file"
        " (certfile= and keyfile= in the URL)"
    ),
    "SSLV3_ALERT_BAD_CERTIFICATE": (
        "the broker refused the client certificate: check cert_file and key_file"
    ),
    "TLSV1_ALERT_UNKNOWN_CA": (
        "the broker does not trust the CA that signed the client certificate (cert_file)"
    ),
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client certificate (cert_file) has expired",
}


class NodeOrder(StrEnum):
    """The order in which a client given several nodes tries them."""

    SHUFFLE = "shuffle"
    """A random order, drawn once per client: clients of one cluster spread over its nodes."""
    IN_ORDER = "in-order"
    """The order given: the first node is preferred, the others are fallbacks."""


@dataclass(frozen=True)
class Node:
    """One node of a cluster: where a socket connects."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6, as in a URL
        return f"{host}:{self.port}"


class ConnectionOptions(TypedDict, total=False):
    """What a client may set beside (or instead of) its URL's query options."""

    heartbeat: int | None
    connection_name: str | None
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    ssl_context: ssl.SSLContext | None
    verify: bool
    connect_timeout: float | None
    backoff: Backoff | None
    node_order: NodeOrder | str | None


DEFAULT_URL = "amqp://guest:guest@localhost:5672/%2F"
"""Where clients connect when given no URL: a local broker as its defaults are."""


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: ``initial`` doubling up to ``maximum``, +-``jitter``; stop after
    ``give_up_after`` seconds without a connection (None: never give up)."""

    initial: float = 0.1
    maximum: float = 5.0
    jitter: float = 0.2
    give_up_after: float | None = 120.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum < self.initial:
            raise ValueError("back-off needs 0 < initial <= maximum")
        if not 0 <= self.jitter < 1:
            raise ValueError("back-off jitter is a fraction between 0 and 1")

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * (2 ** min(attempt, 30)))
        return float(base * (1 + random.uniform(-self.jitter, self.jitter)))


def _tls_context(
    url: str, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    """The TLS context of an amqps URL; files that cannot be read are errors naming them."""
    import ssl

    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise BrokerError(
            f"AMQP URL {url!r}: CA file (cacertfile / ca_file) {ca_file!r} cannot be used"
            f" ({exc}): give the PEM file of the CA that signed the broker's certificate"
        ) from None
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise BrokerError(
                f"AMQP URL {url!r}: client certificate (certfile / cert_file) {cert_file!r} or its"
                f" key {key_file!r} cannot be used ({exc}): give PEM files of a certificate and"
                " its private key"
            ) from None
    return context


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to connect. Build it with ``from_url``; ``repr`` hides the password."""

    host: str = "localhost"
    port: int = 5672
    vhost: str = "/"
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None
    """The name sent as SNI and checked against the broker's certificate: the host's, or the
    URL's ``server_name_indication``; None with ``server_name_indication=disable``."""
    server_name_fixed: bool = False
    """Whether ``server_hostname`` came from ``server_name_indication`` (the same for every
    node of a cluster) rather than from the host."""
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 0
    """The most channels the client asks for (0: as many as the broker allows)."""
    connection_name: str | None = None
    connect_timeout: float = 10.0
    backoff: Backoff = field(default_factory=Backoff)
    external_auth: bool = False
    nodes: tuple[Node, ...] = ()
    """Every node of a cluster, when several URLs were given (``host``/``port`` are the
    first's); empty for one node. ``NodeWalk`` decides which one a connect tries."""
    node_order: NodeOrder = NodeOrder.SHUFFLE

    @classmethod
    def from_url(
        cls, url: str | Sequence[str], **options: Unpack[ConnectionOptions]
    ) -> ConnectionSettings:
        """``amqp[s]://user:pass@host:port/vhost?heartbeat=30&connection_name=x``; ``options``
        win over the URL's query.

        Several URLs (a sequence, or one string of comma-separated URLs) are the nodes of one
        cluster: they must agree on everything but host and port (the query options are read
        from the first), and connects walk them in ``node_order`` (shuffled by default)."""
        urls = split_uris(url) if isinstance(url, str) else [u.strip() for u in url]
        order = options.get("node_order") or NodeOrder.SHUFFLE
        try:
            node_order = NodeOrder(order)
        except ValueError:
            raise BrokerError(
                f"node_order={order!r} is not an order of nodes: use"
                f" {' or '.join(repr(o.value) for o in NodeOrder)}"
            ) from None
        if len(urls) <= 1:
            return cls._from_one(urls[0] if urls else "", options)
        each = [cls._from_one(u, options) for u in urls]
        first = each[0]
        for u, other in zip(urls[1:], each[1:], strict=True):
            differs = [
                name
                for name in ("username", "password", "vhost", "external_auth")
                if getattr(other, name) != getattr(first, name)
            ]
            if (other.tls is None) != (first.tls is None):
                differs.insert(0, "scheme")
            if differs:
                raise BrokerError(
                    f"AMQP URL {mask_uri(u)!r} differs from the first of the list"
                    f" ({mask_uri(urls[0])!r}) in its {', '.join(differs)}: the URLs of a list are"
                    " the nodes of one cluster and may differ only in host and port"
                )
        return replace(
            first, nodes=tuple(Node(s.host, s.port) for s in each), node_order=node_order
        )

    @classmethod
    def _from_one(cls, url: str, options: ConnectionOptions) -> ConnectionSettings:
        heartbeat, ca_file = options.get("heartbeat"), options.get("ca_file")
        cert_file, key_file = options.get("cert_file"), options.get("key_file")
        connect_timeout, backoff = options.get("connect_timeout"), options.get("backoff")
        ssl_context = options.get("ssl_context")
        shown = mask_query(mask_uri(url))
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise BrokerError(f"invalid AMQP URL {shown!r}: {mask_with(str(exc), url)}") from None
        if parts.scheme not in DEFAULT_PORTS:
            raise BrokerError(f"AMQP URL {shown!r} must start with amqp:// or amqps://")
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        query = url_options(parts.query, shown, parts.scheme)
        verify = options.get("verify")
        if parts.scheme == "amqp":
            # never plaintext where TLS was asked for: amqps:// is what turns it on
            given = [name for name in _TLS_KEYWORDS if options.get(name) is not None]
            if given:
                raise plaintext_refusal(shown, given)
        tls = ssl_context
        if parts.scheme == "amqps" and tls is None:
            key = key_file or query.keyfile
            cert = cert_file or query.certfile
            if key and not cert:
                raise BrokerError(
                    f"AMQP URL {shown!r}: a key file (keyfile / key_file) without its"
                    " certificate: give certfile (cert_file) too"
                )
            tls = _tls_context(shown, ca_file or query.cacertfile, cert, key)
            if verify is False or (verify is None and query.verify is False):
                import ssl

                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
            elif query.sni_disabled:
                tls.check_hostname = False  # no name sent, none checked: the chain still is
        hb = query.heartbeat if heartbeat is None else heartbeat
        timeout = query.connect_timeout if connect_timeout is None else connect_timeout
        return cls(
            host=parts.hostname or "localhost",
            port=port or DEFAULT_PORTS[parts.scheme],
            vhost=vhost,
            username=unquote(parts.username) if parts.username is not None else "guest",
            password=unquote(parts.password) if parts.password is not None else "guest",
            tls=tls,
            server_hostname=None if query.sni_disabled else query.server_name or parts.hostname,
            server_name_fixed=query.sni_disabled or query.server_name is not None,
            heartbeat=60 if hb is None else hb,
            frame_max=query.frame_max or cls.frame_max,
            channel_max=query.channel_max or 0,
            connection_name=options.get("connection_name") or query.connection_name,
            connect_timeout=10.0 if timeout is None else timeout,
            backoff=backoff or Backoff(),
            external_auth=query.external_auth,
        )

    @property
    def addresses(self) -> tuple[Node, ...]:
        """The nodes to connect to, one or more, in the order given."""
        return self.nodes or (Node(self.host, self.port),)

    def at(self, node: Node) -> ConnectionSettings:
        """The settings of one connection to ``node`` (itself when there is one node)."""
        if not self.nodes:
            return self
        name = self.server_hostname if self.server_name_fixed else node.host
        return replace(self, host=node.host, port=node.port, server_hostname=name, nodes=())

    @property
    def tls_server_name(self) -> str | None:
        """What a TLS connection sends as SNI and checks the certificate against (None: no
        TLS, or ``server_name_indication=disable``)."""
        if self.tls is None:
            return None
        return self.server_hostname if self.server_name_fixed else self.server_hostname or self.host

    def tls_failure(self, exc: BaseException) -> TLSHandshakeError | None:
        """The error to raise at once for a TLS failure that retrying cannot heal: a broker
        certificate that does not verify, a client certificate the broker refuses. None for any
        other failure (a reset or an EOF may be a broker restarting: those are retried)."""
        tls = sys.modules.get("ssl")  # not imported: no TLS connection was ever made
        if tls is None:
            return None
        if isinstance(exc, tls.SSLCertVerificationError):
            name = self.server_hostname or self.host
            if getattr(exc, "verify_code", None) == _HOSTNAME_MISMATCH:
                hint = (
                    f"the broker's certificate does not name {name!r}: connect with a host name"
                    " the certificate names"
                )
            else:
                hint = (
                    "check that ca_file (cacertfile= in the URL) holds the CA that signed the"
                    f" broker's certificate and that the certificate names {name!r}"
                )
        elif isinstance(exc, tls.SSLError):
            text = str(exc)
            reason = getattr(exc, "reason", None)
            found = next((k for k in _CLIENT_CERT_ALERTS if reason == k or k in text), None)
            if found is None:
                return None
            hint = _CLIENT_CERT_ALERTS[found]
        else:
            return None
        return TLSHandshakeError(
            f"TLS handshake with {self.display} failed: {mask_text(str(exc))}; {hint}"
        )

    @property
    def display(self) -> str:
        """Where this connects to, safe to log: ``amqp://user@host:port/vhost``, the vhost
        written as in a URL (``/`` is ``%2F``)."""
        scheme = "amqps" if self.tls else "amqp"
        vhost = quote(self.vhost, safe="")
        where = ",".join(str(node) for node in self.addresses)
        return f"{scheme}://{self.username}@{where}/{vhost}"


NO_VHOST_URL = "amqp://guest:guest@localhost:5672"
"""``DEFAULT_URL``'s broker naming no vhost: where a client asked for a vhost and given no URL
connects."""


def named_vhost(url: str | Sequence[str]) -> str | None:
    """The vhost a URL names in its path (percent-decoded: ``%2F`` is ``/``); None when it
    names none (no path, or a bare ``/``). Of a cluster's list, the first one any URL names."""
    urls = split_uris(url) if isinstance(url, str) else list(url)
    for one in urls:
        try:
            path = urlsplit(one.strip()).path
        except ValueError:
            continue  # from_url reports the broken URL
        if len(path) > 1:
            return unquote(path[1:])
    return None


def url_for_vhost(url: str | None, vhost: str | None) -> str:
    """The URL (every URL of a cluster's list) of a client asked for ``vhost`` at ``url``: the
    one rule of every client (``Publisher``, ``AsyncPublisher``, ``from_spec``, workers, the
    Spark sink, ``rabbitry worker run``).

    A URL naming no vhost (no path, or a bare ``/``) is given ``vhost``; a URL naming ``vhost``
    stays as it is; a URL naming another vhost is a ``BrokerError`` naming both (the password
    masked): a message meant for one vhost must never be published into or consumed from
    another. ``vhost`` None: the URL as it is (its vhost, ``/`` when it names none). No URL is
    a local broker naming no vhost."""
    given = url or NO_VHOST_URL
    named = named_vhost(given)
    if vhost is None or vhost == named:
        return given
    if named is not None:
        raise BrokerError(
            f"the AMQP URL {mask_uri(given)!r} names vhost {named!r}, but vhost {vhost!r} was"
            " asked for: drop the vhost from the URL (its path) or make it"
            f" /{quote(vhost, safe='')}"
        )
    path = "/" + quote(vhost, safe="")
    return ",".join(
        urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
        for parts in map(urlsplit, split_uris(given))
    )


def settings_for_vhost(
    url: str | ConnectionSettings | None,
    vhost: str | None,
    **options: Unpack[ConnectionOptions],
) -> ConnectionSettings:
    """``url_for_vhost``'s rule for clients that also take ready ``ConnectionSettings`` (which
    name their ``vhost``): the settings to connect with, ``options`` applied to a URL."""
    if not isinstance(url, ConnectionSettings):
        return ConnectionSettings.from_url(url_for_vhost(url, vhost), **options)
    if vhost is not None and vhost != url.vhost:
        raise BrokerError(
            f"the connection settings name vhost {url.vhost!r} ({url.display}), but vhost"
            f" {vhost!r} was asked for: give settings of vhost {vhost!r} or a URL"
        )
    return url
