"""Which protocol the source's tasks read with: the stream protocol when the broker offers it,
else AMQP 0-9-1. Decided once, on the driver, when the read is planned.

``protocol=auto`` (the default) tries the stream port (``stream_port=``, else the port of
``RABBITRY_STREAM_URL`` when it names the URL's host, as ``rabbitry dev-broker env`` prints
it, else 5552) with the read's own credentials and TLS, and falls back to AMQP 0-9-1 with one
log line saying why; ``protocol=stream`` fails when the stream protocol does not answer;
``protocol=amqp`` never tries it. The port must answer for the cluster the AMQP URL reaches
(``rabbitry.stream.pairing``): another broker on the same host, with the same credentials,
would otherwise be read from (or, by the sink, written to) in its place. Offsets, checkpoints
and bounds are the same either way: the driver plans over AMQP 0-9-1, only the tasks' bulk
reads change.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from rabbitry.amqp.channel import Channel
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError, OtherBroker, SourceOptionError, SparkSourceError
from rabbitry.spark.report import logger
from rabbitry.stream.blocking import DEFAULT_PORT, DEFAULT_TLS_PORT, probe
from rabbitry.uri import mask_text

__all__ = [
    "Protocol",
    "choose_stream_port",
    "other_broker_advice",
    "stream_port_from",
    "stream_problem",
]

STREAM_URL_ENV = "RABBITRY_STREAM_URL"
PROBE_TIMEOUT = 5.0


class Protocol(enum.Enum):
    AUTO = "auto"
    STREAM = "stream"
    AMQP = "amqp"

    @classmethod
    def parse(cls, text: str | None) -> Protocol:
        value = (text or "auto").strip().lower()
        try:
            return cls(value)
        except ValueError:
            raise SourceOptionError(
                f"protocol={text!r}: give stream (the stream protocol, port stream_port),"
                " amqp (AMQP 0-9-1) or auto (the stream protocol when the broker offers it)"
            ) from None


def stream_port_from(url: str, given: int | None, environ: Mapping[str, str]) -> int:
    """The stream port to try: ``given``, else ``RABBITRY_STREAM_URL``'s when it names the
    same host as ``url``, else the protocol's default: 5552, or 5551 (its TLS listener) when
    ``url`` is ``amqps://``, whose TLS settings the stream connection takes too."""
    if given is not None:
        return given
    stream_url = environ.get(STREAM_URL_ENV, "").strip()
    if stream_url:
        parts, amqp = urlsplit(stream_url), urlsplit(url)
        try:
            if parts.hostname == amqp.hostname and parts.port:
                return parts.port
        except ValueError:
            pass
    return DEFAULT_TLS_PORT if url.lower().startswith("amqps:") else DEFAULT_PORT


def choose_stream_port(
    settings: ConnectionSettings, protocol: Protocol, port: int, streams: Sequence[str]
) -> int | None:
    """The stream port the tasks read on, or None for AMQP 0-9-1; the choice is logged once."""
    where = f"{settings.host}:{port}"
    what = ", ".join(streams)
    if protocol is Protocol.AMQP:
        logger.info("rabbitmq source, %s: reading over AMQP 0-9-1 (protocol=amqp)", what)
        return None
    try:
        why = stream_problem(settings, port, streams)
    except OtherBroker as exc:
        if protocol is Protocol.STREAM:
            raise SparkSourceError(
                f"rabbitmq source: protocol=stream, but {exc}: {other_broker_advice(exc)}, or"
                " read with protocol=amqp"
            ) from None
        logger.warning(
            "rabbitmq source, %s: %s; reading over AMQP 0-9-1 from the AMQP URL's broker: %s",
            what,
            exc,
            other_broker_advice(exc),
        )
        return None
    if why is None:
        logger.info("rabbitmq source, %s: reading over the stream protocol at %s", what, where)
        return port
    if protocol is Protocol.STREAM:
        raise SparkSourceError(
            f"rabbitmq source: protocol=stream, but the stream protocol does not answer at"
            f" {where} ({why}): enable the rabbitmq_stream plugin and publish its port, give"
            " stream_port=, or read with protocol=amqp"
        )
    logger.warning(
        "rabbitmq source, %s: no stream protocol at %s (%s); reading over AMQP 0-9-1",
        what,
        where,
        why,
    )
    return None


def stream_problem(
    settings: ConnectionSettings, port: int, streams: Sequence[str] = ()
) -> str | None:
    """Why the tasks cannot use the stream protocol at ``port`` (None: they can); raises
    ``OtherBroker`` when it answers for another cluster than ``settings`` reaches over AMQP
    0-9-1."""
    try:
        with Channel(settings, timeout=PROBE_TIMEOUT) as channel:
            name = channel.server_properties.get("cluster_name")
    except BrokerError as exc:
        return f"the AMQP URL's broker could not be asked its cluster name: {mask_text(str(exc))}"
    cluster = name.decode(errors="replace") if isinstance(name, bytes) else name
    return probe(settings, port, streams, PROBE_TIMEOUT, cluster=cluster)


def other_broker_advice(exc: OtherBroker) -> str:
    """What to do when the stream port found is another broker's."""
    return (
        f"give stream_port= the port where cluster {exc.amqp_cluster!r} takes stream-protocol"
        " connections (for a container broker, the host port mapped to its 5552)"
    )
