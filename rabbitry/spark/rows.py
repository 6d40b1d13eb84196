"""Rows to messages: which column is the body, the routing key, the headers, the id.

``RowEncoder`` checks the options against the DataFrame's columns once, on the driver (a
missing column or a wrong type fails the write before any row is published), and then turns
row tuples, in schema order, into ``Outgoing`` messages on the executors. Pure: columns are
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
from typing import Any, NamedTuple

from rabbitry.errors import SinkOptionError, SparkSinkError
from rabbitry.spark.ids import MessageIdScheme
from rabbitry.spark.options import SinkOptions


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


class Outgoing(NamedTuple):
    """One row's message: what varies per row (the rest is the same for every row)."""

    body: bytes
    routing_key: str
    headers: dict[str, Any] | None
    message_id: str
    delay: float | dt.timedelta | None


class RowEncoder:
    """Checks the options against the columns; one ``Outgoing`` message per row tuple.

    ``exchange``, ``content_type``, ``priority`` and ``expiration`` are the same for every row.
    """

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

    def json_body(self, row: Sequence[Any]) -> bytes:
        data = dict(zip(self._names, row, strict=True))
        return json.dumps(
            data, separators=(",", ":"), ensure_ascii=False, default=json_default
        ).encode("utf-8")

    @property
    def exchange(self) -> str:
        """The exchange of every row; "" with a delay column (the delay levels pick it)."""
        return "" if self._delay is not None else self.options.exchange

    def messages(
        self,
        rows: Iterable[Sequence[Any]],
        ids: MessageIdScheme,
        *,
        indices: Iterable[int] | None = None,
    ) -> Iterator[Outgoing]:
        """One message per row, in order; the row's index in the partition makes the id (by
        default the rows are the partition's from its first; else ``indices`` are theirs)."""
        opts = self.options
        key_index, id_index, delay_index = self._key, self._id, self._delay
        headers_spec = self._headers
        body_index, body_is_text = self._body, self._body_is_text
        for index, row in enumerate(rows) if indices is None else zip(indices, rows, strict=True):
            if body_index is None:
                body = self.json_body(row)
            else:
                value = row[body_index]
                if value is None:
                    raise SparkSinkError(
                        f"{ids.where(index)}: body column {opts.body_column!r} is null"
                    )
                body = value.encode("utf-8") if body_is_text else bytes(value)
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
            yield Outgoing(body, routing_key, headers, message_id, delay)


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
