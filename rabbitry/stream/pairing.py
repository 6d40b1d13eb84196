"""Whether a stream-protocol endpoint belongs to the broker an AMQP URL names. Pure: no I/O.

The stream port is found apart from the AMQP URL (an option, ``RABBITRY_STREAM_URL``, the
protocol's default 5552), so it can name another broker on the same host: a dev broker on
5552 beside a test broker on other ports. With the same credentials on both, a read or a write
there would succeed on the wrong broker. Each side says which cluster it is: AMQP 0-9-1 in
``connection.start``'s ``cluster_name``, the stream protocol in its peer properties'. Two
different names are two brokers; a side that gives no name (an older broker) proves nothing,
and the other checks stand (the source asks the stream port for the streams it reads).
"""

from __future__ import annotations

from rabbitry.errors import OtherBroker

__all__ = ["other_broker"]


def other_broker(
    amqp_cluster: str | None, stream_cluster: str | None, where: str
) -> OtherBroker | None:
    """The error to raise when the stream endpoint at ``where`` answers for another cluster
    than the AMQP URL reaches, or None when it may be the same broker."""
    if not amqp_cluster or not stream_cluster or amqp_cluster == stream_cluster:
        return None
    return OtherBroker(
        f"the stream port at {where} answers for cluster {stream_cluster!r}, not for"
        f" {amqp_cluster!r} that the AMQP URL reaches: it is another broker's",
        amqp_cluster=amqp_cluster,
        stream_cluster=stream_cluster,
    )
