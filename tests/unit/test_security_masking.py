"""Passwords in URLs are never shown, whatever shape the URL has: one rule (``rabbitry.uri``)
for values known to be URLs and for free text that may quote one."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.uri import mask_text, mask_uri, mask_with, split_uris

MARK = "Zq"
"""Both ends of every generated password: no other generated part holds these letters."""

names = st.text("abcdefghijklmnopqrstuvwxy0123456789-.", min_size=1, max_size=8)
middles = st.text("0123456789!$&()*+,;=%/:?#[]-._~", max_size=10)
passwords = middles.map(lambda m: f"{MARK}{m}{MARK}")
schemes = st.sampled_from(["amqp", "amqps", "http", "https", ""])
separators = st.sampled_from(["://", "//", ":/", ":", ""])
ports = st.sampled_from(["", ":5672", ":15672", ":0"])
paths = st.sampled_from(["", "/", "/%2F", "/shop?heartbeat=10", "#x"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    """A URL holding a password, in one of the shapes people write (some broken)."""
    password = draw(passwords)
    user, host = draw(names), draw(names)
    if draw(st.booleans()):  # the usual order, scheme and colon present or not
        head = draw(schemes) + draw(separators)
        return f"{head}{user}:{password}@{host}{draw(ports)}{draw(paths)}"
    # host and port first, then the credentials (a password without '@' in it)
    return f"{host}{draw(ports)}@{user}:{password.replace('@', '')}"


@st.composite
def url_lists(draw: st.DrawFn) -> str:
    """A comma-separated list with a password in every entry, any entry possibly broken."""
    entries = draw(st.lists(urls(), min_size=1, max_size=4))
    return ",".join(f"amqp://{e}" if draw(st.booleans()) and "//" not in e else e for e in entries)


@settings(max_examples=400)
@given(url_lists())
def test_no_password_survives_masking_a_url_value(url: str) -> None:
    assert MARK not in mask_uri(url), url


@settings(max_examples=400)
@given(url_lists(), st.sampled_from(["{} refused", "cannot connect to {}: refused", "({})"]))
def test_no_password_survives_masking_text_that_quotes_a_url(url: str, shape: str) -> None:
    for quoted in (url, repr(url), json.dumps(url), json.dumps({"url": url})):
        text = shape.format(quoted)
        assert MARK not in mask_text(text), text


def test_a_url_without_the_colon_after_its_scheme_is_masked() -> None:
    assert mask_uri("amqps//user:pw@h") == "amqps//user:***@h"
    assert mask_text("bad URL 'http//admin:s3cret@h:15672'") == "bad URL 'http//admin:***@h:15672'"


def test_host_and_port_before_the_credentials_hide_both_halves() -> None:
    assert mask_uri("rabbit:5672@app:s3cret") == "rabbit:***@app:***"
    assert mask_uri("amqp://rabbit:5672@app:s3/cret") == "amqp://rabbit:***@app:***"


def test_each_entry_of_a_list_is_masked_even_after_a_broken_one() -> None:
    assert mask_uri("amqp://a:one@h1,amqps//b:two@h2,http//c:three@h3") == (
        "amqp://a:***@h1,amqps//b:***@h2,http//c:***@h3"
    )
    # an entry without a scheme is no entry of its own: its secrets are hidden with the last
    masked = mask_uri("amqp://a:one@h1,amqps//b:two@h2,c:5672@d:three")
    assert masked.startswith("amqp://a:***@h1,amqps//b:***@")
    assert not any(word in masked for word in ("one", "two", "three"))


def test_a_list_entry_missing_the_colon_after_its_scheme_is_an_entry_of_its_own() -> None:
    assert split_uris("amqp://a:one@h1,amqps//b:two@h2") == ["amqp://a:one@h1", "amqps//b:two@h2"]


def test_a_message_quoting_a_piece_of_the_url_without_its_at_sign_is_masked_too() -> None:
    # urlsplit names the "port" of host:5672@user:secret, which is the password
    message = "Port could not be cast to integer value as 's3cret'"
    assert "s3cret" not in mask_with(message, "amqp://host:5672@user:s3cret")


def test_urls_without_a_password_are_left_alone() -> None:
    for url in ("amqp://guest@h:5672/", "amqp://[::1]:5672/", "amqp://a,amqp://b", "plain text"):
        assert mask_uri(url) == url and mask_text(url) == url
