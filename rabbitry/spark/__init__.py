"""Publish Spark DataFrames to RabbitMQ through confirms, and read its streams: the
``rabbitmq`` data source.

```python
import rabbitry.spark
rabbitry.spark.register(spark)
df.write.format("rabbitmq").mode("append").option("exchange", "events").save()
orders = spark.read.format("rabbitmq").option("stream", "orders").load()
```

Each partition's task publishes over one connection with a window of unconfirmed messages and
succeeds only when every row was confirmed; ids are deterministic, so a retried task or a
replayed micro-batch republishes rows under the ids they had. Reading, each task reads an
exact range of stream offsets, kept in Spark's checkpoint. See docs/spark.md.
Needs pyspark (the cluster's: Spark 4 for the data source, 3.5 for ``publish_partitions``) and
pyarrow (the ``spark`` extra; ``spark-local`` adds pyspark for a machine without a cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rabbitry.errors import SinkOptionError, SourceOptionError, SparkSinkError, SparkSourceError
from rabbitry.spark.ids import MessageIdScheme, parse_message_id
from rabbitry.spark.options import OPTIONS, SinkOptions
from rabbitry.spark.partition import SinkPlan, publish_rows
from rabbitry.spark.report import PartitionReport, SinkTotals
from rabbitry.spark.rows import Column, ColumnKind, RowEncoder
from rabbitry.spark.source_options import SOURCE_OPTIONS, SourceOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "OPTIONS",
    "SOURCE_OPTIONS",
    "Column",
    "ColumnKind",
    "MessageIdScheme",
    "PartitionReport",
    "RowEncoder",
    "SinkOptionError",
    "SinkOptions",
    "SinkPlan",
    "SinkTotals",
    "SourceOptionError",
    "SourceOptions",
    "SparkSinkError",
    "SparkSourceError",
    "parse_message_id",
    "publish_partitions",
    "publish_rows",
    "register",
]


def register(spark: SparkSession) -> None:
    """Make ``format("rabbitmq")`` available in this session (batch and streaming writes and
    reads)."""
    from rabbitry.spark.pyspark_version import DATA_SOURCE_API, require

    require(DATA_SOURCE_API, 'format("rabbitmq") (the Python Data Source API)')
    from rabbitry.spark.source import RabbitMQDataSource

    spark.dataSource.register(RabbitMQDataSource)


def publish_partitions(df: DataFrame, **options: Any) -> SinkTotals:
    """The sink over ``foreachPartition`` (Spark 3.5 and later); see ``rabbitry.spark.foreach``."""
    from rabbitry.spark.pyspark_version import FOREACH_PARTITION, require

    require(FOREACH_PARTITION, "publish_partitions")
    from rabbitry.spark.foreach import publish_partitions as run

    return run(df, **options)
