"""Spark column types as the sink sees them (``ColumnKind``); pyspark's types only, so this
works on Spark 3.5 too, where ``pyspark.sql.datasource`` does not exist."""

from __future__ import annotations

from pyspark.sql import types as T

from rabbitry.spark.rows import Column, ColumnKind

__all__ = ["column_kind", "columns_of"]


def column_kind(data_type: T.DataType) -> ColumnKind:
    if isinstance(data_type, T.StringType | T.CharType | T.VarcharType):
        return ColumnKind.STRING
    if isinstance(data_type, T.BinaryType):
        return ColumnKind.BINARY
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return ColumnKind.INTEGRAL
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return ColumnKind.FRACTIONAL
    if isinstance(data_type, T.DecimalType):
        return ColumnKind.DECIMAL
    if isinstance(data_type, T.BooleanType):
        return ColumnKind.BOOLEAN
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return ColumnKind.TIMESTAMP
    if isinstance(data_type, T.DateType):
        return ColumnKind.DATE
    if isinstance(data_type, T.DayTimeIntervalType):
        return ColumnKind.INTERVAL
    if isinstance(data_type, T.StructType | T.ArrayType | T.MapType):
        return ColumnKind.NESTED
    return ColumnKind.OTHER


def columns_of(schema: T.StructType) -> tuple[Column, ...]:
    return tuple(
        Column(f.name, column_kind(f.dataType), f.dataType.simpleString()) for f in schema.fields
    )
