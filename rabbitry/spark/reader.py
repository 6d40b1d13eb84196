"""The ``rabbitmq`` source's Spark side: batch and streaming readers over stream queues.

Offsets are per stream: the offset of the next message to read. A batch read fixes
``[startingOffsets, endingOffsets)`` on the driver when Spark plans it; a streaming query asks
``latestOffset`` at each trigger and Spark writes the answer to its checkpoint before any task
reads, so a micro-batch run again (a failed task, a restart) reads the same ranges. Each range
is one task, cut at ``maxRecordsPerPartition`` messages; ``read`` runs in the task and opens its
own connection (``rabbitry.spark.source_plan.read_partition``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from rabbitry.consumer.streams import StreamReader
from rabbitry.errors import SparkSourceError
from rabbitry.spark.offsets import Bounds, cap, checked_offsets, data_lost, offsets_json
from rabbitry.spark.report import logger
from rabbitry.spark.source_columns import chunk_batches
from rabbitry.spark.source_plan import (
    SourcePlan,
    StreamPartition,
    batch_range,
    on_data_loss,
    read_chunks,
    read_partition,
)
from rabbitry.spark.source_rows import PROPERTY_FIELDS

try:  # Spark 4.2+: the engine passes a read limit to latestOffset
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

    _LIMITS = True
except ImportError:  # pragma: no cover - Spark 4.0 and 4.1
    _LIMITS = False


BATCH_ROWS = 16384
"""Rows per Arrow record batch a task hands to Spark (at most ``BATCH_BYTES`` of bodies over
the stream protocol). Against 4096, reading 1,000,000 1 KB messages over the stream protocol
into parquet took the tasks' Python workers 1.8-1.9 s of CPU instead of 2.1-2.2 s (fewer Arrow
calls a row) and the JVM no more; 32768 cost the JVM more (bench/spark_source.py)."""

_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "timestamp": T.TimestampType(),
}

SOURCE_TYPE = T.StructType(
    [
        T.StructField("body", T.BinaryType()),
        T.StructField("routing_key", T.StringType()),
        T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
        T.StructField(
            "properties",
            T.StructType([T.StructField(name, _TYPES[kind]) for name, kind in PROPERTY_FIELDS]),
        ),
        T.StructField("stream", T.StringType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
    ]
)
"""The rows' schema: ``rabbitry.spark.source_rows.COLUMNS`` with their Spark types."""


@functools.cache
def arrow_schema() -> pa.Schema:
    """``SOURCE_TYPE`` as Arrow: the schema of every record batch a task hands to Spark."""
    return to_arrow_schema(SOURCE_TYPE, timezone="UTC")


def arrow_batches(rows: Iterable[tuple[Any, ...]]) -> Iterator[pa.RecordBatch]:
    """Rows as Arrow record batches, built a column at a time: Spark would otherwise convert
    every value of the map and struct columns through a Python function of its own."""
    schema = arrow_schema()
    it = iter(rows)
    while chunk := list(itertools.islice(it, BATCH_ROWS)):
        columns = zip(*chunk, strict=True)
        arrays = [
            pa.array(list(values), type=field.type)
            for values, field in zip(columns, schema, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _spark_partitions(partitions: list[StreamPartition]) -> list[InputPartition]:
    return [InputPartition(p) for p in partitions]


def _read(partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    value = getattr(partition, "value", None)
    if value is None:  # Spark reads one empty partition when partitions() lists none
        return iter(())
    if not isinstance(value, StreamPartition):  # pragma: no cover - Spark hands ours back
        raise TypeError(f"not a partition of the rabbitmq source: {value!r}")
    if value.stream_port is not None:
        # over the stream protocol the columns are read from whole chunks: no row objects
        return chunk_batches(read_chunks(value), value.range.stream, arrow_schema(), BATCH_ROWS)
    return arrow_batches(read_partition(value))


class RabbitMQBatchReader(DataSourceReader):
    """``spark.read.format("rabbitmq")``: the offsets are fixed when Spark plans the read."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self.start, self.end = batch_range(plan)
        logger.info(
            "rabbitmq source, batch read of %s: %s to %s",
            ", ".join(plan.streams),
            self.start,
            self.end,
        )

    def partitions(self) -> Sequence[InputPartition]:
        return _spark_partitions(self.plan.partitions(self.start, self.end))

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class RabbitMQStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("rabbitmq")``: offsets per stream in Spark's checkpoint."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self._reader: StreamReader | None = None
        self._previous: dict[str, int] | None = None
        self._bounds_seen: dict[str, Bounds] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the reader is shipped to the tasks for read(): not its driver-side connection
        state = dict(self.__dict__)
        state["_reader"] = None
        return state

    def _connection(self) -> StreamReader:
        if self._reader is None:
            self._reader = self.plan.reader()
        return self._reader

    def _bounds(self) -> dict[str, Bounds]:
        try:
            found = self.plan.bounds(self._connection())
        except SparkSourceError:
            # The driver's connection idles between triggers (no heartbeats are answered
            # meanwhile), so the broker may have dropped it: once more on a fresh one.
            self.stop()
            try:
                found = self.plan.bounds(self._connection())
            except BaseException:
                self.stop()
                raise
        self._bounds_seen = found
        return found

    def _begin(self, start: dict[str, Any], bounds: dict[str, Bounds]) -> dict[str, int]:
        """Where a micro-batch from ``start`` (as the checkpoint has it) begins: a stream
        added since (-2) at its first offset, and an offset retention removed at the first
        one held."""
        begin = checked_offsets(start, self.plan.streams)
        return {
            s: bounds[s].first if o == -2 else max(o, bounds[s].first, 0) for s, o in begin.items()
        }

    def initialOffset(self) -> dict[str, int]:
        reader = self._connection()
        bounds = self._bounds()
        start = self.plan.offsets(reader, self.plan.options.starting(self.plan.streams), bounds)
        self._previous = start
        return offsets_json(start)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, int]:
        bounds = self._bounds()
        begin = self._begin(start, bounds) if start is not None else self._previous
        latest = {s: b.next for s, b in bounds.items()}
        if begin is None:
            begin = latest
        max_rows = self.plan.options.max_records_per_trigger
        if _LIMITS and isinstance(limit, ReadAllAvailable):
            max_rows = None
        elif _LIMITS and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        end = cap({s: max(o, 0) for s, o in begin.items()}, latest, max_rows)
        self._previous = end
        return offsets_json(end)

    if _LIMITS:

        def getDefaultReadLimit(self) -> ReadLimit:
            rows = self.plan.options.max_records_per_trigger
            return ReadMaxRows(rows) if rows is not None else ReadAllAvailable()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The micro-batch's tasks. Offsets of ``start`` that retention has removed (the query
        was stopped, or fell behind, for longer than the streams keep messages) fail the
        query, or with ``failOnDataLoss`` false are skipped with a warning."""
        streams = self.plan.streams
        # a micro-batch run again after a restart comes here without latestOffset
        bounds = self._bounds_seen if self._bounds_seen is not None else self._bounds()
        on_data_loss(
            data_lost(checked_offsets(start, streams), bounds),
            fail=self.plan.options.fail_on_data_loss,
            asked_by="the query's checkpoint (where the micro-batch starts)",
        )
        begin = self._begin(start, bounds)
        return _spark_partitions(self.plan.partitions(begin, checked_offsets(end, streams)))

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the stream keeps its messages and Spark keeps the offsets."""

    def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
