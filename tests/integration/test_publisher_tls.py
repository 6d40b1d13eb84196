"""Publisher and AsyncPublisher over amqps:// against a broker with a TLS listener.

The certificates are made once per session with the ``openssl`` CLI: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate, and a second CA that signed neither.
The broker's TLS listener is configured through ``RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS``, which
rabbitry's images (RabbitMQ 4.0 and 3.10) and the official image read alike: a file in
``/etc/rabbitmq/conf.d`` would be read by both too, but rabbitry's image changes the owner of
everything under ``/etc/rabbitmq`` when it starts and stops on a read-only mount there.

Two brokers serve every TLS test of the session (here and in test_cli_errors.py), one without
and one with client certificates: the ``tls`` xdist group keeps those tests on one worker, one
after another, so each broker starts once. Tests use queue and connection names of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pika
import pytest

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer import App, AsyncWorker, Worker
from rabbitry.errors import StreamUnavailable
from rabbitry.publisher import AsyncPublisher, Backoff, ConnectionLost, Publisher, TLSHandshakeError
from rabbitry.stream import amqp10
from rabbitry.stream.blocking import StreamClient
from rabbitry.testing.containers import BrokerContainer
from rabbitry.testing.plugin import BrokerFactory
from tests.integration.conftest import drain_ids as drain_channel
from tests.integration.test_worker_topology_lost import started_in_a_thread

TLS_GROUP = pytest.mark.xdist_group("tls")
pytestmark = [pytest.mark.broker, TLS_GROUP]

TLS_PORT = 5671
MANAGEMENT_TLS_PORT = 15671
STREAM_TLS_PORT = 5551
CERT_DIR = "/etc/rabbitry/tls"
USERNAME = "tls-user"
PASSWORD = "tls-S3cret-pw"
CLIENT_CN = "rabbitry test client"
# What a client without a certificate sees: the broker's TLS 1.3 alert, or, when the broker's
# close overtakes the alert (a reset drops it), the end of the TLS stream.
NO_CERT_REFUSAL = (
    r"(?i)certificate required|handshake failure|EOF occurred in violation of protocol"
)
# A certificate that does not verify, and the broker's certificate-required alert, fail at once
# (TLSHandshakeError); an EOF may be a broker restarting and is retried with back-off (for 120 s
# by default) before ConnectionLost: where the refusal may show as an EOF, give up after 3 s.
REFUSAL_BACKOFF = Backoff(initial=0.05, maximum=0.2, give_up_after=3.0)
# What the refusal of a missing client certificate may end in, by the way it shows.
NO_CERT_ERRORS = (TLSHandshakeError, ConnectionLost)


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(cwd: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"openssl {' '.join(args)}:\n{result.stderr}"


def _make_ca(cwd: Path, name: str, cn: str) -> None:
    _openssl(
        cwd,
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={cn}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip


def _make_leaf(cwd: Path, name: str, cn: str, extensions: str) -> None:
    (cwd / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n" + extensions
    )
    _openssl(
        cwd,
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
    )  # fmt: skip
    _openssl(
        cwd,
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
    )  # fmt: skip


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl CLI: install it")
    out = tmp_path_factory.mktemp("tls")
    _make_ca(out, "ca", "rabbitry test CA")
    _make_ca(out, "other-ca", "rabbitry unrelated CA")
    _make_leaf(
        out,
        "server",
        "localhost",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    _make_leaf(out, "client", CLIENT_CN, "extendedKeyUsage=clientAuth\n")
    # The broker runs as the image's rabbitmq user: it must be able to read the mounted files.
    out.chmod(0o755)
    for path in out.iterdir():
        path.chmod(0o644)
    return Certs(
        dir=out,
        ca=out / "ca.pem",
        server_cert=out / "server.pem",
        server_key=out / "server.key",
        client_cert=out / "client.pem",
        client_key=out / "client.key",
        other_ca=out / "other-ca.pem",
    )


def start_tls_broker(
    factory: BrokerFactory, certs: Certs, *, require_client_cert: bool
) -> BrokerContainer:
    """A broker with a TLS listener on 5671 next to the plain one (which the checks use), the
    stream protocol over TLS on 5551 (the same certificates), and the management API over
    https on 15671 next to plain http."""
    verify = "{verify,verify_peer},{fail_if_no_peer_cert,true}"
    if not require_client_cert:
        verify = "{verify,verify_none}"
    options = (
        f'{{cacertfile,"{CERT_DIR}/ca.pem"}},{{certfile,"{CERT_DIR}/server.pem"}},'
        f'{{keyfile,"{CERT_DIR}/server.key"}},{verify}'
    )
    management = (
        f'[{{port,{MANAGEMENT_TLS_PORT}}},{{cacertfile,"{CERT_DIR}/ca.pem"}},'
        f'{{certfile,"{CERT_DIR}/server.pem"}},{{keyfile,"{CERT_DIR}/server.key"}}]'
    )
    erl_args = (
        f"-rabbit ssl_listeners [{TLS_PORT}] -rabbit ssl_options [{options}]"
        f" -rabbitmq_stream ssl_listeners [{STREAM_TLS_PORT}]"
        f" -rabbitmq_management ssl_config {management}"
    )
    return factory(
        username=USERNAME,
        password=PASSWORD,
        mounts={CERT_DIR: certs.dir},
        extra_ports=[TLS_PORT, MANAGEMENT_TLS_PORT, STREAM_TLS_PORT],
        env={"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": erl_args},
    )


@pytest.fixture(scope="session")
def tls_brokers() -> Iterator[BrokerFactory]:
    """Starts the session's TLS brokers; removes them when the session ends."""
    with contextlib.closing(BrokerFactory()) as factory:
        yield factory


