"""Driver-side work of the source: which streams, what they hold, where a read starts.

Runs before any task: the streams must exist and be streams, the broker must answer, and the
offsets must make sense; every failure is a ``SparkSourceError`` that says which stream, where
and what to do. The tasks then read exact ranges (``StreamPartition``), so a task that runs
again reads the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from rabbitry.consumer.streams import FIRST_WAIT, StreamReader, offset_of
from rabbitry.errors import (
    BrokerError,
    SourceOptionError,
    SparkSourceError,
    StreamError,
    StreamNotFound,
)
from rabbitry.spark.offsets import (
    Bounds,
    DataLoss,
    OffsetKind,
    OffsetRange,
    OffsetSpec,
    data_lost,
    ranges,
    resolve,
)
from rabbitry.spark.report import logger
from rabbitry.spark.source_options import MAX_PARTITIONS, SourceOptions
from rabbitry.spark.source_protocol import Protocol, choose_stream_port
from rabbitry.spark.source_rows import row_of
from rabbitry.topology.patterns.super_streams import ORDER, Partition, partitions_in_order
from rabbitry.uri import mask_text, mask_uri, split_uris

if TYPE_CHECKING:
    from rabbitry.amqp.settings import ConnectionSettings
    from rabbitry.stream.frames import Chunk

MANAGEMENT_TIMEOUT = 10.0
BATCH_PATIENCE = 10.0
"""Seconds a batch read waits for a stream's first delivery before it calls the stream empty:
a busy broker (sharing its cores with Spark) can take seconds, and a stream called empty by
mistake would be a batch of no rows. A streaming trigger keeps the short wait: what it misses,
the next trigger reads."""

__all__ = ["SourcePlan", "StreamPartition", "plan_read", "read_chunks", "read_partition"]


@dataclass(frozen=True)
class StreamPartition:
    """What one task reads: ``range`` from the broker at ``url``. Picklable."""

    range: OffsetRange
    url: str = field(repr=False)
    prefetch: int = 2000
    read_timeout: float = 60.0
    connection_name: str = "rabbitry-spark"
    fail_on_data_loss: bool = True
    stream_port: int | None = None
    """Read over the stream protocol on this port; None: over AMQP 0-9-1."""


@dataclass(frozen=True)
class SourcePlan:
    options: SourceOptions
    streams: tuple[str, ...]
    stream_port: int | None = None
    """Where the tasks read over the stream protocol (``source_protocol``); None: AMQP 0-9-1."""

    def reader(self) -> StreamReader:
        return open_reader(self.options)

    def bounds(self, reader: StreamReader, *, patience: float = FIRST_WAIT) -> dict[str, Bounds]:
        """Each stream's bounds: over the stream protocol when the tasks read over it (a
        stream's edge chunks say where it ends), else (and for a stream whose edge chunk holds
        no message) by reading messages over AMQP 0-9-1 until they pause."""
        found: dict[str, tuple[int, int]] = {}
        if self.stream_port is not None:
            found = _stream_bounds(reader.settings, self.stream_port, self.streams, patience)
        rest = [s for s in self.streams if s not in found]
        if rest:
            found.update(_checked(lambda: reader.bounds_of(rest, patience=patience)))
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
            StreamPartition(
                r,
                o.url,
                o.prefetch,
                o.read_timeout,
                o.connection_name,
                o.fail_on_data_loss,
                self.stream_port,
            )
            for r in ranges(start, end, o.max_records_per_partition, o.min_partitions)
        ]


def _stream_bounds(
    settings: ConnectionSettings, port: int, streams: Sequence[str], patience: float
) -> dict[str, tuple[int, int]]:
    """``StreamClient.bounds`` of each of ``streams`` it can tell, on one connection."""
    from rabbitry.errors import StreamProtocolError, StreamRefused, StreamUnavailable
    from rabbitry.stream.blocking import StreamClient

    try:
        with StreamClient(settings, port=port) as client:
            found = {s: client.bounds(s, patience=patience) for s in streams}
    except (StreamRefused, StreamUnavailable, StreamProtocolError) as exc:
        names = ", ".join(streams)
        raise SparkSourceError(f"rabbitmq source, the bounds of {names}: {exc}") from None
    return {s: b for s, b in found.items() if b is not None}


def on_data_loss(losses: list[DataLoss], *, fail: bool, asked_by: str) -> None:
    """Offsets to read that retention removed: fail (``failOnDataLoss``, the default) or say
    how many are skipped and read on from the first offset held."""
    if not losses:
        return
    described = "; ".join(loss.describe() for loss in losses)
    if fail:
        raise SparkSourceError(
            f"rabbitmq source: {described}; asked for by {asked_by}. Those messages are gone:"
            " set failOnDataLoss=false to read on from the first offset held, or keep them"
            " longer (x-max-age, x-max-length-bytes) so that reads keep up"
        )
    skipped = sum(loss.skipped for loss in losses)
    logger.warning(
        "rabbitmq source: %s; asked for by %s. failOnDataLoss is false: skipped %d offsets,"
        " reading on from the first offset held",
        described,
        asked_by,
        skipped,
    )


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
    """The streams to read: ``stream=`` as given, or a super stream's partitions as its
    exchange's bindings name them, in partition order (``partitions=`` picks some). Where the
    management API cannot be asked, partitions are taken to be named ``<name>-<key>``, and
    numbered ones are found by trying ``-0``, ``-1``, ... in turn."""
    if options.streams:
        return options.streams
    name = options.super_stream
    assert name is not None
    bound, why = bound_partitions(options)
    if bound is not None:
        return _chosen(bound, options)
    logger.warning(
        "rabbitmq source: the partitions of super stream %r are taken to be named %s-<key>:"
        " its bindings could not be read (%s); give management_url= for partitions named"
        " otherwise",
        name,
        name,
        why,
    )
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
            f" {options.vhost!r} at {options.display_url}, and its bindings could not be read"
            f" ({why}): declare it (super_streams: in the spec, then rabbitry apply), give the"
            " management API with management_url=, or give its partition keys with partitions="
        )
    return tuple(found)


def bound_partitions(options: SourceOptions) -> tuple[list[Partition] | None, str]:
    """The super stream's partitions from its exchange's bindings, through the management
    API; (None, why) when the API cannot be asked. A missing exchange, or one that binds no
    partition, fails here: nothing could be read from it."""
    # the provisioner's client, loaded only for a super stream
    from rabbitry.management.client import ManagementClient, q, split_credentials

    name = options.super_stream
    assert name is not None
    base, user, password = options.management_url, None, None
    try:
        base, user, password = split_credentials(options.management_url)
        if user is None:
            amqp = urlsplit(split_uris(options.url)[0])
            user = unquote(amqp.username) if amqp.username is not None else None
            password = unquote(amqp.password) if amqp.password is not None else None
        with ManagementClient(
            options.management_url, username=user, password=password, timeout=MANAGEMENT_TIMEOUT
        ) as client:
            vhost, exchange = q(options.vhost), q(name)
            if client.get_optional(f"/exchanges/{vhost}/{exchange}") is None:
                raise SparkSourceError(
                    f"rabbitmq source: super stream {name!r} does not exist in vhost"
                    f" {options.vhost!r} at {mask_uri(base)} (no exchange of that name):"
                    " declare it (super_streams: in the spec, then rabbitry apply) or fix"
                    " super_stream="
                )
            bindings = client.get(f"/exchanges/{vhost}/{exchange}/bindings/source")
    except BrokerError as exc:
        return None, mask_text(str(exc))
    found = partitions_in_order(bindings)
    if not found:
        raise SparkSourceError(
            f"rabbitmq source: exchange {name!r} in vhost {options.vhost!r} binds no stream with"
            f" {ORDER}: it is not a super stream; read its streams with stream="
        )
    return found, ""


def _chosen(bound: list[Partition], options: SourceOptions) -> tuple[str, ...]:
    """The partitions ``partitions=`` picks (keys, or the first N), all of them without it."""
    name = options.super_stream
    if options.partitions:
        by_key = {p.key: p.stream for p in reversed(bound)}
        unknown = [key for key in options.partitions if key not in by_key]
        if unknown:
            raise SourceOptionError(
                f"partitions: super stream {name!r} has no partition bound with key(s)"
                f" {', '.join(map(repr, unknown))}; its keys: {', '.join(p.key for p in bound)}"
            )
        return tuple(dict.fromkeys(by_key[key] for key in options.partitions))
    count = options.partition_count
    if count is not None:
        if count > len(bound):
            raise SourceOptionError(
                f"partitions={count}: super stream {name!r} has {len(bound)} partition(s)"
            )
        return tuple(p.stream for p in bound[:count])
    return tuple(p.stream for p in bound)


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
        stream_port = None
        if streaming is not None:  # a read Spark runs, not the schema check
            stream_port = choose_stream_port(
                reader.settings,
                Protocol(options.protocol),
                options.stream_port,
                streams,
            )
        plan = SourcePlan(options, streams, stream_port)
        options.starting(streams)  # JSON offsets must name these streams
        options.ending(streams)
        if check:
            _checked(reader.check, streams)
    return plan


def batch_range(plan: SourcePlan) -> tuple[dict[str, int], dict[str, int]]:
    """(start, end) offsets of a batch read, as the streams are now."""
    options = plan.options
    with plan.reader() as reader:
        bounds = plan.bounds(reader, patience=BATCH_PATIENCE)
        starting = options.starting(plan.streams)
        start = plan.offsets(reader, starting, bounds)
        end = plan.offsets(reader, options.ending(plan.streams), bounds)
    on_data_loss(
        data_lost(starting.offsets, bounds),
        fail=options.fail_on_data_loss,
        asked_by="startingOffsets",
    )
    for stream in plan.streams:
        if end[stream] < start[stream]:
            raise SourceOptionError(
                f"endingOffsets of {stream!r} ({end[stream]}) is before its startingOffsets"
                f" ({start[stream]})"
            )
    return start, end


def read_partition(partition: StreamPartition) -> Iterator[tuple[Any, ...]]:
    """The rows of one partition's range, in offset order (runs in a task)."""
    if partition.stream_port is not None:
        return _stream_rows(partition)
    return _read_partition_amqp(partition)


