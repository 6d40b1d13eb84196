"""Masking credentials in every URI rabbitry shows or logs."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@"
)


def with_password(uris: str | list[str], password: str | None) -> list[str]:
    """The URIs, with ``password`` put into each (percent-encoded; the user, guest when none,
    kept): how a spec keeps a federation upstream's or a shovel's password out of its URI."""
    listed = [uris] if isinstance(uris, str) else list(uris)
    if password is None:
        return listed
    secret = quote(password, safe="")
    out = []
    for uri in listed:
        parts = urlsplit(uri)
        user = quote(parts.username or "", safe="") if parts.username is not None else "guest"
        host = parts.netloc.rpartition("@")[2]
        out.append(urlunsplit((parts.scheme, f"{user}:{secret}@{host}", *parts[2:])))
    return out


_NEXT_URI = re.compile(r"\s*,\s*(?=[a-zA-Z][a-zA-Z0-9+.-]*://)")


def split_uris(text: str) -> list[str]:
    """The URIs of a comma-separated list, e.g. one node of a cluster each:
    ``amqp://u:p@a,amqp://u:p@b`` -> two URIs.

    A comma splits only where a new URI (``scheme://``) follows it, so a single URI with commas
    in its password or query stays whole; a trailing comma is ignored."""
    return [part for part in _NEXT_URI.split(text.strip().rstrip(",").strip()) if part]


def mask_uri(uri: str) -> str:
    """``amqp://user:secret@host`` -> ``amqp://user:***@host``; other text is left alone.
    A comma-separated list (``split_uris``) has every URI's password masked.

    Never raises: a URI too broken to parse still gets its password masked.
    """
    listed = split_uris(uri)
    if len(listed) > 1:
        return ",".join(_mask_one(item) for item in listed)
    return _mask_one(uri)


def _mask_one(uri: str) -> str:
    try:
        parts = urlsplit(uri)
    except ValueError:
        return mask_text(uri)
    if parts.password is None:
        return uri
    # Keep the host part exactly as written (port text, IPv6 brackets): only userinfo changes.
    _userinfo, _, hostport = parts.netloc.rpartition("@")
    netloc = f"{parts.username or ''}:***@{hostport}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def mask_text(text: str) -> str:
    """Mask the password of every URI found inside free text (error messages, logs)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)


_SECRET_KEYS = ("password", "passphrase", "secret", "token")


def mask_value(value: object) -> object:
    """``value`` with every URI password masked and every password-like key's value hidden,
    inside strings, mappings, lists and tuples (for ``repr`` of models holding them)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {
            key: "***"
            if isinstance(key, str)
            and any(word in key.lower() for word in _SECRET_KEYS)
            and value[key] is not None
            else mask_value(value[key])
            for key in value
        }
    if isinstance(value, list | tuple):
        return type(value)(mask_value(item) for item in value)
    return value
