"""The Spark sink with real Spark and a real broker: batch, retries, streaming, a standalone cluster.

One local session (``local[2,2]``: two cores, a failed task is tried twice) serves every Spark
module of the pytest process (``spark_sessions``); one xdist worker runs the sink modules, one
the source modules. The cluster test stops it and runs Spark's standalone master and worker
(``local-cluster``: in the driver's JVM, the executor in its own) instead. Spark hands the sink 1,000 rows at a time (``ROWS_PER_CHUNK``), so the frames here,
a few thousand rows, span several chunks per partition as large ones do.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import rabbitry.spark
from rabbitry.spark import parse_message_id
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.spark_sessions import ROWS_PER_CHUNK, Sessions

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("spark-sink")]


@dataclass(frozen=True)
class Got:
    message_id: str
    routing_key: str
    body: bytes
    headers: dict[str, Any]


def declare(broker: Broker, exchange: str, bindings: dict[str, str], kind: str = "topic") -> None:
    """``exchange`` and one queue per (queue -> binding key)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    if exchange:
        channel.exchange_declare(exchange, kind, durable=True)
    for queue, key in bindings.items():
        channel.queue_declare(queue, durable=True)
        if exchange:
            channel.queue_bind(queue, exchange, key)
    connection.close()


def drain(broker: Broker, queue: str, expect: int, timeout: float = 120.0) -> list[Got]:
    """Everything in ``queue``: at least ``expect`` messages, then until it stays empty."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2000)
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    for method, props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=1.0):
        if method is None:
            if len(got) >= expect or time.monotonic() > deadline:
                break
            continue
        got.append(Got(props.message_id, method.routing_key, body, props.headers or {}))
    channel.cancel()
    connection.close()
    return got


def queue_depth(broker: Broker, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    depth = int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    connection.close()
    return depth


def sink(df: DataFrame, broker: Broker, **options: str) -> None:
    df.write.format("rabbitmq").mode("append").option("url", broker.vhost_amqp_url).options(
        **options
    ).save()


def test_rows_in_8_partitions_arrive_once_with_their_routing(
    spark: SparkSession, broker: Broker
) -> None:
    rows = 20_000  # 2,500 a partition: three chunks each
    declare(broker, "events", {f"kind{k}": f"kind.{k}" for k in range(4)})
    df = spark.range(0, rows, numPartitions=8).select(
        F.col("id"),
        F.concat(F.lit("kind."), (F.col("id") % 4).cast("string")).alias("kind"),
        F.col("id").cast("string").alias("body"),
    )
    started = time.monotonic()
    sink(
        df,
        broker,
        exchange="events",
        routing_key_column="kind",
        body_column="body",
        header_columns="id",
        mandatory="true",
    )
    elapsed = time.monotonic() - started
    seen: list[Got] = []
    for k in range(4):
        got = drain(broker, f"kind{k}", rows // 4)
        assert len(got) == rows // 4, f"queue kind{k}"
        assert all(g.routing_key == f"kind.{k}" and int(g.body) % 4 == k for g in got)
        seen += got
    assert sorted(int(g.body) for g in seen) == list(range(rows))
    assert all(int(g.body) == g.headers["id"] for g in seen)
    ids = [parse_message_id(g.message_id) for g in seen]
    assert len({g.message_id for g in seen}) == rows
    assert len({prefix for prefix, *_ in ids}) == 1  # one job id
    assert {partition for _, _, partition, _ in ids} == set(range(8))
    rows_per_partition = Counter(partition for _, _, partition, _ in ids)
    assert all(
        sorted(row for _, _, p, row in ids if p == partition) == list(range(count))
        for partition, count in rows_per_partition.items()
    )
    print(f"{rows:,} rows in 8 partitions written in {elapsed:.1f} s")


def test_a_task_failing_once_is_retried_and_only_its_rows_repeat_with_the_same_ids(
    spark: SparkSession, broker: Broker
) -> None:
    # Partition 1 holds ids 10,000-19,999, and its rows are also routed to ``partition1``: its
    # first attempt fails late in it, once rows it published before are on the broker. (Rows
    # reach the sink's Python process through a buffer of 64 KB: thousands of small rows must
    # come before the failure for some of them to be handed over and published first.)
    declare(broker, "events", {"retried": "#", "partition1": "p1"})
    fail_at = 19_000
    assert fail_at - 10_000 > 5 * ROWS_PER_CHUNK  # chunks of the partition come before it
    url = broker.vhost_amqp_url

    @F.udf("string", useArrow=False)
    def body(value: int) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if value == fail_at and context is not None and context.attemptNumber() == 0:
            # Until a row of this attempt is on the broker (exact AMQP count), bounded: the
            # assertions below say so if none arrived.
            connection = pika.BlockingConnection(pika.URLParameters(url))
            channel, deadline = connection.channel(), time.monotonic() + 60
            while channel.queue_declare("partition1", passive=True).method.message_count == 0:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            connection.close()
            raise RuntimeError("injected failure of the first attempt")
        return str(value)

    df = spark.range(0, 30_000, numPartitions=3).select(
        body("id").alias("body"),
        F.when(F.col("id").between(10_000, 19_999), "p1").otherwise("other").alias("key"),
    )
    sink(df, broker, exchange="events", routing_key_column="key", body_column="body")
    got = drain(broker, "retried", 30_000)
    assert sorted({int(g.body) for g in got}) == list(range(30_000))
    copies = defaultdict(list)
    for g in got:
        copies[g.message_id].append(g.body)
    repeated = {mid: bodies for mid, bodies in copies.items() if len(bodies) > 1}
    assert len(copies) == 30_000  # one id per row, in every attempt
    assert repeated, "the first attempt published nothing before failing: no retry was seen"
    assert {parse_message_id(mid)[2] for mid in repeated} == {1}
    assert all(len(set(bodies)) == 1 for bodies in repeated.values())
    assert all(10_000 <= int(bodies[0]) < fail_at for bodies in repeated.values())


def test_bad_options_fail_before_any_row_is_published(spark: SparkSession, broker: Broker) -> None:
    declare(broker, "events", {"all": "#"})
    df = spark.range(0, 100, numPartitions=2).select(
        F.col("id"), F.col("id").cast("string").alias("text")
    )
    cases = [
        ({"exchange": "no-such-exchange"}, "exchange 'no-such-exchange' does not exist in vhost"),
        ({"exchange": "events", "body_column": "payload"}, "column 'payload' is not in the"),
        ({"exchange": "events", "body_column": "id"}, "body_column: column 'id' is bigint"),
        ({"exchange": "events", "windw": "10"}, "did you mean 'window'"),
        ({"exchange": "events", "mandatory": "sure"}, "mandatory must be true or false"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=re.escape(message)) as err:
            sink(df, broker, **options)
        assert broker_password(broker) not in str(err.value)
    with pytest.raises(Exception, match=re.escape('write with .mode("append")')):
        df.write.format("rabbitmq").mode("overwrite").option("url", broker.vhost_amqp_url).option(
            "exchange", "events"
        ).save()
    assert queue_depth(broker, "all") == 0


def broker_password(broker: Broker) -> str:
    """The password as it would appear in a URL (the test user's name may be its password)."""
    password = pika.URLParameters(broker.vhost_amqp_url).credentials.password
    return f":{password}@"


def test_an_unroutable_mandatory_row_fails_the_job_with_a_clear_message(
    spark: SparkSession, broker: Broker
) -> None:
    declare(broker, "events", {"orders": "order.*"})
    df = spark.range(0, 10, numPartitions=1).select(
        F.when(F.col("id") == 7, "lost.key").otherwise("order.created").alias("key")
    )
    with pytest.raises(Exception) as err:
        sink(df, broker, exchange="events", routing_key_column="key", mandatory="true")
    text = str(err.value)
    assert "partition 0, row 7" in text
    assert "Unroutable" in text
    assert "routing key 'lost.key'" in text
    assert broker_password(broker) not in text


def test_publish_partitions_helper_reports_totals(spark: SparkSession, broker: Broker) -> None:
    declare(broker, "", {"helper": ""})
    df = spark.range(0, 3_000, numPartitions=3).select(F.col("id"))
    totals = rabbitry.spark.publish_partitions(
        df, url=broker.vhost_amqp_url, routing_key="helper", id_prefix="nightly-2024-05-01"
    )
    assert (totals.partitions, totals.rows, totals.confirms, totals.retries) == (3, 3000, 3000, 0)
    got = drain(broker, "helper", 3_000)
    assert sorted(int(g.body.split(b":")[1].rstrip(b"}")) for g in got) == list(range(3000))
    assert {parse_message_id(g.message_id)[0] for g in got} == {"nightly-2024-05-01"}


def test_a_delay_column_goes_through_the_spec_delay_levels(
    spark: SparkSession, broker: Broker
) -> None:
    broker.apply(
        one_vhost_spec("""
        queues:
          - {name: due, type: quorum}
        delays:
          - name: delay
            unit: 100ms
            count: 10
            targets:
              - queue: due
""")
    )
    spec = broker.tmp / "spec.yaml"
    df = spark.range(0, 20, numPartitions=2).select(
        F.col("id"), (F.col("id") % 2 * 0.8).alias("wait")
    )
    started = time.monotonic()
    sink(
        df,
        broker,
        spec=str(spec),
        spec_vars=f"stack={broker.stack},vhost={broker.vhost}",
        routing_key="due",
        delay_column="wait",
    )
    got = drain(broker, "due", 20, timeout=30)
    elapsed = time.monotonic() - started
    assert sorted(json.loads(g.body)["id"] for g in got) == list(range(20))
    assert {g.routing_key.rsplit(".", 1)[-1] for g in got} == {"due"}
    assert elapsed >= 0.8  # the delayed half waited its 0.8 s


def run_stream(
    spark: SparkSession, broker: Broker, checkpoint: Path, batches: int
) -> tuple[str, int]:
    """Run the rate query until ``batches`` micro-batches completed; (query id, last batch)."""
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 40)
        .option("numPartitions", 2)
        .option("startTimestamp", 1_700_000_000_000)
        .load()
    )
    query = (
        stream.writeStream.format("rabbitmq")
        .option("url", broker.vhost_amqp_url)
        .option("routing_key", "ticks")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] >= batches - 1:
                break
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the streaming query made no progress"
            time.sleep(0.2)
    finally:
        query.stop()
    return str(query.id), int(query.lastProgress["batchId"])


