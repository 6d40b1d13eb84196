"""The source's rows: one per stream message, columns as ``COLUMNS`` names them (their Spark
types: ``rabbitry.spark.reader.SOURCE_TYPE``).

``body`` is the message body as it was published (binary: ``CAST(body AS STRING)`` or
``from_json(CAST(body AS STRING), ...)`` to decode it); ``headers`` holds the application
headers as text (the broker's ``x-stream-offset`` is the ``offset`` column instead);
``properties`` the AMQP basic properties; ``timestamp`` the message's timestamp property (set
by publishers such as rabbitry's, null when absent). Pure: no Spark import, no I/O.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.streams import OFFSET_HEADER

__all__ = ["COLUMNS", "PROPERTY_FIELDS", "header_text", "row_of", "stream_row_of"]

# (name, Spark type) of the properties struct, in order.
PROPERTY_FIELDS: tuple[tuple[str, str], ...] = (
    ("message_id", "string"),
    ("correlation_id", "string"),
    ("content_type", "string"),
    ("content_encoding", "string"),
    ("type", "string"),
    ("app_id", "string"),
    ("user_id", "string"),
    ("reply_to", "string"),
    ("expiration", "string"),
    ("delivery_mode", "int"),
    ("priority", "int"),
    ("timestamp", "timestamp"),
)

COLUMNS = ("body", "routing_key", "headers", "properties", "stream", "offset", "timestamp")


def header_text(value: Any) -> str | None:
    """A header value as text: strings as they are, bytes as UTF-8, tables and arrays as JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=header_text, separators=(",", ":"))
    return str(value)


def _moment(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    if isinstance(value, int):
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    return None


_NAMES = tuple(name for name, _ in PROPERTY_FIELDS)
_STAMP = _NAMES.index("timestamp")


def row_of(message: IncomingMessage, stream: str, offset: int) -> tuple[Any, ...]:
    """The row of one delivery from ``stream`` at ``offset``."""
    props = message.properties
    raw_headers = props.get("headers")
    headers = (
        {str(k): header_text(v) for k, v in raw_headers.items() if k != OFFSET_HEADER}
        if raw_headers
        else {}
    )
    properties = list(map(props.get, _NAMES))
    stamp = properties[_STAMP] = _moment(properties[_STAMP])
    return (message.body, message.routing_key, headers, tuple(properties), stream, offset, stamp)


def stream_row_of(record: bytes | memoryview, stream: str, offset: int) -> tuple[Any, ...]:
    """The row of one stream entry read over the stream protocol (the message as the stream
    stores it): the same row ``row_of`` makes of its AMQP 0-9-1 delivery."""
    from rabbitry.stream.amqp10 import decode

    m = decode(record)
    headers = {str(k): header_text(v) for k, v in m.headers.items()} if m.headers else {}
    props = m.properties
    return (
        m.body,
        m.routing_key,
        headers,
        tuple(map(props.get, _NAMES)),
        stream,
        offset,
        props.get("timestamp"),
    )
