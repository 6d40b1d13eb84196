"""Rows to messages: which column is the body, the routing key, the headers, the id.

``RowEncoder`` checks the options against the DataFrame's columns once, on the driver (a
missing column or a wrong type fails the write before any row is published), and then turns
row tuples, in schema order, into ``Message`` objects on the executors. Pure: columns are
described by ``Column`` (name and ``ColumnKind``), so nothing here imports pyspark.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rabbitry.publisher.message import Message
from rabbitry.spark.ids import MessageIdScheme
from rabbitry.spark.options import SinkOptionError, SinkOptions, SparkSinkError


class ColumnKind(enum.StrEnum):
    """What a Spark column holds, as far as the sink cares."""

    STRING = "string"
    BINARY = "binary"
    INTEGRAL = "integral"
    FRACTIONAL = "fractional"
    DECIMAL = "decimal"
    BOOLEAN = "boolean"
    TIMESTAMP = "timestamp"
    DATE = "date"
    INTERVAL = "interval"
    NESTED = "nested"
    OTHER = "other"


@dataclass(frozen=True)
class Column:
    name: str
    kind: ColumnKind
    spark_type: str = ""

    def describe(self) -> str:
        return self.spark_type or self.kind.value


# Which kinds each column option accepts.
ACCEPTED: dict[str, frozenset[ColumnKind]] = {
    "body_column": frozenset({ColumnKind.BINARY, ColumnKind.STRING}),
    "routing_key_column": frozenset({ColumnKind.STRING}),
    "message_id_column": frozenset({ColumnKind.STRING, ColumnKind.INTEGRAL}),
    "delay_column": frozenset(
        {ColumnKind.INTEGRAL, ColumnKind.FRACTIONAL, ColumnKind.DECIMAL, ColumnKind.INTERVAL}
    ),
    "header_columns": frozenset(
        {
            ColumnKind.STRING,
            ColumnKind.INTEGRAL,
            ColumnKind.FRACTIONAL,
            ColumnKind.BOOLEAN,
            ColumnKind.TIMESTAMP,
        }
    ),
}

WHAT: dict[str, str] = {
    "body_column": "binary or string",
    "routing_key_column": "string",
    "message_id_column": "string or integer",
    "delay_column": "a number of seconds or a day-time interval",
    "header_columns": "string, number, boolean or timestamp",
}

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"


def json_default(value: Any) -> Any:
    """JSON for the values Spark rows hold that ``json`` does not know."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    as_dict = getattr(value, "asDict", None)  # pyspark Row (nested struct on the row path)
    if callable(as_dict):
        return as_dict(recursive=True)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


class RowEncoder:
    """Checks the options against the columns; builds one ``Message`` per row tuple."""

    def __init__(self, options: SinkOptions, columns: Sequence[Column]) -> None:
        self.options = options
        self.columns = tuple(columns)
        by_name = {c.name: i for i, c in enumerate(self.columns)}
        problems: list[str] = []
        for name, option in options.columns.items():
            index = by_name.get(name)
            if index is None:
                have = ", ".join(c.name for c in self.columns) or "none"
                problems.append(
                    f"{option}: column {name!r} is not in the DataFrame (columns: {have})"
                )
                continue
            column = self.columns[index]
            for opt in _options_naming(options, name):
                if column.kind not in ACCEPTED[opt]:
                    problems.append(
                        f"{opt}: column {name!r} is {column.describe()}; it must be {WHAT[opt]}"
                    )
        if problems:
            raise SinkOptionError("; ".join(problems))
        self._body = by_name[options.body_column] if options.body_column else None
        self._body_is_text = (
            self._body is not None and self.columns[self._body].kind is ColumnKind.STRING
        )
        self._key = by_name[options.routing_key_column] if options.routing_key_column else None
        self._id = by_name[options.message_id_column] if options.message_id_column else None
        self._delay = by_name[options.delay_column] if options.delay_column else None
        self._headers = tuple((h, by_name[h]) for h in options.header_columns)
        self._names = tuple(c.name for c in self.columns)
        if options.content_type:
            self.content_type: str | None = options.content_type
        elif self._body is None:
            self.content_type = JSON_TYPE
        elif self._body_is_text:
            self.content_type = TEXT_TYPE
        else:
            self.content_type = None

    def body(self, row: Sequence[Any], where: str) -> bytes:
        if self._body is None:
            data = dict(zip(self._names, row, strict=True))
            return json.dumps(
                data, separators=(",", ":"), ensure_ascii=False, default=json_default
            ).encode("utf-8")
        value = row[self._body]
        if value is None:
            raise SparkSinkError(f"{where}: body column {self.options.body_column!r} is null")
        if isinstance(value, str):
            return value.encode("utf-8")
        return bytes(value)

    def messages(self, rows: Iterable[Sequence[Any]], ids: MessageIdScheme) -> Iterator[Message]:
        """One message per row, in order; the row index in the partition makes the id."""
        opts = self.options
        key_index, id_index, delay_index = self._key, self._id, self._delay
        headers_spec = self._headers
        exchange = None if delay_index is not None else opts.exchange
        for index, row in enumerate(rows):
            body = self.body(row, ids.where(index))
            routing_key = opts.routing_key
            if key_index is not None:
                value = row[key_index]
                if value is None:
                    raise SparkSinkError(
                        f"{ids.where(index)}: routing key column "
                        f"{opts.routing_key_column!r} is null"
                    )
                routing_key = value
            if id_index is not None:
                value = row[id_index]
                if value is None:
                    raise SparkSinkError(
                        f"{ids.where(index)}: message id column {opts.message_id_column!r} is null"
                    )
                message_id = str(value)
            else:
                message_id = ids.message_id(index)
            headers = None
            if headers_spec:
                headers = {name: row[i] for name, i in headers_spec if row[i] is not None}
            delay = None
            if delay_index is not None:
                value = row[delay_index]
                delay = 0.0 if value is None else _seconds(value)
            yield Message(
                body,
                routing_key=routing_key,
                exchange=exchange,
                headers=headers,
                message_id=message_id,
                delay=delay,
                content_type=self.content_type,
                priority=opts.priority,
                expiration=opts.expiration,
            )


def _options_naming(options: SinkOptions, column: str) -> list[str]:
    found = [
        opt
        for opt in ("routing_key_column", "body_column", "message_id_column", "delay_column")
        if getattr(options, opt) == column
    ]
    if column in options.header_columns:
        found.append("header_columns")
    return found


def _seconds(value: Any) -> float | dt.timedelta:
    if isinstance(value, dt.timedelta):
        return value
    return float(value)
