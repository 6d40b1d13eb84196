"""A management API URL as the client takes it: its node's base, user and password apart, a
path joined under its API, and the certificates it trusts. No request is made here."""

from __future__ import annotations

import ssl
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from rabbitry.errors import BrokerError
from rabbitry.uri import mask_uri, mask_with, path_segment

q = path_segment
"""Percent-encode one path segment (``/`` included: it is the default vhost's name)."""


def api_url(node: str, path: str) -> httpx.URL:
    """``path`` under the API of ``node``, joined as the client joins it to its base URL
    (percent-encoded segments such as ``%2F`` kept as they are)."""
    base = httpx.URL(node + "/api/")
    return base.copy_with(raw_path=base.raw_path + httpx.URL(path).raw_path.lstrip(b"/"))


def _named_options(query: str, fragment: str) -> str:
    """What an error shows of a URL's query or fragment: the option names, never their values
    (a value may be a secret)."""
    if not query:
        return "a #fragment"
    return "?" + "&".join(piece.partition("=")[0] for piece in query.split("&") if piece)


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``http://u:p@h:15672/`` -> (``http://h:15672``, u, p)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # an unclosed [ipv6], a port that is not a number
        raise BrokerError(
            f"management URL {mask_uri(url)!r} is not a URL ({mask_with(str(exc), url)}):"
            " write it like"
            " http://user:password@host:15672"
        ) from None
    if parts.scheme not in ("http", "https"):
        raise BrokerError(f"management URL {mask_uri(url)!r} must start with http:// or https://")
    if parts.query or parts.fragment:
        # dropped, they would be ignored: a TLS option there would leave the API in plaintext
        raise BrokerError(
            f"management URL {mask_uri(url)!r} has a query or fragment"
            f" ({_named_options(parts.query, parts.fragment)}): the management"
            " API client takes no URL options; for TLS use https:// with --ca-file"
            " (RABBITRY_CA_FILE) or --insecure (RABBITRY_INSECURE)"
        )
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    # userinfo is percent-encoded in a URL (a password with @ or / in it): decode it
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return base, username, password


def trust(verify: bool | str) -> bool | ssl.SSLContext:
    """``verify`` as httpx takes it: a CA bundle's path becomes a context that trusts it."""
    if not isinstance(verify, str):
        return verify
    try:
        return ssl.create_default_context(cafile=verify)
    except (OSError, ssl.SSLError) as exc:
        raise BrokerError(
            f"CA file {verify!r} cannot be used ({exc}): give a PEM file with the certificate of"
            " the CA that signed the management API's certificate"
        ) from None


__all__ = ["api_url", "q", "split_credentials", "trust"]
