"""The sink's options: parsed and checked on the driver, before any task starts.

Spark hands a data source its options as case-insensitive strings; ``SinkOptions.parse`` turns
them into typed values and rejects unknown names, bad values and contradictions with one
message that names the option and says what to write instead. Pure: the environment is passed
in, nothing connects anywhere.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import unquote, urlsplit

from rabbitry.amqp.settings import url_for_vhost
from rabbitry.amqp.url_options import mask_query, url_options
from rabbitry.errors import BrokerError, RabbitryError
from rabbitry.errors import SinkOptionError as SinkOptionError
from rabbitry.errors import SourceOptionError as SourceOptionError
from rabbitry.errors import SparkSinkError as SparkSinkError
from rabbitry.errors import SparkSourceError as SparkSourceError
from rabbitry.uri import mask_uri, mask_with, split_uris, with_password

DEFAULT_URL_ENV = "RABBITRY_URL"
DEFAULT_WINDOW = 512
MAX_WINDOW = 65535


OptionError = type[SinkOptionError] | type[SourceOptionError]
_N = TypeVar("_N", int, float)


# Option name -> one-line description (also what the unknown-option message lists).
OPTIONS: dict[str, str] = {
    "url": "broker URL amqp[s]://user:pass@host:port/vhost (prefer url_env: options may be"
    " shown); a cluster's nodes as comma-separated URLs",
    "url_env": f"environment variable holding the broker URL (default {DEFAULT_URL_ENV})",
    "password_env": "environment variable holding the password to put into the URL",
    "exchange": "exchange to publish to (default: the default exchange '')",
    "routing_key": "routing key for every row",
    "routing_key_column": "string column with each row's routing key",
    "body_column": "binary or string column with each row's body (default: the row as JSON)",
    "header_columns": "comma-separated columns sent as headers of the same names",
    "message_id_column": "string column with each row's message id (default: deterministic ids)",
    "id_prefix": "first part of the deterministic message ids (default: job or query id)",
    "content_type": "content type property (default: by body: bytes none, text/JSON their own)",
    "persistent": "true/false: delivery mode 2 or 1 (default true)",
    "priority": "priority property 0-255",
    "expiration": "per-message TTL in milliseconds",
    "delay_column": "numeric (seconds) or interval column: publish through the spec's delay levels",
    "delays": "name of the spec's delays entry for delay_column (default: the only one)",
    "spec": "rabbitry spec: exchanges and delays are resolved and checked against it",
    "spec_vars": "template variables of the spec: name=value pairs, comma-separated",
    "vhost": "vhost to publish into and of the spec to use (default: the URL's vhost); a URL"
    " naming another vhost is an error",
    "window": f"unconfirmed messages in flight per task (default {DEFAULT_WINDOW})",
    "mandatory": "true/false: an unroutable row fails its task (default true)",
    "confirm_timeout": "seconds to wait for a confirm before the task fails (default 30)",
    "check_exchange": "true/false: check on the broker that the exchange exists (default true)",
    "node_order": "shuffle or in-order: how tasks walk several URLs (default shuffle)",
    "connection_name": "connection name shown in the management UI (default rabbitry-spark)",
    "protocol": "stream, amqp or auto: write a stream or super stream over the stream protocol,"
    " exactly once (default auto: when the broker offers it and the target is a stream)",
    "stream_port": "the stream protocol's port (default: RABBITRY_STREAM_URL's when it names"
    " url's host, else 5552)",
    "traces": "true/false: W3C trace context in every row and a span per partition, when"
    " OpenTelemetry is configured on the executors (default false)",
}

# Options Spark itself passes along with the user's; they are not ours to reject.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class SinkOptions:
    """Every setting of one write, typed. ``url`` holds the password: never show it, show
    ``display_url``."""

    url: str = field(repr=False)
    exchange: str = ""
    routing_key: str = ""
    routing_key_column: str | None = None
    body_column: str | None = None
    header_columns: tuple[str, ...] = ()
    message_id_column: str | None = None
    id_prefix: str | None = None
    content_type: str | None = None
    persistent: bool = True
    priority: int | None = None
    expiration: int | None = None
    delay_column: str | None = None
    delays: str | None = None
    spec: str | None = None
    spec_vars: tuple[tuple[str, str], ...] = ()
    vhost: str | None = None
    window: int = DEFAULT_WINDOW
    mandatory: bool = True
    confirm_timeout: float = 30.0
    check_exchange: bool = True
    connection_name: str = "rabbitry-spark"
    traces: bool = False
    node_order: str = "shuffle"
    protocol: str = "auto"
    stream_port: int | None = None

    @property
    def display_url(self) -> str:
        return mask_uri(self.url)

    @property
    def url_vhost(self) -> str:
        path = urlsplit(split_uris(self.url)[0]).path
        return unquote(path[1:]) if len(path) > 1 else "/"

    @property
    def columns(self) -> dict[str, str]:
        """Column -> the option that names it."""
        named: dict[str, str] = {}
        for option in ("routing_key_column", "body_column", "message_id_column", "delay_column"):
            value = getattr(self, option)
            if value is not None:
                named[value] = option
        for column in self.header_columns:
            named.setdefault(column, "header_columns")
        return named

    @classmethod
    def parse(
        cls, options: Mapping[str, str], environ: Mapping[str, str] | None = None
    ) -> SinkOptions:
        """Typed options from Spark's strings; raises ``SinkOptionError`` naming the option."""
        env = os.environ if environ is None else environ
        given = known_options(options, OPTIONS, "sink", SinkOptionError)
        url = _resolve_url(given, env)
        try:  # the rule of every client: the URL names the vhost asked for, or none
            url = url_for_vhost(url, given.get("vhost") or None)
        except RabbitryError as exc:
            raise SinkOptionError(f"option vhost: {exc}") from None
        if "routing_key" in given and "routing_key_column" in given:
            raise SinkOptionError("give routing_key or routing_key_column, not both")
        delay_column = _column(given, "delay_column")
        exchange = given.get("exchange", "")
        if delay_column is not None and exchange:
            raise SinkOptionError(
                "delay_column sends rows through the spec's delay levels, which pick the exchange:"
                " leave out exchange and give the target address as routing key"
            )
        if delay_column is not None and "spec" not in given:
            raise SinkOptionError(
                "delay_column needs spec= (the rabbitry spec that declares the delay levels)"
            )
        if "spec_vars" in given and "spec" not in given:
            raise SinkOptionError("spec_vars are the variables of a spec: give spec= too")
        if "delays" in given and delay_column is None:
            raise SinkOptionError("delays names the delay levels for delay_column; give both")
        headers = tuple(c.strip() for c in given.get("header_columns", "").split(",") if c.strip())
        if len(set(headers)) != len(headers):
            raise SinkOptionError(f"header_columns names a column twice: {headers}")
        parsed = cls(
            url=url,
            exchange=exchange,
            routing_key=given.get("routing_key", ""),
            routing_key_column=_column(given, "routing_key_column"),
            body_column=_column(given, "body_column"),
            header_columns=headers,
            message_id_column=_column(given, "message_id_column"),
            id_prefix=given.get("id_prefix") or None,
            content_type=given.get("content_type") or None,
            persistent=_bool(given, "persistent", True),
            priority=_optional_int(given, "priority", 0, 255),
            expiration=_optional_int(given, "expiration", 0, 2**31 - 1),
            delay_column=delay_column,
            delays=given.get("delays") or None,
            spec=given.get("spec") or None,
            spec_vars=_pairs(given, "spec_vars"),
            vhost=given.get("vhost") or None,
            window=_int(given, "window", DEFAULT_WINDOW, 1, MAX_WINDOW),
            mandatory=_bool(given, "mandatory", True),
            confirm_timeout=_float(given, "confirm_timeout", 30.0),
            check_exchange=_bool(given, "check_exchange", True),
            connection_name=given.get("connection_name") or "rabbitry-spark",
            node_order=_choice(given, "node_order", ("shuffle", "in-order"), "shuffle"),
            traces=_bool(given, "traces", False),
            protocol=_choice(given, "protocol", ("auto", "stream", "amqp"), "auto"),
            stream_port=_optional_int(given, "stream_port", 1, 65535),
        )
        if parsed.id_prefix is not None and parsed.message_id_column is not None:
            raise SinkOptionError("give id_prefix or message_id_column, not both")
        if parsed.id_prefix is not None and not parsed.id_prefix.isprintable():
            raise SinkOptionError("id_prefix must be printable text")
        return parsed