@pytest.fixture(scope="session")
def tls_broker(tls_brokers: BrokerFactory, certs: Certs) -> BrokerContainer:
    """The session's TLS broker that asks no client certificate."""
    return start_tls_broker(tls_brokers, certs, require_client_cert=False)


@pytest.fixture(scope="session")
def mtls_broker(tls_brokers: BrokerFactory, certs: Certs) -> BrokerContainer:
    """The session's TLS broker that requires a client certificate signed by ``certs.ca``."""
    return start_tls_broker(tls_brokers, certs, require_client_cert=True)


def amqps_url(container: BrokerContainer, **query: str) -> str:
    host = container.broker.host
    port = container.host_port(TLS_PORT)
    url = f"amqps://{USERNAME}:{quote(PASSWORD, safe='')}@{host}:{port}/%2F"
    return f"{url}?{urlencode(query)}" if query else url


def with_queue(container: BrokerContainer, queue: str) -> BrokerContainer:
    """``container``, once ``queue`` is declared on it (durable, over the plain AMQP port)."""
    connection = pika.BlockingConnection(pika.URLParameters(container.broker.amqp_url("/")))
    connection.channel().queue_declare(queue, durable=True)
    connection.close()
    return container


def drain_ids(container: BrokerContainer, queue: str) -> list[str]:
    """Message ids in ``queue``, read over the plain AMQP port."""
    connection = pika.BlockingConnection(pika.URLParameters(container.broker.amqp_url("/")))
    try:
        return drain_channel(connection.channel(), queue)
    finally:
        connection.close()


def tls_connection(container: BrokerContainer, name: str, wait: float = 15.0) -> dict[str, Any]:
    """The management API's view of the client connection named ``name``."""
    broker = container.broker
    end = time.monotonic() + wait
    while True:
        response = httpx.get(f"{broker.management_url}/api/connections", auth=broker.auth)
        response.raise_for_status()
        for connection in response.json():
            if (connection.get("client_properties") or {}).get("connection_name") == name:
                return dict(connection)
        assert time.monotonic() < end, f"no connection named {name!r} in the management API"
        time.sleep(0.25)


