"""Driver-side work of the source: which streams, what they hold, where a read starts.

Runs before any task: the streams must exist and be streams, the broker must answer, and the
offsets must make sense; every failure is a ``SparkSourceError`` that says which stream, where
and what to do. The tasks then read exact ranges (``StreamPartition``), so a task that runs
again reads the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rabbitry.consumer.streams import StreamError, StreamNotFound, StreamReader, offset_of
from rabbitry.spark.offsets import Bounds, OffsetKind, OffsetRange, OffsetSpec, ranges, resolve
from rabbitry.spark.options import SourceOptionError, SparkSourceError
from rabbitry.spark.source_options import MAX_PARTITIONS, SourceOptions
from rabbitry.spark.source_rows import row_of

__all__ = ["SourcePlan", "StreamPartition", "plan_read", "read_partition"]


@dataclass(frozen=True)
class StreamPartition:
    """What one task reads: ``range`` from the broker at ``url``. Picklable."""

    range: OffsetRange
    url: str = field(repr=False)
    prefetch: int = 2000
    read_timeout: float = 60.0
    connection_name: str = "rabbitry-spark"


@dataclass(frozen=True)
class SourcePlan:
    options: SourceOptions
    streams: tuple[str, ...]

    def reader(self) -> StreamReader:
        return open_reader(self.options)

    def bounds(self, reader: StreamReader) -> dict[str, Bounds]:
        found = _checked(reader.bounds_of, self.streams)
        return {stream: Bounds(*found[stream]) for stream in self.streams}

    def offsets(
        self, reader: StreamReader, spec: OffsetSpec, bounds: Mapping[str, Bounds]
    ) -> dict[str, int]:
        """``spec`` as offsets per stream (a timestamp asks the broker where it falls)."""
        found: dict[str, int] = {}
        if spec.kind is OffsetKind.TIMESTAMP and spec.timestamp is not None:
            for stream in self.streams:
                at = _checked(reader.offset_at, stream, spec.timestamp)
                if at is not None:
                    found[stream] = at
        return resolve(spec, bounds, found)

    def partitions(self, start: Mapping[str, int], end: Mapping[str, int]) -> list[StreamPartition]:
        o = self.options
        return [
            StreamPartition(r, o.url, o.prefetch, o.read_timeout, o.connection_name)
            for r in ranges(start, end, o.max_records_per_partition, o.min_partitions)
        ]


def open_reader(options: SourceOptions) -> StreamReader:
    return StreamReader(
        options.url, prefetch=options.prefetch, connection_name=options.connection_name
    )


def _checked(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except StreamError as exc:
        raise SparkSourceError(f"rabbitmq source: {exc}") from None


def find_streams(reader: StreamReader, options: SourceOptions) -> tuple[str, ...]:
    """The streams to read: ``stream=`` as given, or a super stream's partitions (named
    ``<name>-<key>``; numbered ones are found by trying ``-0``, ``-1``, ... in turn)."""
    if options.streams:
        return options.streams
    name = options.super_stream
    assert name is not None
    if options.partitions:
        return tuple(f"{name}-{key}" for key in options.partitions)
    if options.partition_count is not None:
        return tuple(f"{name}-{i}" for i in range(options.partition_count))
    found: list[str] = []
    while len(found) < MAX_PARTITIONS:
        stream = f"{name}-{len(found)}"
        try:
            reader.check([stream])
        except StreamNotFound:
            break
        except StreamError as exc:
            raise SparkSourceError(f"rabbitmq source: {exc}") from None
        found.append(stream)
    if not found:
        raise SparkSourceError(
            f"rabbitmq source: super stream {name!r} has no partition stream {name}-0 in vhost"
            f" {options.vhost!r} at {options.display_url}: declare it (super_streams: in the"
            " spec, then rabbitry apply), or give its partition keys with partitions="
        )
    return tuple(found)


def plan_read(
    raw_options: Mapping[str, str],
    *,
    streaming: bool | None,
    check: bool = True,
    environ: Mapping[str, str] | None = None,
) -> SourcePlan:
    """Parse the options and find the streams, checking that each is a stream on the broker
    (``streaming`` None: options of either kind of read are accepted). Without ``check`` the
    streams are checked by the caller's next question to the broker (their bounds)."""
    options = SourceOptions.parse(raw_options, streaming=streaming, environ=environ)
    with open_reader(options) as reader:
        streams = find_streams(reader, options)
        plan = SourcePlan(options, streams)
        options.starting(streams)  # JSON offsets must name these streams
        options.ending(streams)
        if check:
            _checked(reader.check, streams)
    return plan


def batch_range(plan: SourcePlan) -> tuple[dict[str, int], dict[str, int]]:
    """(start, end) offsets of a batch read, as the streams are now."""
    options = plan.options
    with plan.reader() as reader:
        bounds = plan.bounds(reader)
        start = plan.offsets(reader, options.starting(plan.streams), bounds)
        end = plan.offsets(reader, options.ending(plan.streams), bounds)
    for stream in plan.streams:
        if end[stream] < start[stream]:
            raise SourceOptionError(
                f"endingOffsets of {stream!r} ({end[stream]}) is before its startingOffsets"
                f" ({start[stream]})"
            )
    return start, end


def read_partition(partition: StreamPartition) -> Iterator[tuple[Any, ...]]:
    """The rows of one partition's range, in offset order (runs in a task)."""
    r = partition.range
    name = f"{partition.connection_name} {r.stream}:{r.start}-{r.end}"
    reader = StreamReader(partition.url, prefetch=partition.prefetch, connection_name=name)
    try:
        for message in reader.read(r.stream, r.start, r.end, idle_timeout=partition.read_timeout):
            yield row_of(message, r.stream, offset_of(message))
    except StreamError as exc:
        raise SparkSourceError(f"rabbitmq source, {r.stream} [{r.start}, {r.end}): {exc}") from None
    finally:
        reader.close()
