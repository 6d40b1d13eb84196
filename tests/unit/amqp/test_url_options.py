"""AMQP URL query options: every option RabbitMQ documents works, any other is an error naming
it, and a TLS option on a plain amqp:// URL is an error, never a plaintext connection."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp import frames
from rabbitry.amqp.confirms import ConfirmTracker
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.session import Session
from rabbitry.amqp.settings import ConnectionSettings, Node
from rabbitry.errors import BrokerError

PLAIN = "amqp://app:s3cret-pw@rabbit.internal:5672/%2F"
TLS = "amqps://app:s3cret-pw@rabbit.internal:5671/%2F"


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate (it is its own CA) and its key."""
    where = tmp_path_factory.mktemp("pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "1",
         "-subj", "/CN=rabbit.internal"],
        cwd=where, check=True, capture_output=True,
    )  # fmt: skip
    return {"cert": where / "cert.pem", "key": where / "key.pem"}


def refused(url: str, **options: object) -> str:
    with pytest.raises(BrokerError) as caught:
        ConnectionSettings.from_url(url, **options)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "s3cret-pw" not in text
    assert "app:***@rabbit.internal" in text, text
    return text


@pytest.mark.parametrize(
    "query",
    [
        "cacertfile=/missing.pem&verify=verify_peer",
        "cacertfile=/etc/ssl/ca.pem",
        "certfile=/c.pem&keyfile=/k.pem",
        "verify=verify_none",
        "server_name_indication=rabbit.internal",
        "fail_if_no_peer_cert=true",
    ],
)
def test_a_tls_option_on_a_plain_url_is_an_error_never_plaintext(query: str) -> None:
    text = refused(f"{PLAIN}?{query}")
    first = query.split("=")[0]
    assert f"asks for TLS with {first}" in text
    assert "use amqps://" in text


@pytest.mark.parametrize(
    "keyword",
    [
        {"ca_file": "/etc/ssl/ca.pem"},
        {"cert_file": "/c.pem"},
        {"verify": False},
        {"ssl_context": ssl.create_default_context()},
    ],
)
def test_a_tls_keyword_with_a_plain_url_is_an_error_too(keyword: dict[str, object]) -> None:
    text = refused(PLAIN, **keyword)
    assert f"asks for TLS with {next(iter(keyword))}" in text


@pytest.mark.parametrize("option", ["socket_timeout=5", "cacert=/ca.pem", "ssl=true"])
def test_an_option_rabbitry_does_not_know_is_an_error_naming_it(option: str) -> None:
    text = refused(f"{TLS}?{option}")
    assert f"unknown option {option.split('=')[0]!r}" in text
    assert "cacertfile" in text and "server_name_indication" in text  # what it takes


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("heartbeat=soon", "heartbeat='soon' must be a whole number of seconds"),
        ("connection_timeout=-1", "connection_timeout='-1' must be a whole number of milli"),
        ("channel_max=70000", "channel_max='70000' must be a whole number of channels"),
        ("frame_max=100", "frame_max='100' must be a whole number of bytes, 4096"),
        ("verify=verify_maybe", "verify='verify_maybe' must be verify_peer or verify_none"),
        ("fail_if_no_peer_cert=yes", "fail_if_no_peer_cert='yes' must be true or false"),
        ("auth_mechanism=amqplain", "not one rabbitry's client speaks"),
        ("customize_hostname_check=none", "must be https"),
        ("depth=2", "option depth is not supported"),
        ("heartbeat=5&heartbeat=10", "heartbeat is given twice"),
        ("heartbeat", "heartbeat has no value"),
    ],
)
def test_a_value_an_option_cannot_take_is_an_error_naming_it(query: str, says: str) -> None:
    assert says in refused(f"{TLS}?{query}")


def test_a_key_passphrase_in_the_url_is_refused_without_showing_it() -> None:
    text = refused(f"{TLS}?certfile=/c.pem&keyfile=/k.pem&password=K3y-pass")
    assert "option password is not supported" in text
    assert "K3y-pass" not in text


