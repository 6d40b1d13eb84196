"""Where the broker is: flags, then environment, then the spec, then localhost defaults.

One URL is enough: the other is derived from its host and credentials (AMQP 5672 <-> management
15672; amqps/https use 5671/15671), and the log says so (``-v``).

The two URLs of one command name one broker: a URL given as an argument (``--url``) never pairs
with a management URL from the environment that names another host, nor the other way round;
that is an error, not a plan made against another broker. URLs from one source (both given,
both in the environment, both in the spec) may name different hosts (a load balancer in front
of the management API).

A cluster without a load balancer is given as several URLs, comma-separated in one value
(``RABBITRY_URL=amqp://u:p@node1,amqp://u:p@node2``) or listed in the spec's ``broker.url``:
clients walk them (``rabbitry.amqp.reconnect``) and management calls move on to the next node's
API when one does not answer. Derived URLs keep the list, one per node.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from rabbitry.errors import BrokerError
from rabbitry.uri import mask_uri, split_uris, url_problem

if TYPE_CHECKING:
    from rabbitry.management.client import ManagementClient

logger = logging.getLogger("rabbitry.endpoints")

DEFAULT_AMQP_URL = "amqp://guest:guest@localhost:5672/"
DEFAULT_MANAGEMENT_URL = "http://guest:guest@localhost:15672"


@dataclass(frozen=True)
class Endpoints:
    """The AMQP URL (clients, exact queue counts) and the management URL (provisioning), with
    how the management API's TLS certificate is checked: ``verify`` is True (the system's
    trusted CAs), a CA bundle's path, or False (``--insecure``: not checked)."""

    amqp_url: str
    management_url: str
    verify: bool | str = True
    unknown_management: str = field(default="", compare=False, repr=False)
    """Why ``management_url`` is only a guess (derived from an AMQP URL on a port that is not
    the default); ``management()`` refuses it then rather than reach another broker."""

    def __repr__(self) -> str:
        amqp, mgmt = mask_uri(self.amqp_url), mask_uri(self.management_url)
        tls = "" if self.verify is True else f", verify={self.verify!r}"
        return f"Endpoints(amqp_url={amqp!r}, management_url={mgmt!r}{tls})"

    def management(self, **options: Any) -> ManagementClient:
        """A management API client for this broker (the HTTP client loads only here)."""
        from rabbitry.management.client import ManagementClient

        if self.unknown_management:
            raise BrokerError(self.unknown_management)
        return ManagementClient(self.management_url, verify=self.verify, **options)

    def amqp_url_for(self, vhost: str) -> str:
        """The AMQP URL (every URL of a list) with its path set to ``vhost`` (``/`` is encoded
        as ``%2F``)."""
        path = "/" + quote(vhost, safe="")
        return ",".join(
            urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
            for parts in map(urlsplit, split_uris(self.amqp_url))
        )


def _swap_each(url: str, scheme_map: Mapping[str, tuple[str, int]]) -> str:
    return ",".join(_swap(one, scheme_map) for one in split_uris(url))


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
    return _swap_each(url, {"amqp": ("http", 15672), "amqps": ("https", 15671)})


def amqp_from_management(url: str) -> str:
    return _swap_each(url, {"http": ("amqp", 5672), "https": ("amqps", 5671)})


def resolve_endpoints(
    url: str | None = None,
    management_url: str | None = None,
    *,
    spec_url: str | list[str] | None = None,
    spec_management_url: str | list[str] | None = None,
    environ: Mapping[str, str] | None = None,
    ca_file: str | None = None,
    insecure: bool | None = None,
) -> Endpoints:
    """The broker's endpoints: arguments, then ``RABBITRY_URL`` / ``RABBITRY_MANAGEMENT_URL``
    (and ``RABBITRY_CA_FILE`` / ``RABBITRY_INSECURE``), then the spec, then localhost. An
    argument and an environment variable naming different hosts are a ``BrokerError``."""
    env = os.environ if environ is None else environ
    verify = _verify(ca_file or env.get("RABBITRY_CA_FILE") or None, insecure, env)
    (amqp, amqp_from), (mgmt, mgmt_from) = _given_urls(
        url, management_url, spec_url, spec_management_url, env
    )
    if amqp is None and mgmt is None:
        logger.info(
            "no broker given (--url, RABBITRY_URL, broker.url): AMQP %s, management %s",
            mask_uri(DEFAULT_AMQP_URL),
            mask_uri(DEFAULT_MANAGEMENT_URL),
        )
        return Endpoints(DEFAULT_AMQP_URL, DEFAULT_MANAGEMENT_URL, verify)
    unknown = ""
    if amqp is not None and mgmt is not None:
        check_pairing(amqp, amqp_from, mgmt, mgmt_from)
        logger.info(
            "AMQP URL %s (%s), management URL %s (%s)",
            mask_uri(amqp),
            amqp_from,
            mask_uri(mgmt),
            mgmt_from,
        )
    elif mgmt is None:
        assert amqp is not None
        mgmt, unknown = _management_derived(amqp, amqp_from)
    else:
        amqp = _amqp_derived(mgmt, mgmt_from)
    _check_ca_file_is_for_https(verify, mgmt)
    return Endpoints(amqp, mgmt, verify, unknown)


