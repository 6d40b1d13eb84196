"""Commit reports add up to the driver's totals; Spark types map to the kinds the sink checks."""

from __future__ import annotations

from pyspark.sql import types as T

from rabbitry.spark.report import PartitionReport, SinkTotals
from rabbitry.spark.rows import ColumnKind
from rabbitry.spark.schema import column_kind, columns_of


def test_totals_count_rows_bytes_confirms_and_retries() -> None:
    reports = [
        PartitionReport(0, rows=10, bytes=100, confirms=10, seconds=1.0),
        PartitionReport(1, rows=5, bytes=50, confirms=5, attempt=1, republished=2, seconds=0.5),
        None,  # a failed task's slot
    ]
    totals = SinkTotals.of(reports)
    assert totals == SinkTotals(
        partitions=2, rows=15, bytes=150, confirms=15, retries=1, republished=2, seconds=1.0
    )
    assert totals.describe() == (
        "15 rows (150 body bytes) in 2 partition(s), 15 confirms, 1 task retries,"
        " 2 republished, 15 rows/s while publishing"
    )


def test_spark_types_map_to_column_kinds() -> None:
    assert column_kind(T.StringType()) is ColumnKind.STRING
    assert column_kind(T.BinaryType()) is ColumnKind.BINARY
    assert column_kind(T.LongType()) is ColumnKind.INTEGRAL
    assert column_kind(T.DoubleType()) is ColumnKind.FRACTIONAL
    assert column_kind(T.DecimalType(10, 2)) is ColumnKind.DECIMAL
    assert column_kind(T.TimestampType()) is ColumnKind.TIMESTAMP
    assert column_kind(T.DayTimeIntervalType()) is ColumnKind.INTERVAL
    assert column_kind(T.ArrayType(T.StringType())) is ColumnKind.NESTED
    schema = T.StructType([T.StructField("a", T.IntegerType()), T.StructField("b", T.BinaryType())])
    assert [(c.name, c.kind, c.describe()) for c in columns_of(schema)] == [
        ("a", ColumnKind.INTEGRAL, "int"),
        ("b", ColumnKind.BINARY, "binary"),
    ]
