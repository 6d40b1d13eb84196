"""One task's work: publish a partition's rows through one confirmed connection.

The task reports success only when every row was confirmed. The first row the broker refuses
(nack), returns (mandatory, no queue) or does not confirm in time stops the task with an error
naming the row, its message id and why: Spark then retries the task, which republishes the
partition under the same message ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.message import Message
from rabbitry.amqp.settings import Backoff
from rabbitry.errors import RabbitryError, SparkSinkError
from rabbitry.policies.delay import DelayScheme
from rabbitry.publisher import Publisher
from rabbitry.publisher.base import Batch
from rabbitry.spark.ids import MessageIdScheme
from rabbitry.spark.options import SinkOptions
from rabbitry.spark.report import PartitionReport
from rabbitry.spark.rows import Column, Outgoing, RowEncoder
from rabbitry.spark.sink_records import arrow_rows
from rabbitry.spark.stream_sink import StreamTarget, publish_batches_streamed, publish_rows_streamed
from rabbitry.uri import mask_text

# A task whose broker stays unreachable fails after this long; Spark may then retry it.
GIVE_UP_AFTER = 60.0


@dataclass(frozen=True)
class SinkPlan:
    """Everything a task needs, settled on the driver and shipped with the task."""

    options: SinkOptions
    columns: tuple[Column, ...]
    id_prefix: str
    delays: DelayScheme | None = None
    stream: StreamTarget | None = None
    """Write over the stream protocol, exactly once (``stream_sink``); None: AMQP 0-9-1."""

    def encoder(self) -> RowEncoder:
        return RowEncoder(self.options, self.columns)


class RowPublisher(Publisher):
    """A ``Publisher`` whose ``stream`` takes the encoder's ``Outgoing`` rows.

    Exchange and properties are the same for every row, so a row's frames are built straight
    from its body, routing key, headers and id, without a ``Message`` per row and the general
    argument handling of ``prepare``; rows with a delay still take ``prepare`` (the delay
    levels choose their exchange and routing key).
    """

    def __init__(self, url: str, encoder: RowEncoder, **options: Any) -> None:
        super().__init__(url, exchange=encoder.exchange, **options)
        opts = encoder.options
        self._row_exchange = encoder.exchange
        self._properties: dict[str, Any] = {
            "content_type": encoder.content_type,
            "priority": opts.priority,
            "expiration": opts.expiration,
        }

    def prepare_item(self, item: Any, batch: Batch, deadline: float | None) -> Delivery:
        if not isinstance(item, Outgoing):
            return super().prepare_item(item, batch, deadline)
        headers = item.headers
        if batch.trace is not None:  # the partition's span, when the traces option is on
            headers = {**(headers or {}), **batch.trace}
        if item.delay is not None:
            delivery = self.prepare(
                item.body,
                routing_key=item.routing_key,
                headers=headers,
                delay=item.delay,
                message_id=item.message_id,
                traced=False,
                **self._properties,
            )
            delivery.deadline = deadline
            return delivery
        return self.builder.build(
            item.body,
            exchange=self._row_exchange,
            routing_key=item.routing_key,
            mandatory=self.default_mandatory,
            headers=headers,
            message_id=item.message_id,
            deadline=deadline,
            **self._properties,
        )


def publish_batches(
    plan: SinkPlan,
    batches: Iterable[Any],
    *,
    partition: int,
    batch: int = 0,
    attempt: int = 0,
) -> PartitionReport:
    """Publish Arrow record batches: into a stream encoded column by column, else a row at a
    time (``publish_rows``)."""
    if plan.stream is None:
        rows = arrow_rows(batches)
        return publish_rows(plan, rows, partition=partition, batch=batch, attempt=attempt)
    ids = MessageIdScheme(plan.id_prefix, batch, partition)
    encoder = plan.encoder()
    return publish_batches_streamed(
        plan.options, encoder, plan.stream, batches, ids, attempt=attempt
    )


def publish_rows(
    plan: SinkPlan,
    rows: Iterable[Sequence[Any]],
    *,
    partition: int,
    batch: int = 0,
    attempt: int = 0,
) -> PartitionReport:
    """Publish ``rows`` (tuples in schema order) and wait for every confirm."""
    opts = plan.options
    ids = MessageIdScheme(plan.id_prefix, batch, partition)
    encoder = plan.encoder()
    if plan.stream is not None:
        return publish_rows_streamed(opts, encoder, plan.stream, rows, ids, attempt=attempt)
    size = 0

    def counted(messages: Iterator[Outgoing]) -> Iterator[Outgoing]:
        nonlocal size
        for message in messages:
            size += len(message.body)
            yield message

    where = f"partition {partition}" + (f" of batch {batch}" if batch else "")
    started = time.monotonic()
    publisher = RowPublisher(
        opts.url,
        encoder,
        window=opts.window,
        confirm_timeout=opts.confirm_timeout,
        mandatory=opts.mandatory,
        persistent=opts.persistent,
        delays=plan.delays,
        app_id="rabbitry-spark",
        connection_name=f"{opts.connection_name} {plan.id_prefix}:{batch}:{partition}",
        backoff=Backoff(give_up_after=GIVE_UP_AFTER),
        node_order=opts.node_order,
    )
    publisher.traced = opts.traces
    confirmed = 0
    failure: str | None = None
    try:
        outgoing = counted(encoder.messages(rows, ids))
        # RowPublisher.prepare_item takes Outgoing rows where Publisher takes Message objects
        for delivery in publisher.stream(cast("Iterable[Message]", outgoing)):
            if not delivery.ok:
                failure = (
                    f"{ids.where(confirmed)} (message id {delivery.message_id}, exchange"
                    f" {delivery.exchange!r}, routing key {delivery.routing_key!r}) was not"
                    f" stored: {type(delivery.error).__name__}: {delivery.error}"
                )
                break
            confirmed += 1
        republished = publisher.stats.republished
    except SparkSinkError:
        raise
    except RabbitryError as exc:
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        publisher.close()
    if failure is not None:
        raise SparkSinkError(
            mask_text(
                f"rabbitmq sink, {where} (task attempt {attempt}) to {opts.display_url}:"
                f" {failure}; {confirmed} earlier row(s) of this partition were confirmed and"
                " will be sent again, with the same message ids, if Spark retries the task"
            )
        )
    return PartitionReport(
        partition=partition,
        rows=confirmed,
        bytes=size,
        confirms=confirmed,
        attempt=attempt,
        republished=republished,
        batch=batch,
        seconds=time.monotonic() - started,
    )
