"""Spark sink speed: the rabbitmq data source vs one AsyncPublisher process vs a naive sink.

Usage:  python bench/spark_sink.py [--rows 200000] [--naive-rows 10000] [--rounds 1]
        [--queue-types classic,quorum] [--stream-port 5552] [--url URL] [--write-docs]
Broker: --url, else $RABBITMQ_URL, else amqp://guest:guest@localhost:5672/.
1 KB persistent messages through the default exchange into one durable queue of each type
(re-created empty for every contender), same broker, same run:
- Spark sink: ``df.write.format("rabbitmq")`` of a DataFrame with a 1 KB binary column in 2
  partitions on ``local[2]`` (one confirmed connection per partition, window 512), timed from
  ``save()`` to its return (every row confirmed), Spark's job overhead included; a small write
  first starts the Python workers.
- One AsyncPublisher process: ``publish_many`` of the same number of 1 KB bodies, window 512.
- Naive sink: ``foreachPartition`` opening a pika BlockingConnection per partition and waiting
  for each row's confirm (``--naive-rows``, fewer rows: it is slow).
With ``--stream-port`` (the broker's rabbitmq_stream plugin): the same write into a stream,
over AMQP 0-9-1 (``protocol=amqp``: today's confirmed sink) and over the stream protocol
(``protocol=stream``: a named producer per partition, exactly once), target >= 2x;
``--queue-types ''`` leaves the queues out and times only the stream.
Reported: rows/s of each and the ratios against the targets (sink >= 0.7x AsyncPublisher,
>= 10x naive), with the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pika
from results import Timed as Result
from results import arguments, broker_version, fresh_queue, load_average, write_section

from rabbitry.publisher import AsyncPublisher
from rabbitry.uri import mask_uri

HERE = Path(__file__).resolve().parent
SIZE = 1024
BODY = b"x" * SIZE
HEADING = "## Spark sink (bench/spark_sink.py)"


def depth(url: str, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    count = int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    connection.close()
    return count


def async_publisher(url: str, qt: str, n: int) -> Result:
    queue = fresh_queue(url, f"bench.spark.{qt}", qt)

    async def main() -> float:
        async with AsyncPublisher(url, window=512) as pub:
            await pub.publish(b"warm-up", routing_key=queue)
            started = time.perf_counter()
            out = await pub.publish_many((BODY for _ in range(n)), routing_key=queue)
            elapsed = time.perf_counter() - started
            assert all(d.ok for d in out)
            return elapsed

    seconds = asyncio.run(main())
    assert depth(url, queue) == n + 1
    return Result("one AsyncPublisher process, window 512", n, seconds)


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import rabbitry.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rabbitry-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rabbitry.spark.register(spark)
    return spark


def frame(spark: Any, n: int) -> Any:
    from pyspark.sql import functions as F

    body = F.expr(f"cast(repeat('x', {SIZE}) as binary)").alias("body")
    return spark.range(0, n, numPartitions=2).select(body)


def spark_sink(spark: Any, url: str, qt: str, n: int) -> Result:
    queue = fresh_queue(url, f"bench.spark.{qt}", qt)
    df = frame(spark, n)

    def save(data: Any) -> None:
        data.write.format("rabbitmq").mode("append").option("url", url).option(
            "routing_key", queue
        ).option("body_column", "body").save()

    save(frame(spark, 2_000))  # starts the Python workers
    started = time.perf_counter()
    save(df)
    seconds = time.perf_counter() - started
    assert depth(url, queue) == n + 2_000
    return Result("Spark sink (rabbitmq data source), 2 partitions", n, seconds)


def stream_sink(spark: Any, url: str, n: int, protocol: str, port: int) -> Result:
    """The sink into a fresh stream over ``protocol``; the stream's length checked after."""
    from rabbitry.consumer.streams import StreamReader

    stream = fresh_queue(url, "bench.spark.stream", "stream")
    df = frame(spark, n)

    def save(data: Any) -> None:
        data.write.format("rabbitmq").mode("append").option("url", url).option(
            "routing_key", stream
        ).option("body_column", "body").option("protocol", protocol).option(
            "stream_port", port
        ).save()

    save(frame(spark, 2_000))  # starts the Python workers
    started = time.perf_counter()
    save(df)
    seconds = time.perf_counter() - started
    # the stream's last offset must be that of the last row: read it (bounds() guesses the end
    # from how long deliveries pause, which a loaded broker stretches)
    with StreamReader(url, prefetch=100) as reader:
        last = list(reader.read(stream, n + 1_999, n + 2_000, idle_timeout=60))
    assert len(last) == 1, f"no message at offset {n + 1_999} of {stream}"
    name = {"amqp": "AMQP 0-9-1, confirmed", "stream": "stream protocol, exactly once"}[protocol]
    return Result(f"Spark sink into a stream over {name}, 2 partitions", n, seconds)


