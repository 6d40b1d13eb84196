"""Masking credentials in every URI rabbitry shows or logs."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@"
)


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