def batch_files(folder: Path) -> list[int]:
    return [int(p.name) for p in folder.iterdir() if p.name.isdigit()]


def test_streaming_delivers_every_micro_batch_and_replays_with_the_same_ids(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    declare(broker, "", {"ticks": ""})
    checkpoint = tmp_path / "checkpoint"
    query_id, last = run_stream(spark, broker, checkpoint, batches=2)
    # As if the driver had died after publishing the last batch but before committing it:
    # the restarted query runs that batch again, with the same data and batch id.
    # (A batch planned but not committed when the query stopped is dropped first, so that the
    # replayed batch is one that was surely published.)
    replayed = max(batch_files(checkpoint / "commits"))
    for log, first in (("offsets", replayed + 1), ("commits", replayed)):
        for batch in batch_files(checkpoint / log):
            if batch >= first:
                (checkpoint / log / str(batch)).unlink()
                (checkpoint / log / f".{batch}.crc").unlink(missing_ok=True)
    # the replayed batch, then one the first run never planned
    query_id2, last2 = run_stream(spark, broker, checkpoint, batches=last + 2)
    assert query_id2 == query_id  # the query's id lives in its checkpoint

    got = drain(broker, "ticks", 40 * (last2 + 1))
    by_id: dict[str, list[bytes]] = defaultdict(list)
    for g in got:
        by_id[g.message_id].append(g.body)
    parsed = {mid: parse_message_id(mid) for mid in by_id}
    assert {prefix for prefix, *_ in parsed.values()} == {query_id}
    batches = Counter(batch for _, batch, _, _ in parsed.values())
    # Every completed micro-batch arrived whole: 40 rows, one id per row. A batch still running
    # when the query was stopped (last2 + 1) may have published part of its rows: uncommitted,
    # it would run again, under the same ids, at the next start.
    assert set(range(last2 + 1)) <= set(batches) <= set(range(last2 + 2))
    assert all(batches[batch] == 40 for batch in range(last2 + 1))
    assert batches.get(last2 + 1, 0) <= 40
    values = sorted(
        int(re.search(rb'"value":(\d+)', bodies[0]).group(1))  # type: ignore[union-attr]
        for mid, bodies in by_id.items()
        if parsed[mid][1] <= last2
    )
    assert values == list(range(40 * (last2 + 1)))
    repeated = {mid for mid, bodies in by_id.items() if len(bodies) > 1}
    assert repeated, "the uncommitted batch was not published again"
    # The replayed batch repeats; so may the dropped one if the first run had begun publishing it.
    assert replayed in {parsed[mid][1] for mid in repeated}
    assert {parsed[mid][1] for mid in repeated} <= {replayed, replayed + 1}
    assert all(len(set(by_id[mid])) == 1 for mid in repeated)  # same id, same body


LOCAL_CLUSTER = "local-cluster[1,2,1024]"
"""Spark's standalone deploy mode in one master URL: a ``Master`` and one ``Worker`` (2 cores,
1 GB) run in the driver's JVM, the executor in a JVM of its own started by the worker, with its
own Python workers, as on a standalone cluster."""


def test_a_standalone_master_and_worker_run_the_sink(
    spark_sessions: Sessions, broker: Broker
) -> None:
    """The sink's plan is shipped to an executor in a JVM and Python processes of its own, as on
    a cluster. The master and the worker run in the driver's JVM (``LOCAL_CLUSTER``): started
    with ``spark-class`` they were the same deploy code at the price of four more JVM start-ups
    (two of them ``spark-class``'s launcher)."""
    declare(broker, "events", {"cluster": "#"})
    try:
        spark = spark_sessions.cluster(LOCAL_CLUSTER)
        assert spark.sparkContext.master == LOCAL_CLUSTER
        df = spark.range(0, 4_000, numPartitions=4).select(F.col("id").cast("string").alias("body"))
        sink(df, broker, exchange="events", routing_key="from.cluster", body_column="body")
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # type: ignore[union-attr]
        assert executors >= 2  # the driver and at least one executor on the worker
        got = drain(broker, "cluster", 4_000)
        assert sorted(int(g.body) for g in got) == list(range(4_000))
        assert {g.routing_key for g in got} == {"from.cluster"}
    finally:
        spark_sessions.stop()  # the next test starts a local one again
