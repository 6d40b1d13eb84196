"""The management API's URL: TLS asked of a plaintext URL is an error, never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient
from rabbitry.management.endpoints import resolve_endpoints


@pytest.mark.parametrize(
    "url",
    [
        "http://app:Mgmt-s3cret@rabbit:15672/?cacertfile=/etc/ssl/ca.pem",
        "https://app:Mgmt-s3cret@rabbit:15671?verify=verify_none",
        "http://app:Mgmt-s3cret@rabbit:15672/#x",
    ],
)
def test_a_query_on_a_management_url_is_an_error_not_dropped(url: str) -> None:
    with pytest.raises(BrokerError) as caught:
        ManagementClient(url)
    text = str(caught.value)
    assert "the management API client takes no URL options" in text
    assert "app:***@rabbit" in text and "Mgmt-s3cret" not in text
    assert "--ca-file" in text


def test_a_ca_file_for_a_plaintext_management_url_is_an_error(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read here")
    for given in (
        {"management_url": "http://app:Mgmt-s3cret@rabbit:15672"},
        {"url": "amqp://app:Mgmt-s3cret@rabbit/"},  # the management URL made of it: http
    ):
        with pytest.raises(BrokerError) as caught:
            resolve_endpoints(**given, ca_file=str(ca), environ={})
        text = str(caught.value)
        assert "is plaintext (http://): use https://" in text and "Mgmt-s3cret" not in text
    with pytest.raises(BrokerError):
        resolve_endpoints(
            management_url="http://rabbit:15672", environ={"RABBITRY_CA_FILE": str(ca)}
        )
    # https, or amqps (whose management URL is https), take it
    assert resolve_endpoints(management_url="https://rabbit", ca_file=str(ca)).verify == str(ca)
    assert resolve_endpoints(url="amqps://rabbit/", ca_file=str(ca), environ={}).verify == str(ca)