def test_amqps_with_ca_file_publishes_confirmed_and_a_wrong_ca_is_refused(
    tls_broker: BrokerContainer, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    container = with_queue(tls_broker, "secure")

    with Publisher(amqps_url(container), ca_file=str(certs.ca), connection_name="tls-sync") as pub:
        assert pub.settings.tls is not None
        sync = [pub.publish(b"sync", routing_key="secure") for _ in range(3)]
        seen = tls_connection(container, "tls-sync")
        assert seen["ssl"] is True and seen["port"] == TLS_PORT
        assert not seen.get("peer_cert_subject"), "no client certificate was given"

    async def publish_async() -> list[Any]:
        url = amqps_url(container, cacertfile=str(certs.ca))  # the URL form of ca_file
        async with AsyncPublisher(url, connection_name="tls-async") as pub:
            out = [await pub.publish(b"async", routing_key="secure")]
            out += await pub.publish_many([b"many"] * 50, routing_key="secure")
            seen = tls_connection(container, "tls-async")
            assert seen["ssl"] is True and seen["port"] == TLS_PORT
            return out

    sent = sync + asyncio.run(publish_async())
    assert all(d.ok for d in sent)
    assert sorted(drain_ids(container, "secure")) == sorted(d.message_id for d in sent)

    # A CA that did not sign the broker's certificate: retrying cannot heal it, so a clear
    # error at once (with the default back-off, which gives up only after 120 s), no password.
    where = f"amqps://{USERNAME}@{container.broker.host}:{container.host_port(TLS_PORT)}/%2F"
    started = time.monotonic()
    pub = Publisher(amqps_url(container), ca_file=str(certs.other_ca))
    assert pub.settings.backoff.give_up_after == 120.0
    with pytest.raises(TLSHandshakeError) as wrong_ca:
        pub.connect()
    assert time.monotonic() - started < 5, "a certificate that does not verify is not retried"
    with pytest.raises(TLSHandshakeError):
        pub.publish(b"x", routing_key="secure")  # still refused, still at once
    pub.close()
    assert time.monotonic() - started < 5
    assert f"TLS handshake with {where} failed" in str(wrong_ca.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(wrong_ca.value)
    assert "ca_file" in str(wrong_ca.value)

    async def publish_wrong_ca() -> None:
        pub = AsyncPublisher(amqps_url(container), ca_file=str(certs.other_ca))
        began = time.monotonic()
        with pytest.raises(TLSHandshakeError) as exc:
            await pub.publish(b"x", routing_key="secure")
        with pytest.raises(TLSHandshakeError):
            await pub.publish(b"x", routing_key="secure")
        assert time.monotonic() - began < 5, "a certificate that does not verify is not retried"
        assert f"TLS handshake with {where} failed" in str(exc.value)
        assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value) and "ca_file" in str(exc.value)
        assert PASSWORD not in str(exc.value) and PASSWORD not in repr(exc.value)
        await pub.close()

    asyncio.run(publish_wrong_ca())
    assert PASSWORD not in str(wrong_ca.value) and PASSWORD not in repr(wrong_ca.value)
    assert PASSWORD not in caplog.text
    assert PASSWORD not in "".join(str(r.args) for r in caplog.records)
    assert drain_ids(container, "secure") == []


def test_client_certificate_is_presented_and_without_it_the_broker_refuses(
    mtls_broker: BrokerContainer, certs: Certs
) -> None:
    container = with_queue(mtls_broker, "mutual")

    with Publisher(
        amqps_url(container),
        ca_file=str(certs.ca),
        cert_file=str(certs.client_cert),
        key_file=str(certs.client_key),
        connection_name="mtls-sync",
    ) as pub:
        sync = pub.publish(b"sync", routing_key="mutual")
        seen = tls_connection(container, "mtls-sync")
        assert seen["ssl"] is True
        assert CLIENT_CN in str(seen.get("peer_cert_subject"))

    async def publish_async() -> Any:
        url = amqps_url(
            container,
            cacertfile=str(certs.ca),
            certfile=str(certs.client_cert),
            keyfile=str(certs.client_key),
        )
        async with AsyncPublisher(url, connection_name="mtls-async") as pub:
            delivery = await pub.publish(b"async", routing_key="mutual")
            assert CLIENT_CN in str(tls_connection(container, "mtls-async")["peer_cert_subject"])
            return delivery

    sent = [sync, asyncio.run(publish_async())]
    assert all(d.ok for d in sent)
    assert sorted(drain_ids(container, "mutual")) == sorted(d.message_id for d in sent)

    # No client certificate: the broker ends the handshake; a rabbitry error, not a hang: the
    # certificate-required alert at once, an EOF (the broker's close overtook it) after 3 s.
    started = time.monotonic()
    pub = Publisher(amqps_url(container), ca_file=str(certs.ca), backoff=REFUSAL_BACKOFF)
    with pytest.raises(NO_CERT_ERRORS) as refused:
        pub.publish(b"x", routing_key="mutual")
    pub.close()
    assert time.monotonic() - started < 15, "the refusal must not hang"
    assert re.search(NO_CERT_REFUSAL, str(refused.value)), str(refused.value)
    assert f"amqps://{USERNAME}@{container.broker.host}:" in str(refused.value)
    assert PASSWORD not in str(refused.value)

    async def publish_without_cert() -> None:
        pub = AsyncPublisher(amqps_url(container), ca_file=str(certs.ca), backoff=REFUSAL_BACKOFF)
        began = time.monotonic()
        with pytest.raises(NO_CERT_ERRORS) as exc:
            await pub.publish(b"x", routing_key="mutual")
        assert time.monotonic() - began < 15, "the refusal must not hang"
        assert re.search(NO_CERT_REFUSAL, str(exc.value)), str(exc.value)
        await pub.close()

    asyncio.run(publish_without_cert())
    assert drain_ids(container, "mutual") == []


def test_workers_stop_at_once_on_a_certificate_that_does_not_verify(
    tls_broker: BrokerContainer, certs: Certs
) -> None:
    # Workers reconnect for as long as they run: without this, a wrong CA would have them
    # retry forever with nothing but warnings.
    container = with_queue(tls_broker, "secure")
    app = App()

    @app.handler("secure")
    def handle(message: Any) -> None:  # never reached
        raise AssertionError("no message should arrive")

    settings = ConnectionSettings.from_url(
        amqps_url(container), ca_file=str(certs.other_ca), backoff=Backoff(give_up_after=None)
    )
    worker = Worker(app, settings)
    started = time.monotonic()
    thread, failure = started_in_a_thread(worker)
    thread.join(10)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        pytest.fail("the worker kept retrying a certificate that does not verify")
    assert time.monotonic() - started < 10
    assert failure and isinstance(failure[0], TLSHandshakeError), failure
    assert "CERTIFICATE_VERIFY_FAILED" in str(failure[0]) and PASSWORD not in str(failure[0])

    async def run_async() -> None:
        aworker = AsyncWorker(app, settings)
        with pytest.raises(TLSHandshakeError) as exc:
            await asyncio.wait_for(aworker.run(), 10)
        assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value) and PASSWORD not in str(exc.value)

    asyncio.run(run_async())


