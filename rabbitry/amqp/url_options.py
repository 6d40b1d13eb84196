"""The query options of an AMQP URL, read as RabbitMQ documents them (its URI query parameters
guide, and the Erlang client's ``amqp_uri``, which federation and shovel URIs go through too).

Every option is checked: one rabbitry does not know, or one it knows but cannot honour, is an
error naming it, never ignored. TLS options are collected apart (``tls_given``), so that a
plain ``amqp://`` URL carrying one is refused by the caller instead of connecting in plaintext.

- ``heartbeat``: seconds between heartbeats to negotiate (0: none);
- ``connection_timeout``: milliseconds to wait for the TCP connection (the guide's unit);
- ``channel_max``, ``frame_max``: the client's limits, negotiated down with the broker's;
- ``auth_mechanism``: ``plain`` (default) or ``external`` (log in by the client certificate);
- ``connection_name``: rabbitry's own, the name the management UI shows;
- ``cacertfile``, ``certfile``, ``keyfile``: PEM files of the CA that signed the broker's
  certificate, and of the client's certificate and key;
- ``verify``: ``verify_peer`` (default) or ``verify_none``;
- ``server_name_indication``: the name sent as SNI and checked against the broker's
  certificate (default: the host's); ``disable``: none sent, none checked (the chain still is);
- ``fail_if_no_peer_cert``: ``true`` or ``false``, a server's option: checked, and nothing for
  a client to do;
- ``customize_hostname_check``: ``https`` only, the check Python always makes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from rabbitry.errors import BrokerError

__all__ = ["TLS_OPTIONS", "UrlOptions", "mask_query", "plaintext_refusal", "url_options"]

TLS_OPTIONS = frozenset(
    {
        "cacertfile",
        "certfile",
        "keyfile",
        "verify",
        "server_name_indication",
        "fail_if_no_peer_cert",
        "customize_hostname_check",
        "depth",
        "password",
    }
)
"""Options that only a TLS (``amqps://``) connection has a use for."""

_OTHER_OPTIONS = frozenset(
    {"heartbeat", "connection_timeout", "channel_max", "frame_max", "auth_mechanism"}
    | {"connection_name"}  # rabbitry's own
)

_REFUSED = {
    "depth": (
        "rabbitry's client cannot bound the certificate chain's depth (Python's ssl has no such"
        " setting): leave it out"
    ),
    "password": (
        "a key file's passphrase in the URL would be shown wherever the URL is: decrypt the key"
        " (openssl pkey -in KEY -out KEY.pem), or pass a ready ssl_context"
    ),
}
"""Options of the Erlang client that rabbitry knows but cannot honour, and what to do."""

_MECHANISMS = {"plain": False, "external": True}
"""SASL mechanisms rabbitry's client speaks: whether each is EXTERNAL."""

FRAME_MIN = 4096
"""The smallest frame_max AMQP 0-9-1 allows (its frame-min-size)."""


@dataclass(frozen=True)
class UrlOptions:
    """What an AMQP URL's query says; None where it says nothing."""

    heartbeat: int | None = None
    connect_timeout: float | None = None
    """Seconds (the URL gives milliseconds)."""
    channel_max: int | None = None
    frame_max: int | None = None
    external_auth: bool = False
    connection_name: str | None = None
    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool | None = None
    server_name: str | None = None
    """``server_name_indication``: the name to send and to check, when not the host's."""
    sni_disabled: bool = False
    tls_given: tuple[str, ...] = field(default=())
    """The TLS options the query holds, in its order."""


_SECRET_OPTION = re.compile(r"([?&](?:password|passphrase)=)[^&#]*", re.IGNORECASE)


def mask_query(url: str) -> str:
    """``url`` with the value of a ``password`` query option (a key file's passphrase, as the
    Erlang client takes it) hidden: errors show the URL, and refuse that option."""
    return _SECRET_OPTION.sub(r"\1***", url)


def _pairs(query: str) -> list[tuple[str, str | None]]:
    """``a=1&b=%2Fx`` -> ``[("a", "1"), ("b", "/x")]``, percent-decoded; a ``+`` stays a
    ``+`` (as the Erlang client reads it: a path may hold one); a key without ``=`` has None."""
    out: list[tuple[str, str | None]] = []
    for piece in query.split("&"):
        if not piece:
            continue
        key, sep, value = piece.partition("=")
        out.append((unquote(key), unquote(value) if sep else None))
    return out


def plaintext_refusal(shown: str, given: list[str]) -> BrokerError:
    """The error for TLS options (``given``) asked of a plain ``amqp://`` URL."""
    return BrokerError(
        f"AMQP URL {shown!r} connects without TLS (amqp://), but asks for TLS with"
        f" {', '.join(given)}: use amqps:// (port 5671) for TLS, or leave the option out"
    )


def url_options(query: str, shown: str, scheme: str = "amqps") -> UrlOptions:
    """The options of ``query`` (the URL's text after ``?``); ``shown`` is the URL as errors
    name it (password masked). A ``BrokerError`` for an option that is unknown, given twice
    with two values, without a value, or with a value it cannot take, and for a TLS option
    when ``scheme`` is ``amqp``. Pure: no file is read (a driver can check a URL whose files
    exist only where it connects)."""
    options = _Query.read(query, shown)
    values = options.values
    timeout = options.integer("connection_timeout", 0, 86_400_000, "milliseconds")
    external = options.external_auth()
    options.one_of("fail_if_no_peer_cert", {"true": True, "false": False})  # a server's option
    if values.get("customize_hostname_check", "https") != "https":
        raise options.error(
            f"option customize_hostname_check={values['customize_hostname_check']!r} must be"
            " https (the host name check Python makes)"
        )
    sni = values.get("server_name_indication")
    tls_given = tuple(key for key in options.order if key in TLS_OPTIONS)
    if scheme == "amqp" and tls_given:
        raise plaintext_refusal(shown, list(tls_given))
    return UrlOptions(
        heartbeat=options.integer("heartbeat", 0, 65_535, "seconds"),
        connect_timeout=None if timeout is None else timeout / 1000,
        channel_max=options.integer("channel_max", 0, 65_535, "channels"),
        frame_max=options.integer("frame_max", FRAME_MIN, 2**32 - 1, "bytes"),
        external_auth=external,
        connection_name=values.get("connection_name"),
        cacertfile=values.get("cacertfile"),
        certfile=values.get("certfile"),
        keyfile=values.get("keyfile"),
        verify=options.one_of("verify", {"verify_peer": True, "verify_none": False}),
        server_name=None if sni in (None, "disable") else sni,
        sni_disabled=sni == "disable",
        tls_given=tls_given,
    )


@dataclass(frozen=True)
class _Query:
    """A URL's options by name (each known, given once, with a value) and in their order."""

    shown: str
    values: dict[str, str]
    order: list[str]

    @classmethod
    def read(cls, query: str, shown: str) -> _Query:
        query_options = cls(shown, {}, [])
        values, order = query_options.values, query_options.order
        for key, value in _pairs(query):
            if key not in TLS_OPTIONS and key not in _OTHER_OPTIONS:
                known = ", ".join(sorted((TLS_OPTIONS | _OTHER_OPTIONS) - set(_REFUSED)))
                raise query_options.error(
                    f"unknown option {key!r}: the options an AMQP URL takes are {known}"
                )
            if value is None or value == "":
                raise query_options.error(
                    f"option {key} has no value: write {key}=VALUE, or leave it out"
                )
            if key in values and values[key] != value:
                raise query_options.error(
                    f"option {key} is given twice, as {values[key]!r} and {value!r}: keep one"
                )
            if key not in values:
                order.append(key)
            values[key] = value
        for key in order:
            if key in _REFUSED:
                raise query_options.error(f"option {key} is not supported: {_REFUSED[key]}")
        return query_options

    def error(self, text: str) -> BrokerError:
        return BrokerError(f"AMQP URL {self.shown!r}: {text}")

    def integer(self, key: str, low: int, high: int, unit: str) -> int | None:
        text = self.values.get(key)
        if text is None:
            return None
        try:
            number = int(text)
        except ValueError:
            number = low - 1
        if not low <= number <= high:
            raise self.error(
                f"option {key}={text!r} must be a whole number of {unit}, {low} to {high}"
            )
        return number

    def one_of(self, key: str, choices: dict[str, bool]) -> bool | None:
        text = self.values.get(key)
        if text is None:
            return None
        if text not in choices:
            raise self.error(f"option {key}={text!r} must be {' or '.join(choices)}")
        return choices[text]

    def external_auth(self) -> bool:
        """Whether ``auth_mechanism`` asks for EXTERNAL (the client certificate)."""
        mechanism = self.values.get("auth_mechanism")
        if mechanism is None:
            return False
        name = mechanism.lower().removeprefix("amqp_auth_mechanisms:")
        if name not in _MECHANISMS:
            raise self.error(
                f"option auth_mechanism={mechanism!r} is not one rabbitry's client speaks: use"
                " plain (user and password) or external (the client certificate)"
            )
        return _MECHANISMS[name]