_Given = tuple[str | None, str]
"""A URL as given (None: not given) and where it came from."""


def _given_urls(
    url: str | None,
    management_url: str | None,
    spec_url: str | list[str] | None,
    spec_management_url: str | list[str] | None,
    env: Mapping[str, str],
) -> tuple[_Given, _Given]:
    """The AMQP and the management URL of the first source that gives one (arguments, then
    the environment, each URL on its own; else the spec), each checked."""
    amqp, amqp_from = _first((url, "--url"), (env.get("RABBITRY_URL"), "RABBITRY_URL"))
    mgmt, mgmt_from = _first(
        (management_url, "--management-url"),
        (env.get("RABBITRY_MANAGEMENT_URL"), "RABBITRY_MANAGEMENT_URL"),
    )
    if amqp is None and mgmt is None:
        amqp, mgmt = _joined(spec_url), _joined(spec_management_url)
        amqp_from, mgmt_from = "the spec's broker.url", "the spec's broker.management_url"
    if amqp is not None:
        check_url(amqp, ("amqp", "amqps"), "AMQP URL (--url, RABBITRY_URL, broker.url)")
    if mgmt is not None:
        check_url(
            mgmt,
            ("http", "https"),
            "management URL (--management-url, RABBITRY_MANAGEMENT_URL, broker.management_url)",
        )
    return (amqp, amqp_from), (mgmt, mgmt_from)


def _management_derived(amqp: str, amqp_from: str) -> tuple[str, str]:
    """The management URL derived from the AMQP URL, and why it is only a guess ("" when it
    is not: the AMQP URL is on its default port)."""
    mgmt = management_from_amqp(amqp)
    # an AMQP port moved (a container's mapped port) says nothing of where the management
    # API went: 15672 on that host may be another broker's
    moved = not _default_ports(amqp)
    unknown = ""
    if moved:
        unknown = (
            f"the management URL {mask_uri(mgmt)!r} would be a guess: the AMQP URL"
            f" {mask_uri(amqp)!r} ({amqp_from}) is not on port 5672 (5671), so where its"
            " broker's management API listens is not known (15672 on that host may be"
            " another broker's): give --management-url (RABBITRY_MANAGEMENT_URL,"
            " management_url=) as well"
        )
    logger.info(
        "management URL %s derived from the AMQP URL %s (%s)%s: give --management-url"
        " (RABBITRY_MANAGEMENT_URL) if the management API listens elsewhere",
        mask_uri(mgmt),
        mask_uri(amqp),
        amqp_from,
        ", whose port is not the default" if moved else "",
    )
    return mgmt, unknown


def _amqp_derived(mgmt: str, mgmt_from: str) -> str:
    """The AMQP URL derived from the management URL."""
    amqp = amqp_from_management(mgmt)
    logger.info(
        "AMQP URL %s derived from the management URL %s (%s): give --url (RABBITRY_URL)"
        " if AMQP listens elsewhere",
        mask_uri(amqp),
        mask_uri(mgmt),
        mgmt_from,
    )
    return amqp


def _check_ca_file_is_for_https(verify: bool | str, mgmt: str) -> None:
    """A CA file checks the management API's TLS: refuse one for a plaintext URL."""
    if isinstance(verify, str) and not any(
        one.lower().startswith("https://") for one in split_uris(mgmt)
    ):
        raise BrokerError(
            f"--ca-file (RABBITRY_CA_FILE) {verify!r} is for the management API's TLS, but the"
            f" management URL {mask_uri(mgmt)!r} is plaintext (http://): use https:// (port"
            " 15671), or leave the CA file out"
        )


def _default_ports(url: str) -> bool:
    """Whether every AMQP URL of a list uses its scheme's default port."""
    return all(
        urlsplit(one).port in (None, {"amqp": 5672, "amqps": 5671}.get(urlsplit(one).scheme))
        for one in split_uris(url)
    )