def known_options(
    options: Mapping[str, str], known: Mapping[str, str], side: str, error: OptionError
) -> dict[str, str]:
    """The options by lower-case name; unknown ones raise ``error``, with a suggestion when
    one is close (Spark passes some of its own, which are let through)."""
    given = {k.lower(): v for k, v in options.items()}
    unknown = sorted(set(given) - set(known) - SPARK_OPTIONS)
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise error(
            f"unknown option(s) of the rabbitmq {side}: {', '.join(hints)}; "
            f"known: {', '.join(sorted(known))}"
        )
    return given


def _resolve_url(
    given: Mapping[str, str], env: Mapping[str, str], error: OptionError = SinkOptionError
) -> str:
    url = given.get("url")
    source = "option url"
    if not url:
        name = given.get("url_env") or DEFAULT_URL_ENV
        url = env.get(name)
        source = f"environment variable {name}"
        if not url:
            raise error(
                f"no broker URL: set the environment variable {name} (on the driver) or give"
                " url_env=<variable> (url= works too, but Spark may show options in plans)"
            )
    elif "url_env" in given:
        raise error("give url or url_env, not both")
    urls = split_uris(url)
    for one in urls:
        try:
            parts = urlsplit(one)
            _ = parts.port
        except ValueError as exc:
            raise error(
                f"{source}: invalid URL {mask_uri(one)!r}: {mask_with(str(exc), one)}"
            ) from None
        if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
            raise error(
                f"{source}: {mask_uri(one)!r} is not an amqp:// or amqps:// URL with a host"
            )
        try:  # its query options, as each partition's connection reads them (no file read)
            url_options(parts.query, mask_query(mask_uri(one)), parts.scheme)
        except BrokerError as exc:
            raise error(f"{source}: {exc}") from None
    password_env = given.get("password_env")
    if password_env:
        password = env.get(password_env)
        if password is None:
            raise error(
                f"password_env names the environment variable {password_env}, which is not set"
            )
        urls = with_password(urls, password)
    return ",".join(urls)


