"""The sink into a stream or super stream over the stream protocol: exactly once.

Each task publishes as a named producer, ``<id prefix>:<batch>:<partition>`` (the message id
without the row: ``rabbitry.spark.ids``), and gives row ``i`` of its partition the publishing
id ``i + 1``. The broker stores, per producer name and stream, the highest publishing id it
holds, and drops a message whose id is not above it: a retried task, a replayed micro-batch
(same query id and batch) or a job run again with the same ``id_prefix`` stores each row once.
This holds when a partition's rows come in the same order each time (as the deterministic
message ids need too). Queues, delays, priority and expiration keep the confirmed AMQP path.

The driver decides (``stream_target``): ``exchange`` '' with a fixed ``routing_key`` naming a
stream, or ``exchange`` naming a super stream; ``protocol=auto`` probes the stream port (it
must answer for the cluster the AMQP URL reaches, not another broker on that host) and falls
back with one log line, ``protocol=stream`` fails without it, ``protocol=amqp`` never tries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import (
    OtherBroker,
    SinkOptionError,
    SparkSinkError,
    StreamProtocolError,
    StreamRefused,
    StreamUnavailable,
)
from rabbitry.spark.ids import MessageIdScheme
from rabbitry.spark.options import SinkOptions
from rabbitry.spark.report import PartitionReport, logger
from rabbitry.spark.rows import RowEncoder
from rabbitry.spark.sink_records import RecordEncoder, positions, spans, stored
from rabbitry.spark.source_protocol import other_broker_advice, stream_problem
from rabbitry.stream.blocking import Producer, PublishCount, StreamClient
from rabbitry.uri import mask_text, split_uris

__all__ = ["StreamTarget", "publish_batches_streamed", "publish_rows_streamed", "stream_target"]


@dataclass(frozen=True)
class StreamTarget:
    """Where the tasks write over the stream protocol: one stream, or a super stream."""

    port: int
    stream: str | None = None
    super_stream: str | None = None


def _why_not(options: SinkOptions, has_delays: bool) -> str | None:
    """Why these options must take the AMQP path (None: the stream protocol can carry them)."""
    if has_delays or options.delay_column is not None:
        return "delays go through exchanges"
    if options.priority is not None or options.expiration is not None:
        return "priority and expiration are AMQP 0-9-1 properties here"
    if not options.exchange and options.routing_key_column is not None:
        return "routing_key_column through the default exchange names queues row by row"
    if not options.exchange and not options.routing_key:
        return "no stream named"
    if len(split_uris(options.url)) > 1:
        return "several URLs: the AMQP path walks a cluster's nodes"
    return None


def stream_target(options: SinkOptions, *, has_delays: bool, port: int) -> StreamTarget | None:
    """The stream (or super stream) the rows go to over the stream protocol, or None for the
    AMQP path; the choice is logged once, on the driver."""
    name = options.exchange or options.routing_key
    if options.protocol == "amqp":
        return None
    reason = _why_not(options, has_delays)
    if reason is not None:
        if options.protocol == "stream":
            raise SinkOptionError(f"protocol=stream cannot write {name!r}: {reason}")
        return None
    settings = ConnectionSettings.from_url(options.url)
    try:
        why = stream_problem(settings, port)
    except OtherBroker as exc:
        if options.protocol == "stream":
            raise SparkSinkError(
                f"rabbitmq sink: protocol=stream, but {exc}: {other_broker_advice(exc)}, or"
                " write with protocol=amqp"
            ) from None
        logger.warning(
            "rabbitmq sink: %s; writing %r over AMQP 0-9-1 to the AMQP URL's broker: %s",
            exc,
            name,
            other_broker_advice(exc),
        )
        return None
    target: StreamTarget | None = None
    if why is None:
        target, why = _find(settings, port, options)
    where = f"{settings.host}:{port}"
    if target is not None:
        logger.info(
            "rabbitmq sink: writing to %s %r over the stream protocol at %s (exactly once)",
            "super stream" if target.super_stream else "stream",
            name,
            where,
        )
        return target
    if options.protocol == "stream":
        raise SparkSinkError(
            f"rabbitmq sink: protocol=stream, but {why}: write with protocol=amqp, or give"
            " stream_port= where the broker's rabbitmq_stream plugin listens"
        )
    if why is not None and "is no stream" not in why:
        logger.warning(
            "rabbitmq sink: no stream protocol at %s (%s); writing over AMQP 0-9-1", where, why
        )
    return None


def _find(
    settings: ConnectionSettings, port: int, options: SinkOptions
) -> tuple[StreamTarget | None, str | None]:
    try:
        with StreamClient(settings, port=port) as client:
            if options.exchange:
                not_super = f"exchange {options.exchange!r} is no stream (not a super stream)"
                try:
                    partitions = client.partitions(options.exchange)
                except StreamRefused:
                    return None, not_super
                # The broker answers with the queues bound to any exchange, a topic exchange's
                # classic queues too: a super stream is one whose every partition is a stream.
                found = client.metadata(partitions) if partitions else {}
                if not partitions or any(found.get(p, {}).get("code") != 1 for p in partitions):
                    return None, not_super
                return StreamTarget(port, super_stream=options.exchange), None
            found = client.metadata([options.routing_key]).get(options.routing_key, {})
            if found.get("code") != 1:
                return None, f"queue {options.routing_key!r} is no stream"
            return StreamTarget(port, stream=options.routing_key), None
    except (StreamUnavailable, StreamRefused, StreamProtocolError) as exc:
        return None, mask_text(str(exc))


Write = Callable[[StreamClient, Callable[[str], str]], tuple[PublishCount, int]]
"""What a task does on its connection, given how a routing key maps to a super stream's
partition: the count of messages and the body bytes."""


def _published(
    options: SinkOptions, target: StreamTarget, ids: MessageIdScheme, attempt: int, write: Write
) -> PartitionReport:
    """Run ``write`` on one connection named after the producer; its report."""
    reference = producer_name(ids)
    settings = ConnectionSettings.from_url(
        options.url, connection_name=f"{options.connection_name} {reference}"
    )
    started = time.monotonic()
    where = f"partition {ids.partition}" + (f" of batch {ids.batch}" if ids.batch else "")
    try:
        with StreamClient(settings, port=target.port) as client:
            routes: dict[str, str] = {}

            def route(key: str) -> str:
                found = routes.get(key)
                if found is None:
                    assert target.super_stream is not None
                    streams = client.route(key, target.super_stream)
                    if not streams:
                        raise SparkSinkError(
                            f"rabbitmq sink, {where}: routing key {key!r} goes to no partition"
                            f" of super stream {target.super_stream!r}"
                        )
                    found = routes[key] = streams[0]
                return found

            count, size = write(client, route)
    except (StreamUnavailable, StreamRefused, StreamProtocolError) as exc:
        raise SparkSinkError(
            mask_text(
                f"rabbitmq sink, {where} (task attempt {attempt}) over the stream protocol: {exc};"
                f" if Spark retries the task, producer {reference!r} sends its rows again and"
                " the broker drops those it stored already"
            )
        ) from None
    return PartitionReport(
        partition=ids.partition,
        rows=count.sent + count.skipped,
        bytes=size,
        confirms=count.sent,
        attempt=attempt,
        republished=count.skipped,
        batch=ids.batch,
        seconds=time.monotonic() - started,
    )


def producer_name(ids: MessageIdScheme) -> str:
    """A task's producer: the message id without the row."""
    return f"{ids.prefix}:{ids.batch}:{ids.partition}"


