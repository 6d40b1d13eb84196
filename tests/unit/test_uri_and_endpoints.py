"""Credentials never shown; endpoints derived from whichever URL was given (what mask_uri
shows of each kind of URL: test_security_masking.py)."""

from __future__ import annotations

from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.uri import mask_text


def test_mask_text_hides_every_uri_password() -> None:
    text = "upstream amqp://a:one@h1 and amqps://b:two@h2:5671/x failed"
    masked = mask_text(text)
    assert "one" not in masked and "two" not in masked
    assert "amqp://a:***@h1" in masked and "amqps://b:***@h2:5671/x" in masked


def test_flags_win_over_environment_and_spec() -> None:
    env = {"RABBITRY_URL": "amqp://e:e@env-host/"}
    ep = resolve_endpoints("amqp://f:f@flag-host/", environ=env, spec_url="amqp://s:s@spec/")
    assert ep.amqp_url == "amqp://f:f@flag-host/"
    assert ep.management_url == "http://f:f@flag-host:15672"


def test_environment_wins_over_spec_and_derives_amqp() -> None:
    env = {"RABBITRY_MANAGEMENT_URL": "https://u:p@mgmt:15671"}
    ep = resolve_endpoints(environ=env, spec_url="amqp://s:s@spec/")
    assert ep.management_url == "https://u:p@mgmt:15671"
    assert ep.amqp_url == "amqps://u:p@mgmt:5671/"


def test_defaults_and_vhost_urls() -> None:
    ep = resolve_endpoints(environ={})
    assert ep.management_url == "http://guest:guest@localhost:15672"
    assert ep.amqp_url_for("/") == "amqp://guest:guest@localhost:5672/%2F"
    assert "guest:guest" not in repr(ep)