def naive_rows(url: str, queue: str) -> Callable[[Iterable[Any]], None]:
    def publish(rows: Iterable[Any]) -> None:
        import pika as client

        connection = client.BlockingConnection(client.URLParameters(url))
        channel = connection.channel()
        channel.confirm_delivery()
        persistent = client.BasicProperties(delivery_mode=2)
        for row in rows:
            channel.basic_publish("", queue, bytes(row.body), persistent)
        connection.close()

    return publish


def naive_sink(spark: Any, url: str, qt: str, n: int) -> Result:
    queue = fresh_queue(url, f"bench.spark.{qt}", qt)
    frame(spark, 100).foreachPartition(naive_rows(url, queue))  # warm-up
    df = frame(spark, n)
    started = time.perf_counter()
    df.foreachPartition(naive_rows(url, queue))
    seconds = time.perf_counter() - started
    assert depth(url, queue) == n + 100
    return Result("naive foreachPartition, pika confirm each row", n, seconds)


def median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.rate)[len(results) // 2]


def render(
    results: dict[tuple[str, str], Result],
    args: argparse.Namespace,
    load: tuple[str, str],
    version: str,
) -> str:
    kinds = list(dict.fromkeys(qt for _, qt in results))
    lines = [
        HEADING,
        "",
        "```bash",
        ".venv/bin/python bench/spark_sink.py"
        f" --rows {args.rows} --naive-rows {args.naive_rows} --rounds {args.rounds}"
        f" --queue-types {','.join(kinds)}"
        + (f" --stream-port {args.stream_port}" if args.stream_port else "")
        + " --write-docs",
        "```",
        "",
        "1 KB persistent messages through the default exchange into one durable queue of each"
        " type (re-created empty for each contender), same broker, same run. The sink writes a"
        " DataFrame with a 1 KB binary column in 2 partitions on `local[2]` (one confirmed"
        " connection per partition, window 512), timed from `save()` to its return with Spark's"
        " job overhead included, after a small write that starts the Python workers. The"
        " AsyncPublisher publishes the same number of messages from one process (window 512)."
        " The naive sink is a `foreachPartition` that opens pika and waits for each row's"
        " confirm, on fewer rows. Rounds rotate the order of the contenders; the median round"
        " is shown.",
        "",
        f"{version}, pyspark {pyspark_version()}, {args.rounds} round(s)"
        f" ({dt.date.today().isoformat()}); load average (1, 5, 15 min) before {load[0]},"
        f" after {load[1]}, on 2 cores shared with the broker and other work:",
        "",
        "| contender | queue | rows | seconds | rows/s |",
        "|---|---|---|---|---|",
    ]
    for (_, qt), result in results.items():
        lines.append(
            f"| {result.name} | {qt} | {result.rows:,} | {result.seconds:.2f}"
            f" | {result.rate:,.0f} |"
        )
    lines += [
        "",
        "| ratio | " + " | ".join(kinds) + " | target |",
        "|---|" + "---|" * len(kinds) + "---|",
    ]
    for label, other, target, digits in (
        ("Spark sink / one AsyncPublisher process", "async", ">= 0.7x", 2),
        ("Spark sink / naive foreachPartition", "naive", ">= 10x", 1),
    ):
        cells = [
            f"{results[('sink', qt)].rate / results[(other, qt)].rate:.{digits}f}x" for qt in kinds
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")
    missed = [
        f"{label} on {qt} ({results[('sink', qt)].rate / results[(other, qt)].rate:.2f}x)"
        for label, other, goal in (("vs AsyncPublisher", "async", 0.7), ("vs naive", "naive", 10))
        for qt in kinds
        if results[("sink", qt)].rate / results[(other, qt)].rate < goal
    ]
    scale = ", ".join(
        f"{results[('async', qt)].rate / results[('naive', qt)].rate:.1f}x on {qt}" for qt in kinds
    )
    lines += [
        "",
        ("Targets met." if not missed else "Not met: " + "; ".join(missed) + ".")
        + f" For scale, one AsyncPublisher process alone is {scale} the naive sink: with one"
        " queue the broker, not the number of partitions, sets the ceiling of any confirmed"
        " publisher here.",
        "",
    ]
    return "\n".join(lines)


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def main() -> None:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--naive-rows", type=int, default=10_000)
    parser.add_argument("--queue-types", default="classic,quorum")
    parser.add_argument("--stream-port", type=int, help="also write a stream over both protocols")
    args = parser.parse_args()
    url = args.url
    kinds = [k.strip() for k in args.queue_types.split(",") if k.strip()]
    if (not kinds and not args.stream_port) or set(kinds) - {"classic", "quorum"}:
        parser.error("--queue-types: classic, quorum or both ('' with --stream-port: none)")
    print(f"broker {mask_uri(url)}, {args.rows:,} rows, {kinds}; load {load_average()}")
    load_before = load_average()
    spark = spark_session()
    runs: dict[tuple[str, str], list[Result]] = {}
    for round_no in range(args.rounds):
        order = ["sink", "async", "naive"]
        order = order[round_no % 3 :] + order[: round_no % 3]
        for qt in kinds:
            for name in order:
                if name == "sink":
                    result = spark_sink(spark, url, qt, args.rows)
                elif name == "async":
                    result = async_publisher(url, qt, args.rows)
                else:
                    result = naive_sink(spark, url, qt, args.naive_rows)
                runs.setdefault((name, qt), []).append(result)
                print(
                    f"round {round_no + 1}, {qt}: {result.name}: {result.rate:,.0f} rows/s"
                    f" ({result.seconds:.2f} s)",
                    flush=True,
                )
    streams: dict[str, list[Result]] = {}
    for _ in range(args.rounds if args.stream_port else 0):
        for protocol in ("amqp", "stream"):
            result = stream_sink(spark, url, args.rows, protocol, args.stream_port)
            streams.setdefault(protocol, []).append(result)
            print(f"{result.name}: {result.rate:,.0f} rows/s (load {load_average()})", flush=True)
    spark.stop()
    results = {
        (name, qt): median(runs[(name, qt)]) for qt in kinds for name in ("sink", "async", "naive")
    }
    load = (load_before, load_average())
    text = render(results, args, load, broker_version(url)) if kinds else f"load {load}\n"
    if streams:
        amqp, stream = median(streams["amqp"]), median(streams["stream"])
        text += "\n".join(
            [
                "",
                f"Into a stream (`--stream-port {args.stream_port}`), same run:",
                "",
                "| contender | rows | seconds | rows/s |",
                "|---|---|---|---|",
                *(
                    f"| {r.name} | {r.rows:,} | {r.seconds:.2f} | {r.rate:,.0f} |"
                    for r in (amqp, stream)
                ),
                "",
                "| ratio | value | target |",
                "|---|---|---|",
                f"| stream protocol / AMQP 0-9-1 | {stream.rate / amqp.rate:.2f}x | >= 2x |",
                "",
            ]
        )
    print()
    print(text)
    for qt in kinds:
        fresh_queue(url, f"bench.spark.{qt}", qt)  # leave the queues empty
    if args.write_docs and kinds:  # the section's queue table is the one written
        write_section(HEADING, text)
        print(f"wrote {HEADING!r} in docs/benchmarks.md")


if __name__ == "__main__":
    main()
