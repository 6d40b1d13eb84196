"""Connection settings: what is shown of them, and which TLS failures are final."""

from __future__ import annotations

import ssl

import pytest

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import TLSHandshakeError
from rabbitry.uri import mask_uri

URL = "amqps://app:s3cret-pw@rabbit.internal:5671/%2F"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://app:pw@rabbit:5672/%2F", "amqp://app@rabbit:5672/%2F"),
        ("amqp://app:pw@rabbit", "amqp://app@rabbit:5672/%2F"),
        ("amqp://app:pw@rabbit/shop", "amqp://app@rabbit:5672/shop"),
        ("amqp://app:pw@rabbit/a%2Fb", "amqp://app@rabbit:5672/a%2Fb"),
        ("amqp://app:pw@[::1]:5673/%2F", "amqp://app@[::1]:5673/%2F"),
    ],
)
def test_display_writes_the_vhost_as_in_a_url(url: str, shown: str) -> None:
    settings = ConnectionSettings.from_url(url)
    assert settings.display == shown
    assert ConnectionSettings.from_url(shown).vhost == settings.vhost  # it reads back


def test_display_of_the_default_vhost_has_no_double_slash() -> None:
    shown = ConnectionSettings.from_url(URL, ca_file=None).display
    assert shown == "amqps://app@rabbit.internal:5671/%2F"
    assert "//%2F" not in shown and not shown.endswith("//")
    # the same text as the masked URL, without the masked password
    assert mask_uri(URL).replace(":***@", "@") == shown


def verify_failed(code: int, text: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {text}")
    exc.verify_code = code
    return exc


def alert(reason: str, text: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, f"[SSL: {reason}] {text} (_ssl.c:2580)")
    exc.reason = reason
    return exc


def test_a_certificate_that_does_not_verify_is_final_and_says_what_to_check() -> None:
    settings = ConnectionSettings.from_url(URL)
    error = settings.tls_failure(verify_failed(20, "unable to get local issuer certificate"))
    assert isinstance(error, TLSHandshakeError)
    text = str(error)
    assert "amqps://app@rabbit.internal:5671/%2F" in text and "s3cret" not in text
    assert "CERTIFICATE_VERIFY_FAILED" in text and "ca_file" in text
    assert "'rabbit.internal'" in text

    mismatch = settings.tls_failure(verify_failed(62, "Hostname mismatch"))
    assert mismatch is not None and "does not name 'rabbit.internal'" in str(mismatch)


def test_a_refused_client_certificate_is_final_but_resets_and_eof_are_not() -> None:
    settings = ConnectionSettings.from_url(URL)
    required = settings.tls_failure(
        alert("TLSV13_ALERT_CERTIFICATE_REQUIRED", "tlsv13 alert certificate required")
    )
    assert isinstance(required, TLSHandshakeError)
    assert "requires a client certificate" in str(required) and "cert_file" in str(required)
    # the reason text alone (an error re-raised without its attributes) is enough
    bare = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert")
    assert settings.tls_failure(bare) is not None

    for transient in (
        ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:992)"),
        ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed (EOF)"),
        alert("SSLV3_ALERT_HANDSHAKE_FAILURE", "sslv3 alert handshake failure"),
        ConnectionResetError(104, "Connection reset by peer"),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError("timed out"),
    ):
        assert settings.tls_failure(transient) is None, transient
