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


def mask_uri(uri: str) -> str:
    """``amqp://user:secret@host`` -> ``amqp://user:***@host``; other text is left alone.

    Never raises: a URI too broken to parse still gets its password masked.
    """
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
