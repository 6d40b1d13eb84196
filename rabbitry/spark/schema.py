"""Spark column types as the sink sees them (``ColumnKind``); pyspark's types only, so this
works on Spark 3.5 too, where ``pyspark.sql.datasource`` does not exist."""

from __future__ import annotations

from pyspark.sql import types as T

from rabbitry.spark.rows import Column, ColumnKind

__all__ = ["column_kind", "columns_of"]


_KINDS: tuple[tuple[tuple[type[T.DataType], ...], ColumnKind], ...] = (
    ((T.StringType, T.CharType, T.VarcharType), ColumnKind.STRING),
    ((T.BinaryType,), ColumnKind.BINARY),
    ((T.ByteType, T.ShortType, T.IntegerType, T.LongType), ColumnKind.INTEGRAL),
    ((T.FloatType, T.DoubleType), ColumnKind.FRACTIONAL),
    ((T.DecimalType,), ColumnKind.DECIMAL),
    ((T.BooleanType,), ColumnKind.BOOLEAN),
    ((T.TimestampType, T.TimestampNTZType), ColumnKind.TIMESTAMP),
    ((T.DateType,), ColumnKind.DATE),
    ((T.DayTimeIntervalType,), ColumnKind.INTERVAL),
    ((T.StructType, T.ArrayType, T.MapType), ColumnKind.NESTED),
)
"""Spark's types by the kind the sink sees (subclasses included: CharType is a string)."""


def column_kind(data_type: T.DataType) -> ColumnKind:
    for types, kind in _KINDS:
        if isinstance(data_type, types):
            return kind
    return ColumnKind.OTHER


def columns_of(schema: T.StructType) -> tuple[Column, ...]:
    return tuple(
        Column(f.name, column_kind(f.dataType), f.dataType.simpleString()) for f in schema.fields
    )
