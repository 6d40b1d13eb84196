"""The Python Data Source ``rabbitmq`` (Spark 4): batch and streaming writers and readers.

Reading (stream queues and super streams) lives in ``rabbitry.spark.reader``; see there.

``writer``/``streamWriter`` run on the driver: they parse the options, check them against the
DataFrame's schema, the spec and the broker, and fail the write there, before any task
starts. Each task then publishes its partition through one confirmed connection
(``publish_rows``) and returns a ``PartitionCommit``; ``commit`` logs the totals on the driver.
Rows arrive as Arrow record batches where Spark offers it (batch writes since 4.0, streaming
since 4.1): reading columns whole is cheaper than building a ``Row`` per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from rabbitry.errors import SinkOptionError
from rabbitry.spark.checks import plan_write
from rabbitry.spark.partition import SinkPlan, publish_batches, publish_rows
from rabbitry.spark.reader import SOURCE_TYPE, RabbitMQBatchReader, RabbitMQStreamReader
from rabbitry.spark.report import PartitionReport, SinkTotals, log_totals, logger
from rabbitry.spark.schema import columns_of
from rabbitry.spark.source_plan import plan_read

try:  # Spark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase

    _STREAM_ARROW = True
except ImportError:  # pragma: no cover - Spark 4.0
    _StreamBase = DataSourceStreamWriter  # type: ignore[misc,assignment]
    _STREAM_ARROW = False

NAME = "rabbitmq"
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


@dataclasses.dataclass(frozen=True)
class PartitionCommit(WriterCommitMessage):
    """A task's commit message: what it published, all of it confirmed."""

    report: PartitionReport


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:  # pragma: no cover - Spark always runs write() in a task
        raise RuntimeError("the rabbitmq sink's write() runs inside a Spark task")
    return context


def _reports(messages: Sequence[WriterCommitMessage | None]) -> list[PartitionReport | None]:
    return [m.report if isinstance(m, PartitionCommit) else None for m in messages]


class RabbitMQBatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = _task()
        report = publish_batches(
            self.plan,
            iterator,
            partition=context.partitionId(),
            attempt=context.attemptNumber(),
        )
        return PartitionCommit(report)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        totals = SinkTotals.of(_reports(messages))
        log_totals(f"rabbitmq sink, job {self.plan.id_prefix}, committed", totals)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = SinkTotals.of(_reports(messages))
        logger.warning(
            "rabbitmq sink, job %s, failed; partitions that completed first: %s",
            self.plan.id_prefix,
            done.describe(),
        )


class RabbitMQStreamWriter(_StreamBase):
    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = _task()
        batch = int(context.getLocalProperty(BATCH_ID) or 0)
        plan = self.plan
        if not plan.id_prefix:
            query = context.getLocalProperty(QUERY_ID) or "stream"
            plan = dataclasses.replace(plan, id_prefix=query)
        publish = publish_batches if _STREAM_ARROW else publish_rows
        report = publish(
            plan,
            iterator,
            partition=context.partitionId(),
            batch=batch,
            attempt=context.attemptNumber(),
        )
        return PartitionCommit(report)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        totals = SinkTotals.of(_reports(messages))
        log_totals(f"rabbitmq sink, micro-batch {batchId}, committed", totals)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = SinkTotals.of(_reports(messages))
        logger.warning(
            "rabbitmq sink, micro-batch %d, failed; partitions that completed first: %s",
            batchId,
            done.describe(),
        )


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise SinkOptionError(
            'messages cannot be overwritten: write with .mode("append") (or outputMode("append"))'
        )


class RabbitMQDataSource(DataSource):
    """``df.write.format("rabbitmq")``, ``df.writeStream.format("rabbitmq")``,
    ``spark.read.format("rabbitmq")``, ``spark.readStream.format("rabbitmq")``: docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> T.StructType:
        # load() asks for the schema on the driver: the source's options and streams are
        # checked here, before a query or a job starts
        plan_read(self.options, streaming=None)
        return SOURCE_TYPE

    def reader(self, schema: T.StructType) -> RabbitMQBatchReader:
        return RabbitMQBatchReader(plan_read(self.options, streaming=False, check=False))

    def streamReader(self, schema: T.StructType) -> RabbitMQStreamReader:
        return RabbitMQStreamReader(plan_read(self.options, streaming=True, check=False))

    def writer(self, schema: T.StructType, overwrite: bool) -> RabbitMQBatchWriter:
        _append_only(overwrite)
        return RabbitMQBatchWriter(plan_write(self.options, columns_of(schema), streaming=False))

    def streamWriter(self, schema: T.StructType, overwrite: bool) -> RabbitMQStreamWriter:
        _append_only(overwrite)
        return RabbitMQStreamWriter(plan_write(self.options, columns_of(schema), streaming=True))
