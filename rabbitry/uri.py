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
