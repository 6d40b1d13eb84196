"""``publish_partitions``: the sink without the Data Source API, for Spark 3.5.

The same checks run on the driver and the same ``publish_rows`` runs in each task, through
``DataFrame.foreachPartition``; each successful task adds its report to an accumulator (Spark
counts a task's accumulator updates in an action once, however often the task ran), and the
totals come back to the caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark import AccumulatorParam, TaskContext

from rabbitry.spark.checks import plan_write
from rabbitry.spark.partition import publish_rows
from rabbitry.spark.report import PartitionReport, SinkTotals, log_totals
from rabbitry.spark.schema import columns_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class _Reports(AccumulatorParam[list[PartitionReport]]):
    def zero(self, value: list[PartitionReport]) -> list[PartitionReport]:
        return []

    def addInPlace(
        self, value1: list[PartitionReport], value2: list[PartitionReport]
    ) -> list[PartitionReport]:
        value1.extend(value2)
        return value1


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def publish_partitions(df: DataFrame, **options: Any) -> SinkTotals:
    """Publish every row of ``df``, one confirmed connection per partition; the totals.

    Takes the data source's options as keywords (``exchange="events", window=1024,
    header_columns=["kind"]``). Raises ``SparkSinkError`` before any task starts when an
    option, a column, the spec or the broker does not fit, and Spark's job error when a
    partition failed on every attempt.
    """
    raw = {key: _option_text(value) for key, value in options.items()}
    plan = plan_write(raw, columns_of(df.schema), streaming=False)
    if not plan.id_prefix:
        plan = type(plan)(plan.options, plan.columns, uuid.uuid4().hex, plan.delays)
    reports = df.sparkSession.sparkContext.accumulator([], _Reports())

    def run(rows: Iterable[Any]) -> None:
        context = TaskContext.get()
        assert context is not None
        report = publish_rows(
            plan,
            _tuples(rows),
            partition=context.partitionId(),
            attempt=context.attemptNumber(),
        )
        reports.add([report])

    df.foreachPartition(run)
    totals = SinkTotals.of(reports.value)
    log_totals(f"rabbitmq sink, job {plan.id_prefix}, done", totals)
    return totals


def _tuples(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    for row in rows:
        yield tuple(row)