@pytest.mark.parametrize("option", ["cacertfile", "certfile"])
def test_a_missing_certificate_file_is_an_error_naming_its_path(option: str) -> None:
    text = refused(f"{TLS}?{option}=/no/such/file.pem")
    assert "'/no/such/file.pem'" in text and "cannot be used" in text


def test_a_key_file_without_its_certificate_is_an_error() -> None:
    assert "without its certificate" in refused(f"{TLS}?keyfile=/k.pem")


def test_the_tls_options_make_the_context_they_say(pem: dict[str, Path]) -> None:
    files = f"cacertfile={pem['cert']}&certfile={pem['cert']}&keyfile={pem['key']}"
    peer = ConnectionSettings.from_url(f"{TLS}?{files}&verify=verify_peer")
    assert peer.tls is not None
    assert peer.tls.verify_mode is ssl.CERT_REQUIRED and peer.tls.check_hostname
    assert [c["subject"] for c in peer.tls.get_ca_certs()] == [
        ((("commonName", "rabbit.internal"),),)
    ]
    assert peer.tls_server_name == "rabbit.internal"

    none = ConnectionSettings.from_url(f"{TLS}?{files}&verify=verify_none")
    assert none.tls is not None and none.tls.verify_mode is ssl.CERT_NONE

    accepted = f"fail_if_no_peer_cert=false&customize_hostname_check=https&cacertfile={pem['cert']}"
    assert ConnectionSettings.from_url(f"{TLS}?{accepted}").tls is not None


def test_server_name_indication_names_what_is_sent_and_checked_on_every_node() -> None:
    url = "amqps://app:pw@10.0.0.1:5671/%2F,amqps://app:pw@10.0.0.2:5671/%2F"
    named = ConnectionSettings.from_url(url.replace("/%2F", "/%2F?server_name_indication=mq.lan"))
    assert named.tls_server_name == "mq.lan"
    assert named.at(Node("10.0.0.2", 5671)).tls_server_name == "mq.lan"
    # without it, each node is checked against its own name
    plain = ConnectionSettings.from_url(url)
    assert plain.at(Node("10.0.0.2", 5671)).tls_server_name == "10.0.0.2"

    off = ConnectionSettings.from_url(f"{TLS}?server_name_indication=disable")
    assert off.tls is not None and off.tls_server_name is None
    assert not off.tls.check_hostname and off.tls.verify_mode is ssl.CERT_REQUIRED


def test_the_connection_options_are_read_in_the_units_rabbitmq_documents() -> None:
    settings = ConnectionSettings.from_url(
        f"{PLAIN}?heartbeat=5&connection_timeout=2500&channel_max=16&frame_max=8192"
        "&auth_mechanism=EXTERNAL&connection_name=orders%20api"
    )
    assert settings.heartbeat == 5
    assert settings.connect_timeout == 2.5  # milliseconds in the URL
    assert (settings.channel_max, settings.frame_max) == (16, 8192)
    assert settings.external_auth
    assert settings.connection_name == "orders api"
    assert settings.tls is None
    # keywords win over the URL
    assert ConnectionSettings.from_url(f"{PLAIN}?heartbeat=5", heartbeat=30).heartbeat == 30


def test_the_url_limits_are_what_the_client_answers_the_brokers_tune_with() -> None:
    settings = ConnectionSettings.from_url(f"{PLAIN}?channel_max=16&frame_max=8192&heartbeat=5")
    session = Session(settings, ConfirmTracker(), MessageBuilder())
    session.take_output()
    session.receive(frames.method_frame(0, commands.Connection.Start(mechanisms="PLAIN")))
    session.take_output()
    session.receive(frames.method_frame(0, commands.Connection.Tune(2047, 131072, 60)))
    data = session.take_output()
    tune_ok = pamqp_frame.unmarshal(data[: int.from_bytes(data[3:7], "big") + 8])[2]
    assert isinstance(tune_ok, commands.Connection.TuneOk)
    assert (tune_ok.channel_max, tune_ok.frame_max, tune_ok.heartbeat) == (16, 8192, 5)
