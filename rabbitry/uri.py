"""Masking credentials in every URI rabbitry shows or logs.

One rule serves every string that may hold a URL (``mask_uri`` for a value known to be one,
``mask_text`` for free text such as an error message): wherever ``@`` follows text with a colon
in it (``user:secret@``), everything from that colon to the last ``@`` of the URL is hidden,
whatever comes before it (``amqp://``, ``amqps//`` with its colon forgotten, no scheme at all).
What follows the last ``@`` is the host; a colon there not followed by a port number
(``host:5672@user:secret``, the two halves swapped) hides all that follows it too, unless it is
an RFC 3339 time after a name without a colon (``job@2026-11-27T08:54:50Z``, an occurrence's
id). A comma-separated list is masked entry by entry, so one broken entry does not expose the
next. The rule masks
too much rather than too little: a ``user:word@`` that is no password at all is hidden too.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

MASK = "***"

_SCHEME = r"[a-zA-Z][a-zA-Z0-9+.-]*:?//"
"""A scheme and its slashes, the colon optional: ``amqps//host`` is a URL someone mistyped."""
_NEXT_URI = re.compile(rf"\s*,\s*(?={_SCHEME})")
_LEADING_SCHEME = re.compile(rf"[^:@/]*?{_SCHEME}")
"""A scheme at the start of a URL, perhaps after a label (``url=``) holding no ``:@/``."""
_DELIMITERS = " \t\n\r\f\v'\"<>`"
"""Free text is masked token by token: URLs hold no whitespace or quotes."""
_NEXT_DELIMITER = re.compile(r"[ \t\n\r\f\v'\"<>`]")
_PORT = re.compile(r"\d*")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?")
"""An RFC 3339 time after an ``@`` (``job@2026-11-27T08:54:50.000Z``, a periodic occurrence's
id): its colons are the time's, not a swapped ``user:secret``."""


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


def split_uris(text: str) -> list[str]:
    """The URIs of a comma-separated list, e.g. one node of a cluster each:
    ``amqp://u:p@a,amqp://u:p@b`` -> two URIs.

    A comma splits only where a new URI (``scheme://``, or ``scheme//`` missing its colon)
    follows it, so a single URI with commas in its password or query stays whole; a trailing
    comma is ignored."""
    return [part for part in _NEXT_URI.split(text.strip().rstrip(",").strip()) if part]


def mask_uri(uri: str) -> str:
    """``amqp://user:secret@host`` -> ``amqp://user:***@host``; other text is left alone.
    A comma-separated list (``split_uris``) has every entry masked on its own.

    Never raises: a URI too broken to parse still gets its password masked (the module's rule).
    """
    return _mask_entries(uri)


def mask_text(text: str) -> str:
    """Mask the password of every URI found inside free text (error messages, logs)."""
    at = text.find("@")
    if at < 0:
        return text
    # only the tokens around an "@" are looked at: a rendered spec of megabytes is masked
    # in a few C scans rather than one Python call per word
    out: list[str] = []
    done = 0
    while at >= 0:
        start = max(text.rfind(mark, done, at) for mark in _DELIMITERS) + 1
        start = max(start, done)
        after = _NEXT_DELIMITER.search(text, at)
        end = after.start() if after else len(text)
        out.append(text[done:start])
        out.append(_mask_entries(text[start:end]))
        done = end
        at = text.find("@", end)
    out.append(text[done:])
    return "".join(out)


def mask_with(text: str, *uris: str) -> str:
    """``text`` masked, and also every secret the rule finds in ``uris`` hidden wherever it
    appears: for messages that quote a piece of a URL without its ``@`` (``urlsplit`` names a
    port it cannot read, which in ``host:5672@user:secret`` is the password)."""
    masked = mask_text(text)
    for secret in sorted({s for uri in uris for s in secrets_in(uri)}, key=len, reverse=True):
        masked = masked.replace(secret, MASK)
    return masked


def url_problem(url: str, schemes: tuple[str, ...], what: str) -> str | None:
    """Why ``url`` (every URL of a comma-separated list) is not a URL of one of ``schemes``
    naming a host, for a message about ``what``; None when it is one. The password never
    appears in the answer."""
    example = f"{schemes[0]}://user:password@host:{15672 if schemes[0] == 'http' else 5672}"
    for one in split_uris(url) or [url]:
        try:
            parts = urlsplit(one)
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError as exc:
            reason = mask_with(str(exc), one)
            return f"{what} {mask_uri(one)!r} is not a URL ({reason}): write it like {example}"
        if parts.scheme not in schemes or not parts.netloc:
            return (
                f"{what} {mask_uri(one)!r} must start with"
                f" {' or '.join(s + '://' for s in schemes)} and name a host: write it like"
                f" {example}"
            )
    return None


def secrets_in(uri: str) -> list[str]:
    """The pieces of ``uri`` the rule hides (empty when it holds none)."""
    found: list[str] = []
    for entry in _entries(uri):
        _masked, hidden = _mask_one(entry)
        found.extend(piece for piece in hidden if piece)
    return found


def _entries(text: str) -> list[str]:
    return _NEXT_URI.split(text) if "," in text else [text]


def _mask_entries(text: str) -> str:
    if "@" not in text:
        return text
    if "," not in text:
        return _mask_one(text)[0]
    # keep the separators as written: only the entries change
    out, last = [], 0
    for sep in _NEXT_URI.finditer(text):
        out.append(_mask_one(text[last : sep.start()])[0])
        out.append(sep[0])
        last = sep.end()
    out.append(_mask_one(text[last:])[0])
    return "".join(out)


def _mask_one(entry: str) -> tuple[str, list[str]]:
    """``entry`` masked by the rule, and the pieces it hid."""
    at = entry.rfind("@")
    if at < 0:
        return entry, []
    # the user starts after a leading scheme (``amqp://``, ``amqps//``, ``url=amqp://``), else
    # at the start (``user:secret@host``; a ``//`` further on may be inside a password)
    scheme = _LEADING_SCHEME.match(entry, 0, at)
    start = scheme.end() if scheme else 0
    hidden: list[str] = []
    userinfo = entry[start:at]
    colon = userinfo.find(":")
    if colon >= 0:
        hidden.append(userinfo[colon + 1 :])
        userinfo = f"{userinfo[:colon]}:{MASK}"
    rest = entry[at + 1 :]
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if 0 <= found < end:
            end = found
    host, after = rest[:end], rest[end:]
    if not host.startswith("[") and not (colon < 0 and _TIMESTAMP.fullmatch(host)):
        # an IPv6 address keeps its colons, and so does a time after a name without a colon
        host_colon = host.find(":")
        if host_colon >= 0 and not _PORT.fullmatch(host[host_colon + 1 :]):
            # no port: the end of a swapped ``user:secret``, which may hold a ``/``
            hidden.append(host[host_colon + 1 :] + after)
            host, after = f"{host[:host_colon]}:{MASK}", ""
    return f"{entry[:start]}{userinfo}@{host}{after}", hidden


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


def path_segment(name: str) -> str:
    """One percent-encoded path segment of a URL (``/`` too: the default vhost's name), as the
    management API's paths and a kind's writes spell a vhost or an object's name."""
    return quote(name, safe="")
