"""Passwords in URLs are never shown, whatever shape the URL has: one rule (``rabbitry.uri``)
for values known to be URLs and for free text that may quote one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.uri import mask_text, mask_uri, mask_with, split_uris
from tests.profiles import examples

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


@settings(max_examples=examples(400))
@given(url_lists())
def test_no_password_survives_masking_a_url_value(url: str) -> None:
    assert MARK not in mask_uri(url), url


@settings(max_examples=examples(400))
@given(url_lists(), st.sampled_from(["{} refused", "cannot connect to {}: refused", "({})"]))
def test_no_password_survives_masking_text_that_quotes_a_url(url: str, shape: str) -> None:
    for quoted in (url, repr(url), json.dumps(url), json.dumps({"url": url})):
        text = shape.format(quoted)
        assert MARK not in mask_text(text), text


# (a URL, what mask_uri shows of it): each a way a password sits in a URL.
MASKED_URLS = [
    pytest.param(
        "amqp://app:s3cret@broker:5672/shop", "amqp://app:***@broker:5672/shop", id="password"
    ),
    pytest.param("http://broker:15672", "http://broker:15672", id="no password: unchanged"),
    # what follows a colon after the host and is no port may be the end of a password
    pytest.param("amqp://u:pw@host:notaport/x", "amqp://u:***@host:***", id="a port that is none"),
    pytest.param("amqp://u:p%40ss@[::1]:5672/", "amqp://u:***@[::1]:5672/", id="escaped, IPv6"),
    pytest.param("amqps//user:pw@h", "amqps//user:***@h", id="no colon after the scheme"),
    # host and port before the credentials: both halves hidden
    pytest.param("rabbit:5672@app:s3cret", "rabbit:***@app:***", id="swapped halves"),
    pytest.param(
        "amqp://rabbit:5672@app:s3/cret", "amqp://rabbit:***@app:***", id="swapped, scheme"
    ),
]


@pytest.mark.parametrize(("url", "shown"), MASKED_URLS)
def test_mask_uri_hides_the_password_and_keeps_the_rest(url: str, shown: str) -> None:
    assert mask_uri(url) == shown


def test_text_quoting_a_url_without_the_colon_after_its_scheme_is_masked() -> None:
    assert mask_text("bad URL 'http//admin:s3cret@h:15672'") == "bad URL 'http//admin:***@h:15672'"


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


# -- where URLs reach a message --------------------------------------------------------------------

BROKEN = [
    "amqps//user:Pw1-secret@h",
    "http//user:Pw1-secret@h:15672",
    "amqp://u:ok@a,amqps//u:Pw1-secret@b",
    "rabbit:5672@user:Pw1-secret",
    "amqp://rabbit:5672@user:Pw1-secret",
]
"""Shapes whose password was printed before: no colon after the scheme, a bad later entry of
a list, host and port before the credentials (urlsplit then names the password as a port)."""

SPEC = """\
version: 1
name: masked
broker:
  url: "{url}"
vhosts:
  - name: v
    queues: [{{name: q}}]
"""


@pytest.mark.parametrize("url", BROKEN)
def test_validate_refuses_a_broker_url_that_does_not_parse_without_showing_its_password(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.cli import cli

    monkeypatch.setenv("RABBITRY_CACHE_DIR", str(tmp_path / "cache"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url=url))
    text = CliRunner().invoke(cli, ["validate", str(spec)])
    assert text.exit_code == 1, text.output
    assert f"{spec}:4:8: broker.url: AMQP URL" in text.output
    as_json = CliRunner().invoke(cli, ["validate", "--json", str(spec)])
    assert as_json.exit_code == 1
    (problem,) = json.loads(as_json.stdout)["problems"]
    assert problem["path"] == "broker.url" and "AMQP URL" in problem["message"]
    assert "Pw1" not in text.output + as_json.output
    assert not (tmp_path / "cache").exists(), "nothing of an invalid spec is cached"


def test_validate_names_the_entry_of_a_broker_url_list(tmp_path: Path) -> None:
    from rabbitry.cli import cli

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        SPEC.format(url="x").replace(
            'url: "x"', "url:\n    - amqp://u:ok@a\n    - amqps//u:Pw1-secret@b"
        )
    )
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 1 and "broker.url[1]: AMQP URL 'amqps//u:***@b'" in result.output
    assert "Pw1" not in result.output


@pytest.mark.parametrize("url", BROKEN)
def test_command_errors_in_text_and_json_hide_the_password_of_a_broken_url(
    url: str, tmp_path: Path
) -> None:
    from rabbitry.cli import cli

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(url="amqp://localhost"))
    for flags in ([], ["--json"]):
        result = CliRunner().invoke(cli, ["plan", *flags, "--url", url, str(spec)])
        assert result.exit_code == 1, result.output
        assert "URL" in result.output and "Pw1" not in result.output, result.output


@pytest.mark.parametrize("url", BROKEN[::2] + BROKEN[-1:])
def test_spark_option_errors_hide_the_password_of_a_broken_url(url: str) -> None:
    from rabbitry.spark.options import SinkOptionError, SinkOptions

    with pytest.raises(SinkOptionError) as caught:
        SinkOptions.parse({"url": url, "exchange": "x"}, environ={})
    assert "URL" in str(caught.value) and "Pw1" not in str(caught.value)


@pytest.mark.parametrize("url", BROKEN[::2] + BROKEN[-1:])
def test_client_connection_settings_errors_hide_the_password_of_a_broken_url(url: str) -> None:
    from rabbitry.amqp.settings import ConnectionSettings
    from rabbitry.errors import BrokerError

    with pytest.raises(BrokerError) as caught:
        ConnectionSettings.from_url(url)
    assert "Pw1" not in str(caught.value), caught.value


def test_management_url_errors_hide_the_password_of_a_broken_url() -> None:
    from rabbitry.errors import BrokerError
    from rabbitry.management.client import split_credentials

    for url in ("http//user:Pw1-secret@h", "http://rabbit:15672@user:Pw1-secret"):
        with pytest.raises(BrokerError) as caught:
            split_credentials(url)
        assert "Pw1" not in str(caught.value), caught.value


def test_a_time_after_a_name_is_not_taken_for_a_swapped_password() -> None:
    # a periodic occurrence's id: job@time; masking it garbled every log line naming one
    line = "occurrence tick@2026-11-27T08:54:50.000Z/1f3a on jobs not run"
    assert mask_text(line) == line
    assert mask_text("at job@2026-11-27T08:54Z") == "at job@2026-11-27T08:54Z"
    # a real password before it is still hidden, and so is a swapped user:secret
    assert mask_text("u:s3cret@2026-11-27T08:54:50Z") == "u:***@2026-11-27T08:***"
    assert mask_text("amqp://host:5672@user:s3cret") == "amqp://host:***@user:***"