def _stream_rows(partition: StreamPartition) -> Iterator[tuple[Any, ...]]:
    from rabbitry.spark.source_rows import stream_row_of

    stream = partition.range.stream
    for chunk in read_chunks(partition):
        for offset, record in enumerate(chunk.records, chunk.first_offset):
            yield stream_row_of(record, stream, offset)


def _missing_check(partition: StreamPartition, name: str) -> Any:
    r = partition.range

    def removed(at: int) -> None:
        # the range's first message has an offset past its start: retention ran between
        # planning and reading (or a micro-batch run again lost its offsets since), or the
        # start is an offset that is no message; the same rule as on the driver tells
        if at <= r.start + 1:
            return  # one offset that may be no message: nothing can have been lost
        with StreamReader(partition.url, prefetch=1, connection_name=name) as probe:
            first = probe.first_offset(r.stream)
        held = {r.stream: Bounds(at if first is None else first, at + 1)}
        on_data_loss(
            data_lost({r.stream: r.start}, held),
            fail=partition.fail_on_data_loss,
            asked_by=f"a task reading [{r.start}, {r.end})",
        )

    return removed


def read_chunks(partition: StreamPartition) -> Iterator[Chunk]:
    """The chunks of one partition's range over the stream protocol, cut to the range, in
    offset order (runs in a task; ``partition.stream_port`` is set): the same checks as
    ``read_partition`` over AMQP 0-9-1."""
    from rabbitry.amqp.settings import ConnectionSettings
    from rabbitry.errors import StreamProtocolError, StreamRefused, StreamUnavailable
    from rabbitry.stream.blocking import StreamClient

    r = partition.range
    assert partition.stream_port is not None
    name = f"{partition.connection_name} {r.stream}:{r.start}-{r.end}"
    settings = ConnectionSettings.from_url(partition.url, connection_name=name)
    try:
        with StreamClient(settings, port=partition.stream_port) as client:
            yield from client.read_chunks(
                r.stream,
                r.start,
                r.end,
                idle_timeout=partition.read_timeout,
                missing=_missing_check(partition, name),
            )
    except (StreamRefused, StreamUnavailable, StreamProtocolError) as exc:
        raise SparkSourceError(f"rabbitmq source, {r.stream} [{r.start}, {r.end}): {exc}") from None


def _read_partition_amqp(partition: StreamPartition) -> Iterator[tuple[Any, ...]]:
    r = partition.range
    name = f"{partition.connection_name} {r.stream}:{r.start}-{r.end}"
    reader = StreamReader(partition.url, prefetch=partition.prefetch, connection_name=name)
    removed = _missing_check(partition, name)

    try:
        for message in reader.read(
            r.stream, r.start, r.end, idle_timeout=partition.read_timeout, missing=removed
        ):
            yield row_of(message, r.stream, offset_of(message))
    except StreamError as exc:
        raise SparkSourceError(f"rabbitmq source, {r.stream} [{r.start}, {r.end}): {exc}") from None
    finally:
        reader.close()