def publish_rows_streamed(
    options: SinkOptions,
    encoder: RowEncoder,
    target: StreamTarget,
    rows: Iterable[Sequence[Any]],
    ids: MessageIdScheme,
    *,
    attempt: int,
) -> PartitionReport:
    """Publish a partition's rows (tuples) as one named producer, a message at a time, and
    wait for every confirm."""
    content_type = encoder.content_type

    def write(client: StreamClient, route: Callable[[str], str]) -> tuple[PublishCount, int]:
        size = 0

        def messages() -> Iterator[tuple[str, int, bytes]]:
            nonlocal size
            for index, out in enumerate(encoder.messages(rows, ids)):
                size += len(out.body)
                stream = target.stream if target.stream is not None else route(out.routing_key)
                yield stream, index + 1, stored(out, content_type)

        count = client.publish(producer_name(ids), messages(), timeout=options.confirm_timeout)
        return count, size

    return _published(options, target, ids, attempt, write)


def publish_batches_streamed(
    options: SinkOptions,
    encoder: RowEncoder,
    target: StreamTarget,
    batches: Iterable[pa.RecordBatch],
    ids: MessageIdScheme,
    *,
    attempt: int,
) -> PartitionReport:
    """Publish a partition's Arrow batches as one named producer, encoded column by column
    (``sink_records``), and wait for every confirm. Rows the broker holds already (a retried
    task) are not even encoded."""
    records = RecordEncoder(encoder)

    def write(client: StreamClient, route: Callable[[str], str]) -> tuple[PublishCount, int]:
        size = start = 0
        with Producer(client, producer_name(ids), timeout=options.confirm_timeout) as producer:
            for batch in batches:
                for stream, rows in _streams_of(records, batch, ids, start, target, route):
                    # rows[i] is row start + rows[i] of the partition: publishing id one more
                    kept = pc.filter(rows, pc.greater_equal(rows, producer.last(stream) - start))
                    producer.count.skipped += len(rows) - len(kept)
                    if len(kept):
                        entries, body_bytes = records.entries(batch, ids, start, kept)
                        size += body_bytes
                        producer.send(stream, *spans(entries))
                start += batch.num_rows
            return producer.finish(), size

    return _published(options, target, ids, attempt, write)


def _streams_of(
    records: RecordEncoder,
    batch: pa.RecordBatch,
    ids: MessageIdScheme,
    start: int,
    target: StreamTarget,
    route: Callable[[str], str],
) -> Iterator[tuple[str, pa.Array]]:
    """Each stream the batch's rows go to, with those rows (indices in the batch, rising)."""
    if target.stream is not None:
        yield target.stream, positions(0, batch.num_rows)
        return
    keys = records.routing_keys(batch, ids, start)
    by_stream: dict[str, list[str]] = {}
    for key in pc.unique(keys).to_pylist():
        by_stream.setdefault(route(key), []).append(key)
    for stream, stream_keys in by_stream.items():
        picked = pc.is_in(keys, value_set=pa.array(stream_keys, keys.type))
        yield stream, pc.indices_nonzero(picked).cast(pa.int64())