def test_every_tls_option_of_the_url_is_honoured_by_the_sync_and_async_clients(
    mtls_broker: BrokerContainer, certs: Certs
) -> None:
    """The broker's certificate names localhost and 127.0.0.1 and is signed by ``ca``; the
    client connects to 127.0.0.1 and says, in the URL only, what to send and check."""
    container = with_queue(mtls_broker, "options")
    files = {
        "cacertfile": str(certs.ca),
        "certfile": str(certs.client_cert),
        "keyfile": str(certs.client_key),
    }
    fast = Backoff(initial=0.05, maximum=0.2, give_up_after=3.0)

    def publish(name: str, look: bool = False, **query: str) -> None:
        url = amqps_url(container, connection_name=name, **query)
        with Publisher(url, backoff=fast) as pub:
            assert pub.publish(b"m", routing_key="options").ok
            if look:  # the management API's view of it, while it is open
                seen = tls_connection(container, name)
                assert seen["ssl"] is True and seen.get("peer_cert_subject"), seen

        async def publish_async() -> None:
            url = amqps_url(container, connection_name=f"{name}-async", **query)
            async with AsyncPublisher(url, backoff=fast) as pub:
                assert (await pub.publish(b"m", routing_key="options")).ok

        asyncio.run(publish_async())

    # the certificate names localhost: sent and checked instead of 127.0.0.1
    publish("sni", True, **files, verify="verify_peer", server_name_indication="localhost")
    publish("no-sni", **files, server_name_indication="disable")  # the chain is still checked
    publish("checks", **files, fail_if_no_peer_cert="true", customize_hostname_check="https")
    # no CA that signed it, and no check of it
    publish("none", certfile=files["certfile"], keyfile=files["keyfile"], verify="verify_none")

    # a name the certificate does not hold is refused at once, naming it
    wrong = amqps_url(container, **files, server_name_indication="rabbit.invalid")
    with pytest.raises(TLSHandshakeError) as exc:
        Publisher(wrong, backoff=fast).connect()
    assert "does not name 'rabbit.invalid'" in str(exc.value) and PASSWORD not in str(exc.value)
    # without the CA, verify_peer (the default) refuses the broker's certificate
    with pytest.raises(TLSHandshakeError):
        Publisher(amqps_url(container, certfile=files["certfile"], keyfile=files["keyfile"]),
                  backoff=fast).connect()  # fmt: skip
    assert len(drain_ids(container, "options")) == 8


def test_a_stream_is_written_and_read_over_the_stream_protocols_tls_listener(
    tls_broker: BrokerContainer, certs: Certs
) -> None:
    # messages of 1 KB in chunks larger than one read: frames cut between reads, over TLS
    stream = f"tls.stream.{time.monotonic_ns()}"
    connection = pika.BlockingConnection(pika.URLParameters(tls_broker.broker.amqp_url("/")))
    connection.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()
    port = tls_broker.host_port(STREAM_TLS_PORT)
    settings = ConnectionSettings.from_url(amqps_url(tls_broker, cacertfile=str(certs.ca)))
    bodies = [f"{i:06d}".encode() * 170 for i in range(3000)]
    with StreamClient(settings, port=port) as client:
        messages = ((stream, i + 1, amqp10.encode(body)) for i, body in enumerate(bodies))
        assert client.publish("tls-producer", messages).sent == len(bodies)
        read = [
            amqp10.decode(record).body
            for chunk in client.read_chunks(stream, 0, len(bodies))
            for record in chunk.records
        ]
    assert read == bodies
    wrong = ConnectionSettings.from_url(amqps_url(tls_broker, cacertfile=str(certs.other_ca)))
    with pytest.raises(StreamUnavailable, match="certificate verify failed"):
        StreamClient(wrong, port=port)
