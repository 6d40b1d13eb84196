"""``Reconnect``: the one rule every client follows after a failed connect (no broker, no clock)."""

from __future__ import annotations

import ssl

import pytest

from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.session import ConnectionRefused
from rabbitry.amqp.settings import Backoff, ConnectionSettings
from rabbitry.errors import BrokerError, TLSHandshakeError
from tests.unit.amqp.giving_up import error_on_giving_up


def settings(**backoff: float | None) -> ConnectionSettings:
    return ConnectionSettings.from_url(
        "amqp://app:s3cret@broker:5672/shop", backoff=Backoff(jitter=0, **backoff)
    )


def test_pauses_grow_with_each_failure_and_are_capped() -> None:
    retry = Reconnect(settings(initial=0.1, maximum=0.3, give_up_after=None), now=0.0)
    pauses = [retry.failed(ConnectionRefusedError("refused"), now=float(i)) for i in range(5)]
    assert pauses[0] == pytest.approx(0.1)
    assert pauses == sorted(pauses) and max(pauses) == pytest.approx(0.3)
    assert retry.attempt == 5


def test_gives_up_once_give_up_after_has_passed_since_the_first_failure() -> None:
    error = error_on_giving_up(
        settings(give_up_after=10.0), started=100.0, failed=105.0, gave_up=110.0
    )
    assert "could not connect to amqp://app@broker:5672/shop" in str(error)


def test_a_refused_login_is_final_and_names_user_reason_and_hint() -> None:
    retry = Reconnect(settings(), now=0.0)
    refused = ConnectionRefused(403, "ACCESS_REFUSED - Login was refused", during_handshake=True)
    with pytest.raises(BrokerError) as exc:
        retry.failed(refused, now=0.0)
    text = str(exc.value)
    assert "user 'app'" in text and "ACCESS_REFUSED" in text and "password" in text
    assert "s3cret" not in text


def test_a_refusal_after_the_handshake_is_retried() -> None:
    retry = Reconnect(settings(initial=0.5), now=0.0)
    closed = ConnectionRefused(320, "CONNECTION_FORCED - broker shutdown", during_handshake=False)
    assert retry.failed(closed, now=0.0) == pytest.approx(0.5)


def test_a_certificate_that_does_not_verify_is_final() -> None:
    retry = Reconnect(settings(), now=0.0)
    with pytest.raises(TLSHandshakeError):
        retry.failed(ssl.SSLCertVerificationError("certificate verify failed"), now=0.0)