def _first(*candidates: tuple[str | None, str]) -> tuple[str | None, str]:
    """The first value given (an empty one is not) and where it came from."""
    for value, source in candidates:
        if value:
            return value, source
    return None, ""


_ENVIRONMENT = ("RABBITRY_URL", "RABBITRY_MANAGEMENT_URL")
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def hosts_of(url: str) -> set[str]:
    """The hosts a URL (every URL of a list) names, loopback names as one."""
    hosts = set()
    for one in split_uris(url):
        host = (urlsplit(one).hostname or "localhost").lower()
        hosts.add("localhost" if host in _LOOPBACK else host)
    return hosts


def check_pairing(amqp: str, amqp_from: str, mgmt: str, mgmt_from: str) -> None:
    """Refuse an AMQP and a management URL of different sources, one given as an argument and
    the other from the environment, that share no host: they would pair two brokers (a plan
    made against one, its messages counted on the other)."""
    if (amqp_from in _ENVIRONMENT) == (mgmt_from in _ENVIRONMENT):
        return  # one source: both given, or both set in the environment
    amqp_hosts, mgmt_hosts = hosts_of(amqp), hosts_of(mgmt)
    if amqp_hosts & mgmt_hosts:
        return
    given, other = (
        (amqp_from, mgmt_from) if amqp_from not in _ENVIRONMENT else (mgmt_from, amqp_from)
    )
    raise BrokerError(
        f"the AMQP URL {mask_uri(amqp)!r} ({amqp_from}) and the management URL"
        f" {mask_uri(mgmt)!r} ({mgmt_from}) name different hosts"
        f" ({', '.join(sorted(amqp_hosts))} and {', '.join(sorted(mgmt_hosts))}): one command"
        f" works on one broker; give the other URL of the broker of {given} as well, or unset"
        f" {other} to derive it from {given}"
    )


def check_same_broker(
    endpoints: Endpoints, amqp_cluster: str | None, management_cluster: str | None
) -> None:
    """Refuse endpoints whose AMQP side and management API answer for different clusters.

    Hosts alone cannot tell two brokers on one host apart (127.0.0.1:5672 with :15672, and
    :35672 with :45672): the cluster name each side gives for itself can (AMQP
    ``connection.start``'s ``cluster_name``, the management API's ``/api/overview``). Compared
    only when both are known: an older broker or a management read that failed says nothing."""
    if not amqp_cluster or not management_cluster or amqp_cluster == management_cluster:
        return
    raise BrokerError(
        f"the AMQP URL {mask_uri(endpoints.amqp_url)!r} reaches cluster {amqp_cluster!r} but the"
        f" management URL {mask_uri(endpoints.management_url)!r} answers for cluster"
        f" {management_cluster!r}: they are two brokers, and one command works on one; pass the"
        " management URL of the same broker (--management-url or RABBITRY_MANAGEMENT_URL), or"
        " unset RABBITRY_MANAGEMENT_URL to derive it from --url"
    )


def _joined(urls: str | list[str] | None) -> str | None:
    """A spec's URL or list of URLs as one comma-separated value (None when there is none)."""
    if isinstance(urls, list):
        return ",".join(u.strip() for u in urls if u.strip()) or None
    return urls


def check_url(url: str, schemes: tuple[str, ...], what: str) -> None:
    """Raise a ``BrokerError`` naming ``what`` when ``url`` (every URL of a comma-separated
    list) cannot be parsed or has another scheme; the password never appears in the message."""
    problem = url_problem(url, schemes, what)
    if problem is not None:
        raise BrokerError(problem)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def _verify(ca_file: str | None, insecure: bool | None, env: Mapping[str, str]) -> bool | str:
    if insecure is None:
        value = env.get("RABBITRY_INSECURE", "").strip().lower()
        if value not in _TRUE | _FALSE:
            raise BrokerError(
                f"RABBITRY_INSECURE={value!r} is neither true nor false: set it to 1 (do not"
                " check the management API's certificate) or 0, or unset it"
            )
        insecure = value in _TRUE
    if insecure and ca_file:
        raise BrokerError(
            "--insecure and --ca-file (or RABBITRY_INSECURE and RABBITRY_CA_FILE) contradict"
            " each other: give the CA file to check the certificate, or --insecure to skip it"
        )
    if insecure:
        return False
    if ca_file:
        if not os.path.isfile(ca_file):
            raise BrokerError(
                f"CA file {ca_file!r} (--ca-file / RABBITRY_CA_FILE) does not exist or is not a"
                " file: give the PEM bundle of the CA that signed the management API's certificate"
            )
        return ca_file
    return True