def _choice(given: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = given.get(name, default).strip().lower()
    if value not in choices:
        raise SinkOptionError(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def _column(
    given: Mapping[str, str], name: str, error: OptionError = SinkOptionError
) -> str | None:
    value = given.get(name)
    if value is None:
        return None
    value = value.strip()
    if not value:
        raise error(f"{name} is empty: give a column name or leave the option out")
    return value


def _pairs(
    given: Mapping[str, str], name: str, error: OptionError = SinkOptionError
) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in given.get(name, "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise error(f"{name} takes name=value pairs separated by commas, not {item!r}")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def _bool(
    given: Mapping[str, str], name: str, default: bool, error: OptionError = SinkOptionError
) -> bool:
    value = given.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise error(f"{name} must be true or false, not {value!r}")


def _number(
    given: Mapping[str, str], name: str, parse: Callable[[str], _N], kind: str, error: OptionError
) -> _N | None:
    """``name``'s value read by ``parse`` (None when not given); ``kind``: what it must be."""
    value = given.get(name)
    if value is None:
        return None
    try:
        return parse(value.strip())
    except ValueError:
        raise error(f"{name} must be {kind}, not {value!r}") from None


def _optional_int(
    given: Mapping[str, str], name: str, low: int, high: int, error: OptionError = SinkOptionError
) -> int | None:
    """``name`` as a whole number from ``low`` to ``high``; None when not given."""
    number = _number(given, name, int, "a whole number", error)
    if number is not None and not low <= number <= high:
        raise error(f"{name} must be between {low} and {high}, not {number}")
    return number


def _int(
    given: Mapping[str, str],
    name: str,
    default: int,
    low: int,
    high: int,
    error: OptionError = SinkOptionError,
) -> int:
    """``name`` as a whole number from ``low`` to ``high``; ``default`` when not given."""
    number = _optional_int(given, name, low, high, error)
    return default if number is None else number


def _float(
    given: Mapping[str, str], name: str, default: float, error: OptionError = SinkOptionError
) -> float:
    number = _number(given, name, float, "a number of seconds", error)
    if number is None:
        return default
    if not number > 0:
        raise error(f"{name} must be positive, not {given[name]!r}")
    return number
