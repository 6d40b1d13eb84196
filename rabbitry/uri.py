"""Masking credentials in every URI rabbitry shows or logs."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@"
)


def mask_uri(uri: str) -> str:
    """``amqp://user:secret@host`` -> ``amqp://user:***@host``; other text is left alone."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return mask_text(uri)
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def mask_text(text: str) -> str:
    """Mask the password of every URI found inside free text (error messages, logs)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
