"""The ``rabbitmq`` source with real Spark and a real broker: batch offsets, super streams,
a task failing mid-read, a streaming query restarted from its checkpoint, bad options.

One local session (``local[2,2]``: two cores, a failed task is tried twice) serves every Spark
module of the pytest process (``spark_sessions`` in conftest.py); one xdist worker runs the two
source modules. What of these reads depends on the RabbitMQ release (the broker's part) runs on
every release without a JVM: ``test_spark_source_versions``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import pika
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from rabbitry.consumer.streams import StreamReader
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("spark-source")]


def declare_stream(broker: Broker, name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    connection.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()


def publish(
    broker: Broker,
    count: int,
    *,
    queue: str = "",
    exchange: str = "",
    first: int = 0,
    keys: int | Sequence[str] = 0,
    pad: int = 0,
) -> None:
    """``count`` JSON messages with ids ``m<first>``...; routing keys ``str(i % keys)`` (or
    the i-th of ``keys`` in turn) into ``exchange`` when ``keys``, else ``queue`` through the
    default exchange; ``pad`` bytes of filler each. Confirmed."""
    names = [str(k) for k in range(keys)] if isinstance(keys, int) else list(keys)
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(first, first + count):
        channel.basic_publish(
            exchange,
            names[i % len(names)] if names else queue,
            json.dumps({"n": i, "pad": "x" * pad}).encode(),
            pika.BasicProperties(
                message_id=f"m{i}",
                content_type="application/json",
                timestamp=1_700_000_000 + i,
                headers={"kind": "test", "n": i},
            ),
        )
    connection.close()


def source(spark: SparkSession, broker: Broker, **options: str) -> DataFrame:
    return (
        spark.read.format("rabbitmq").option("url", broker.vhost_amqp_url).options(**options).load()
    )


def test_a_batch_read_honours_its_offsets(spark: SparkSession, broker: Broker) -> None:
    declare_stream(broker, "events")
    publish(broker, 1000, queue="events")

    everything = source(spark, broker, stream="events", maxRecordsPerPartition="300")
    assert everything.rdd.getNumPartitions() == 4  # 1000 messages in pieces of 300
    rows = everything.collect()
    assert [r.offset for r in rows] == list(range(1000))
    assert [r.properties.message_id for r in rows] == [f"m{i}" for i in range(1000)]
    first = rows[0]
    assert (first.stream, first.routing_key, first.properties.content_type) == (
        "events",
        "events",
        "application/json",
    )
    assert first.headers == {"kind": "test", "n": "0"}
    assert first.timestamp.timestamp() == 1_700_000_000  # type: ignore[union-attr]
    decoded = everything.select(
        F.from_json(F.col("body").cast("string"), "n bigint").alias("v")
    ).agg(F.sum("v.n"))
    assert decoded.first()[0] == sum(range(1000))  # type: ignore[index]

    part = source(
        spark,
        broker,
        stream="events",
        startingOffsets='{"events": 100}',
        endingOffsets='{"events": 250}',
    )
    assert sorted(r.offset for r in part.collect()) == list(range(100, 250))
    assert source(spark, broker, stream="events", startingOffsets="latest").count() == 0
    publish(broker, 5, queue="events", first=1000)
    assert source(spark, broker, stream="events", startingOffsets='{"events": 990}').count() == 15


def test_a_task_failing_mid_read_is_retried_and_changes_nothing(
    spark: SparkSession, broker: Broker
) -> None:
    declare_stream(broker, "retried")
    publish(broker, 3000, queue="retried")

    @F.udf("bigint", useArrow=False)
    def checked(offset: int) -> int:
        from pyspark import TaskContext

        context = TaskContext.get()
        if offset == 1500 and context is not None and context.attemptNumber() == 0:
            raise RuntimeError("injected failure of the first attempt")
        return offset

    df = source(spark, broker, stream="retried", maxRecordsPerPartition="1000")
    offsets = [r[0] for r in df.select(checked("offset")).collect()]
    assert sorted(offsets) == list(range(3000))


REGIONS = ["amer", "emea", "apac"]
"""Binding keys in partition order (not the keys' alphabetical order)."""


SALES = {"amer": "sales-west", "emea": "sales-europe", "apac": "sales-east"}
"""The partitions of the super stream ``sales``, by binding key."""


def named_super_streams(broker: Broker) -> None:
    """Two super streams keyed by ``REGIONS``: ``regions`` declared by the spec (partitions
    ``regions-<key>``), ``sales`` as the stream protocol's create makes it (partitions
    ``SALES``, not named ``<name>-<key>``); 30 and 20 messages a partition."""
    broker.apply(
        one_vhost_spec(f"""
        super_streams:
          - {{name: regions, routing_keys: [{", ".join(REGIONS)}]}}
""")
    )
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.exchange_declare("sales", "direct", durable=True, arguments={"x-super-stream": True})
    for order, key in enumerate(REGIONS):
        channel.queue_declare(SALES[key], durable=True, arguments={"x-queue-type": "stream"})
        channel.queue_bind(SALES[key], "sales", key, {"x-stream-partition-order": order})
    connection.close()
    publish(broker, 90, exchange="regions", keys=REGIONS)
    publish(broker, 60, exchange="sales", keys=REGIONS)


def test_a_super_stream_with_named_keys_reads_every_partition_in_binding_order(
    spark: SparkSession, broker: Broker
) -> None:
    """One declared by the spec, one as the stream protocol's create makes it, where the
    partitions are not named ``<name>-<key>``."""
    named_super_streams(broker)
    sales = SALES
    management = broker.management_url

    regions = source(spark, broker, super_stream="regions", management_url=management).collect()
    assert Counter(r.stream for r in regions) == {f"regions-{k}": 30 for k in REGIONS}
    assert all(r.stream == f"regions-{r.routing_key}" for r in regions)
    assert sorted(int(r.properties.message_id[1:]) for r in regions) == list(range(90))

    rows = source(spark, broker, super_stream="sales", management_url=management).collect()
    assert Counter(r.stream for r in rows) == {stream: 20 for stream in sales.values()}
    assert all(r.stream == sales[r.routing_key] for r in rows)
    first_two = source(
        spark, broker, super_stream="sales", partitions="2", management_url=management
    )
    assert {r.stream for r in first_two.collect()} == {"sales-west", "sales-europe"}
    by_key = source(
        spark, broker, super_stream="sales", partitions="apac", management_url=management
    )
    assert {r.stream for r in by_key.collect()} == {"sales-east"}

    with pytest.raises(Exception, match=r"has no partition bound with key.*'asia'"):
        source(spark, broker, super_stream="sales", partitions="asia", management_url=management)
    with pytest.raises(Exception, match="super stream 'nope' does not exist in vhost"):
        source(spark, broker, super_stream="nope", management_url=management)
    # Without the management API the partitions are taken to be <name>-<key>: named keys
    # must then be given, and a stream protocol super stream cannot be found at all.
    unreachable = "http://127.0.0.1:1"
    named = source(
        spark, broker, super_stream="regions", partitions="emea", management_url=unreachable
    )
    assert {r.stream for r in named.collect()} == {"regions-emea"}
    with pytest.raises(Exception, match="its bindings could not be read") as err:
        source(spark, broker, super_stream="sales", management_url=unreachable)
    password = pika.URLParameters(broker.vhost_amqp_url).credentials.password
    assert f":{password}@" not in str(err.value)


def test_bad_options_fail_on_the_driver_with_clear_errors(
    spark: SparkSession, broker: Broker
) -> None:
    declare_stream(broker, "events")
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    connection.channel().queue_declare("classic", durable=True)
    connection.close()
    password = pika.URLParameters(broker.vhost_amqp_url).credentials.password
    unreachable = re.sub(r":\d+/", ":1/", broker.vhost_amqp_url)
    cases: list[tuple[dict[str, str], str]] = [
        ({"stream": "nope"}, "stream 'nope' does not exist in vhost"),
        ({"stream": "classic"}, "queue 'classic' in vhost"),
        ({"stream": "classic"}, "is not a stream"),
        (
            {"super_stream": "nope", "management_url": "http://127.0.0.1:1"},
            "super stream 'nope' has no partition stream nope-0",
        ),
        ({"stream": "events", "prefetc": "10"}, "did you mean 'prefetch'"),
        ({"stream": "events", "startingOffsets": "soon"}, "startingOffsets must be earliest"),
        ({"stream": "events", "startingOffsets": '{"other": 1}'}, "'other' not among the streams"),
        ({}, "give stream=<stream[,stream...]> or super_stream=<name>"),
        ({"stream": "events", "url": unreachable}, "cannot reach the broker at"),
    ]
    for options, message in cases:
        url = options.pop("url", broker.vhost_amqp_url)
        with pytest.raises(Exception, match=re.escape(message)) as err:
            spark.read.format("rabbitmq").option("url", url).options(**options).load()
        assert f":{password}@" not in str(err.value)
    with pytest.raises(Exception, match="endingOffsets is for batch reads"):
        spark.readStream.format("rabbitmq").option("url", broker.vhost_amqp_url).option(
            "stream", "events"
        ).option("endingOffsets", "latest").load().writeStream.format(
            "noop"
        ).start().awaitTermination(60)


FAIL_AT = 250
"""The offset whose task fails on its first attempt (local[2,2] tries it again)."""
_PYTHON_WORKER_LOST = "Python worker failed to connect back"


def run_until_all_read(
    spark: SparkSession, broker: Broker, checkpoint: Path, out: Path, expect: int, **options: str
) -> int:
    """Run the query until ``expect`` ids were seen in all; the micro-batches it ran. The task
    reading offset ``FAIL_AT`` fails on its first attempt, mid-batch."""
    out.mkdir(exist_ok=True)
    failed = out.parent / "failed-once"

    @F.udf("string", useArrow=False)
    def failing_once(message_id: str, offset: int) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if offset == FAIL_AT and context is not None and context.attemptNumber() == 0:
            failed.write_text(f"stage {context.stageId()}")
            raise RuntimeError("injected failure of the first attempt, mid-batch")
        return message_id

    def record(batch: DataFrame, batch_id: int) -> None:
        ids = failing_once(F.col("properties.message_id"), F.col("offset")).alias("id")
        found = sorted(r.id for r in batch.select(ids).collect())
        # written whole, then renamed: the test reads the folder while batches run
        name = f"{batch_id}-{uuid.uuid4().hex}.json"
        (out / f".{name}").write_text(json.dumps(found))
        (out / f".{name}").replace(out / name)

    def start() -> StreamingQuery:
        stream = (
            spark.readStream.format("rabbitmq")
            .option("url", broker.vhost_amqp_url)
            .option("stream", "ticks")
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "150")
            .options(**options)
            .load()
        )
        return (
            stream.writeStream.foreachBatch(record)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def running(query: StreamingQuery, restarts: list[str]) -> StreamingQuery:
        """``query``, or a new one from the checkpoint when Spark lost a Python worker it
        started (its 10 s wait for a new interpreter, on a loaded machine): a restart, which
        must read nothing twice either. Any other error fails the test."""
        error = query.exception()
        if error is None:
            return query
        assert _PYTHON_WORKER_LOST in str(error) and len(restarts) < 2, error
        restarts.append(str(error).splitlines()[0])
        query.stop()
        return start()

    query, restarts = start(), []
    try:
        deadline = time.monotonic() + 240
        while len(seen(out)) < expect:
            query = running(query, restarts)
            assert time.monotonic() < deadline, f"only {len(seen(out))} of {expect} ids read"
            time.sleep(0.3)
        # the last batch wrote its ids before Spark committed it: stop once it is committed,
        # or the restart would run that batch again rather than the one a test uncommits
        while max(batch_files(checkpoint / "commits"), default=-1) < max(
            batch_files(checkpoint / "offsets"), default=-1
        ):
            query = running(query, restarts)
            assert time.monotonic() < deadline, "the last batch was never committed"
            time.sleep(0.1)
    finally:
        query.stop()
    return len(list(out.glob("[0-9]*.json")))


def batches(out: Path) -> dict[int, list[list[str]]]:
    found: dict[int, list[list[str]]] = defaultdict(list)
    for path in out.glob("[0-9]*.json"):
        found[int(path.name.split("-")[0])].append(json.loads(path.read_text()))
    return found


def seen(out: Path) -> Counter[str]:
    """Each id counted once per micro-batch id (a replayed batch is the same batch)."""
    counts: Counter[str] = Counter()
    for attempts in batches(out).values():
        counts.update(attempts[0])
    return counts


def batch_files(folder: Path) -> list[int]:
    return [int(p.name) for p in folder.iterdir() if p.name.isdigit()]


def restart_without_the_last_commit_reads_each_message_once(
    spark: SparkSession, broker: Broker, checkpoint: Path, out: Path, **options: str
) -> None:
    """After a query read the 400 messages of ``ticks``: as if the driver had died after
    planning the last batch but before committing it, the restarted query runs that batch
    again, from the offsets in its checkpoint, and reads 300 more. Each of the 700 is read
    once, the replayed batch twice with the same ids, and the injected failure did happen."""
    replayed = max(batch_files(checkpoint / "commits"))
    (checkpoint / "commits" / str(replayed)).unlink()
    (checkpoint / "commits" / f".{replayed}.crc").unlink(missing_ok=True)
    publish(broker, 300, queue="ticks", first=400)
    run_until_all_read(spark, broker, checkpoint, out, 700, **options)

    failed = out.parent / "failed-once"
    assert failed.exists(), "no task failed: the injected failure never ran"
    runs = batches(out)
    assert len(runs[replayed]) >= 2, "the uncommitted batch was not run again"
    assert all(attempt == attempts[0] for attempts in runs.values() for attempt in attempts)
    counts = seen(out)
    assert set(counts) == {f"m{i}" for i in range(700)}
    assert set(counts.values()) == {1}


def test_a_restarted_streaming_query_reads_no_message_twice_and_misses_none(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    """Also: the task that failed mid-batch (offset ``FAIL_AT``) changed nothing, its retry
    read the same range."""
    declare_stream(broker, "ticks")
    publish(broker, 400, queue="ticks")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    run_until_all_read(spark, broker, checkpoint, out, 400)
    assert all(len(ids) <= 150 for attempts in batches(out).values() for ids in attempts)

    restart_without_the_last_commit_reads_each_message_once(spark, broker, checkpoint, out)


def retention_stream(broker: Broker) -> None:
    """The stream ``kept``, which keeps about 40 KB in segments of 10 KB, with 40 messages."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    connection.channel().queue_declare(
        "kept",
        durable=True,
        arguments={
            "x-queue-type": "stream",
            "x-max-length-bytes": 40_000,
            "x-stream-max-segment-size-bytes": 10_000,  # retention drops whole segments
        },
    )
    connection.close()
    publish(broker, 40, queue="kept")


def lose_to_retention(broker: Broker) -> int:
    """1,000 more messages to ``kept``, until retention has removed offset 40; the first offset
    the stream still holds."""
    publish(broker, 1000, queue="kept", first=40, pad=300)  # about 340 KB: 30-odd segments
    with StreamReader(broker.vhost_amqp_url) as reader:
        deadline = time.monotonic() + 60
        while (first := reader.bounds("kept")[0]) <= 40:
            assert time.monotonic() < deadline, "retention removed nothing"
            time.sleep(0.5)
    assert 40 < first < 1040
    return first


def kept_query(
    spark: SparkSession, broker: Broker, checkpoint: Path, **options: str
) -> DataStreamWriter:
    """A streaming read of ``kept`` with ``options`` from ``checkpoint``, before its sink."""
    return (
        spark.readStream.format("rabbitmq")
        .option("url", broker.vhost_amqp_url)
        .option("stream", "kept")
        .options(**options)
        .load()
        .writeStream.option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
    )


def read_then_lose_to_retention(spark: SparkSession, broker: Broker, checkpoint: Path) -> int:
    """A streaming query reads the stream ``kept`` to offset 40 and commits it; then retention
    removes offset 40 and more. The first offset the stream still holds."""
    retention_stream(broker)
    query = kept_query(spark, broker, checkpoint, startingOffsets="earliest").format("noop").start()
    try:
        deadline = time.monotonic() + 120
        while not (checkpoint / "commits" / "0").exists():
            assert time.monotonic() < deadline and query.exception() is None, query.exception()
            time.sleep(0.3)
    finally:
        query.stop()
    committed = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
    assert committed == {"kept": 40}
    return lose_to_retention(broker)


def test_offsets_retention_removed_fail_the_read_unless_failondataloss_is_false(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    """A query restarted past retention fails; restarted again with ``failOnDataLoss=false``
    it reads each message still held once. (The warning saying how many offsets it skipped is
    logged by the source's driver-side process: ``test_spark_source_versions`` reads it there,
    on every release, as it calls the source's stream reader as Spark does.)"""
    checkpoint = tmp_path / "checkpoint"
    first = read_then_lose_to_retention(spark, broker, checkpoint)
    with StreamReader(broker.vhost_amqp_url) as reader:
        (held,) = reader.read("kept", first, first + 1)
    since = int((held.message_id or "")[1:])  # offsets skip one where a segment begins

    restarted = kept_query(spark, broker, checkpoint).format("noop").start()
    with pytest.raises(Exception) as failed:
        restarted.awaitTermination(120)
    message = str(failed.value)
    assert f"stream 'kept' no longer holds offset 40: the first offset it holds is {first}" in (
        message
    )
    assert "set failOnDataLoss=false" in message

    ids: list[str] = []

    def record(batch: DataFrame, batch_id: int) -> None:
        ids.extend(r.message_id for r in batch.select("properties.message_id").collect())

    skipping = (
        kept_query(spark, broker, checkpoint, failOnDataLoss="false").foreachBatch(record).start()
    )
    try:
        deadline = time.monotonic() + 180
        while len(ids) < 1040 - since:
            assert skipping.exception() is None, skipping.exception()
            assert time.monotonic() < deadline, f"only {len(ids)} of {1040 - since} ids read"
            time.sleep(0.3)
    finally:
        skipping.stop()
    assert sorted(ids, key=lambda i: int(i[1:])) == [f"m{i}" for i in range(since, 1040)]

    with pytest.raises(Exception, match=f"no longer holds offset 10: .* holds is {first}"):
        source(spark, broker, stream="kept", startingOffsets='{"kept": 10}').count()
    rest = source(
        spark, broker, stream="kept", startingOffsets='{"kept": 10}', failOnDataLoss="false"
    )
    held_rows = sorted(rest.collect(), key=lambda r: r.offset)
    assert held_rows[0].offset == first
    assert [r.properties.message_id for r in held_rows] == [f"m{i}" for i in range(since, 1040)]
