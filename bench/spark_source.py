"""Spark source speed: the rabbitmq source vs a plain Python stream consumer vs a parquet copy.

Usage:  python bench/spark_source.py [--messages 100000] [--partitions 4] [--rounds 1]
        [--min-partitions 1] [--max-records-per-partition N] [--stream-port PORT]
        [--writer amqp|stream|confirm-each] [--body same|json|random] [--url URL]
        [--write-docs]
Broker: --url, else $RABBITMQ_URL, else amqp://guest:guest@localhost:5672/.
1 KB messages in one stream and in a super stream of ``--partitions`` partitions (both made
fresh and filled once), same broker, same run. ``--writer`` says how they are written, which
decides how the broker cuts them into chunks, and the broker's cost of sending a stream goes by
the chunk (about 150 us of its CPU each on this machine kind):
- ``amqp`` (the default): rabbitry's Publisher over AMQP 0-9-1 (window 1024, confirms); the
  broker stores about 40 such messages a chunk;
- ``stream``: a named producer over the stream protocol, as the Spark sink and the stream
  clients write (frames of up to the negotiated frame size, a window of unconfirmed messages;
  the same body with the same routing key); a few thousand messages a chunk;
- ``confirm-each``: the Publisher over AMQP 0-9-1, each message confirmed before the next is
  sent, as a publisher that waits for every confirm writes: one message a chunk (filling takes
  about 0.33 ms a message here: give ``--messages 100000``).
``--body`` says what the messages carry: ``same`` (the default), 1,024 times ``x`` in every
message, which parquet stores as one dictionary entry, so that the parquet copy writes almost
nothing; ``json``, order events of 0.6-1.4 KB (1 KB on average) each different (ids, items,
prices, a note of words; zlib compresses them to about 40%), seeded so that every run writes the
same; ``random``, 1 KB of random bytes each (encrypted or compressed payloads).
The messages a chunk holds on average are printed and reported. Read by:
- plain consumer: one pika BlockingConnection consuming the stream from ``first`` (prefetch
  2000, a multiple ack every 1000) into a list in memory, until every message arrived.
- Spark source: ``spark.read.format("rabbitmq")`` on ``local[2]``, over AMQP 0-9-1
  (``protocol=amqp``) and over the stream protocol (``protocol=stream``, on ``--stream-port``
  or the default 5552), into a ``count()`` and into a parquet write, each timed from the action to its return (Spark's job overhead
  included; a small read first starts the Python workers).
- parquet copy: the same two actions reading a parquet copy of the same rows (what the
  pipeline costs without the source).
- with ``--stream-port`` and ``rstream`` importable (not a dependency of rabbitry): an rstream
  consumer reading the stream from ``first`` over the stream protocol (the broker needs the
  rabbitmq_stream plugin), into a list in memory.
Reported: rows/s of each and the ratios (targets: the source over the stream protocol >= 4x
over AMQP 0-9-1, and its parquet write >= 0.5x the parquet copy's: reading is no longer the
larger part of a stream-to-parquet copy).
The issue's size is 1,000,000 messages; the default is smaller so that a run takes minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
from results import Timed, arguments, broker_version, load_average, write_section
from spark_sink import spark_session

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.publisher import Publisher
from rabbitry.stream import amqp10
from rabbitry.stream.blocking import DEFAULT_PORT, StreamClient
from rabbitry.stream.producer import Producer, entries_of
from rabbitry.uri import mask_uri

SIZE = 1024
BODY = b"x" * SIZE
BODY_KINDS = {
    "same": "1 KB bodies, all alike (1,024 times `x`)",
    "json": "JSON order events of 0.6-1.4 KB (1 KB on average), each different (seeded: the same in every run)",
    "random": "1 KB bodies of random bytes, each different",
}
_LETTERS = "etaoinshrdlucmfwypvbgkjqxz"
STREAM = "bench.source"
SUPER = "bench.source.super"
HEADINGS = {
    "amqp": "## Spark source (bench/spark_source.py)",
    "stream": "## Spark source, streams written over the stream protocol"
    " (bench/spark_source.py --writer stream)",
    "confirm-each": "## Spark source, streams of one message a chunk"
    " (bench/spark_source.py --writer confirm-each)",
}

WRITTEN_BY = {
    "amqp": "by rabbitry's Publisher over AMQP 0-9-1",
    "stream": "by a named producer over the stream protocol (as the Spark sink writes)",
    "confirm-each": "by rabbitry's Publisher over AMQP 0-9-1, each message confirmed before"
    " the next",
}


def heading(args: argparse.Namespace) -> str:
    """The docs section of a run: by how the streams were written and their bodies."""
    if args.body == "same":
        return HEADINGS[args.writer]
    writer = f" --writer {args.writer}" if args.writer != "amqp" else ""
    return f"## Spark source, {args.body} bodies (bench/spark_source.py --body {args.body}{writer})"


@dataclass
class Result(Timed):
    """A timed read, and what it read from (the stream's protocol, or parquet)."""

    target: str = ""


def fresh_streams(url: str, partitions: int) -> list[str]:
    """The stream and the super stream's partitions, empty; the partitions' names."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    names = [f"{SUPER}-{i}" for i in range(partitions)]
    for name in [STREAM, *names]:
        channel.queue_delete(name)
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    channel.exchange_delete(SUPER)
    channel.exchange_declare(SUPER, "direct", durable=True, arguments={"x-super-stream": True})
    for i, name in enumerate(names):
        channel.queue_bind(name, SUPER, str(i), arguments={"x-stream-partition-order": i})
    connection.close()
    return names


def share(n: int, partitions: int, i: int) -> int:
    """The messages partition ``i`` of the super stream gets of ``n``."""
    return n // partitions + (1 if i < n % partitions else 0)


def bodies(kind: str, n: int, seed: int = 0) -> Iterator[bytes]:
    """``n`` message bodies of ``kind`` (``BODY_KINDS``)."""
    if kind == "same":
        yield from itertools.repeat(BODY, n)
        return
    if kind == "random":
        for _ in range(n):
            yield os.urandom(SIZE)
        return
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choices(_LETTERS[: rng.randint(8, 26)], k=rng.randint(2, 11)))
        for _ in range(2000)
    ]
    text = " ".join(rng.choices(vocabulary, k=200_000))
    for i in range(n):
        items = ",".join(
            f'{{"sku":"SKU-{rng.randrange(100_000):05d}","qty":{rng.randint(1, 9)},'
            f'"price":{rng.randrange(100, 50_000) / 100}}}'
            for _ in range(rng.randint(2, 7))
        )
        at = rng.randrange(len(text) - 1000)
        note = text[at : at + rng.randint(350, 850)]
        yield (
            f'{{"order_id":"ord-{seed}-{i:09d}","customer":"cust-{rng.randrange(10**6):06d}",'
            f'"placed_at":"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T'
            f'{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z",'
            f'"currency":"{rng.choice(("EUR", "USD", "GBP", "JPY"))}",'
            f'"trace":"{rng.getrandbits(128):032x}","items":[{items}],'
            f'"shipping":{{"postcode":"{rng.randrange(100_000):05d}","note":{json.dumps(note)}}}}}'
        ).encode()


def fill(url: str, n: int, partitions: int, kind: str = "same") -> None:
    with Publisher(url, window=1024) as publisher:
        out = publisher.publish_many(bodies(kind, n), routing_key=STREAM)
        assert all(d.ok for d in out)
        for i in range(partitions):
            out = publisher.publish_many(
                bodies(kind, share(n, partitions, i), seed=i + 1),
                exchange=SUPER,
                routing_key=str(i),
            )
            assert all(d.ok for d in out)


def fill_each(url: str, n: int, partitions: int, kind: str = "same") -> None:
    """The same messages published one at a time, each confirmed before the next: a chunk
    each, as a publisher that waits for every confirm (or a slow one) writes a stream."""
    with Publisher(url) as publisher:
        for body in bodies(kind, n):
            assert publisher.publish(body, routing_key=STREAM).ok
        for i in range(partitions):
            for body in bodies(kind, share(n, partitions, i), seed=i + 1):
                assert publisher.publish(body, exchange=SUPER, routing_key=str(i)).ok


def fill_streamed(url: str, n: int, partitions: int, port: int, kind: str = "same") -> None:
    """The same messages written by a named producer over the stream protocol."""
    shares = [(STREAM, n, STREAM, 0)] + [
        (f"{SUPER}-{i}", share(n, partitions, i), str(i), i + 1) for i in range(partitions)
    ]
    settings = ConnectionSettings.from_url(url)
    with StreamClient(settings, port=port) as client, Producer(client, "bench.fill") as producer:
        for stream, count, key, seed in shares:
            messages = (amqp10.encode(body, routing_key=key) for body in bodies(kind, count, seed))
            for start in range(0, count, 10_000):
                ids = range(start + 1, min(count, start + 10_000) + 1)
                offsets, entries = entries_of(list(zip(ids, messages, strict=False)))
                producer.send(stream, offsets, entries)
        producer.finish()


def per_chunk(url: str, n: int, port: int) -> float:
    """The messages a chunk of the stream holds, on average."""
    settings = ConnectionSettings.from_url(url)
    held = chunks = 0
    with StreamClient(settings, port=port) as client:
        for chunk in client.read_chunks(STREAM, 0, n + 1):
            held, chunks = held + chunk.count, chunks + 1
            if held >= n:
                break
    return held / chunks


def plain_consumer(url: str, streams: list[str], n: int) -> Result:
    """pika, one connection, every stream from its first message, bodies into a list."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2000)
    bodies: list[bytes] = []
    unacked = 0

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        nonlocal unacked
        bodies.append(body)
        unacked += 1
        if unacked >= 1000:
            ch.basic_ack(method.delivery_tag, multiple=True)
            unacked = 0

    started = time.perf_counter()
    for stream in streams:
        channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
    while len(bodies) < n:
        connection.process_data_events(time_limit=0.1)
    seconds = time.perf_counter() - started
    connection.close()
    target = "stream" if len(streams) == 1 else f"super stream ({len(streams)})"
    return Result("plain Python stream consumer (pika) into memory", len(bodies), seconds, target)


def rstream_consumer(url: str, port: int, n: int) -> Result | None:
    """rstream over the stream protocol, the stream from its first message, bodies into a list."""
    try:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType
    except ImportError:
        print("rstream is not installed: its contender is left out", flush=True)
        return None
    import asyncio
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"

    async def run() -> Result:
        bodies: list[Any] = []
        done = asyncio.Event()

        async def on_message(message: Any, context: Any) -> None:
            bodies.append(message)
            if len(bodies) >= n:
                done.set()

        async with Consumer(
            host=parts.hostname or "localhost",
            port=port,
            username=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=vhost,
        ) as consumer:
            started = time.perf_counter()
            await consumer.start()
            await consumer.subscribe(
                stream=STREAM,
                callback=on_message,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            )
            await asyncio.wait_for(done.wait(), 600)
            seconds = time.perf_counter() - started
        return Result("rstream consumer (stream protocol) into memory", n, seconds, "stream")

    return asyncio.run(run())


PROTOCOLS = {"amqp": "AMQP 0-9-1", "stream": "stream protocol"}
EXTRA_OPTIONS: dict[str, str] = {}
"""More options of every read (``--max-records-per-partition``)."""


def source(
    spark: Any,
    url: str,
    super_stream: bool,
    min_partitions: int = 1,
    protocol: str = "amqp",
    stream_port: int | None = None,
) -> Any:
    reader = (
        spark.read.format("rabbitmq")
        .option("url", url)
        .option("minPartitions", min_partitions)
        .option("protocol", protocol)
    )
    if stream_port:
        reader = reader.option("stream_port", stream_port)
    for key, value in EXTRA_OPTIONS.items():
        reader = reader.option(key, value)
    if super_stream:
        return reader.option("super_stream", SUPER).load()
    return reader.option("stream", STREAM).load()


def timed(name: str, target: str, n: int, action: Any) -> Result:
    started = time.perf_counter()
    rows = action()
    seconds = time.perf_counter() - started
    if rows is not None:
        assert rows == n, (name, rows, n)
    return Result(name, n, seconds, target)


def spark_runs(
    spark: Any,
    url: str,
    n: int,
    partitions: int,
    min_partitions: int,
    scratch: Path,
    stream_port: int | None,
) -> list[Result]:
    """count() and a parquet write, of the source over each protocol and then of a parquet
    copy of its rows."""
    results = []
    for super_stream in (False, True):
        target = f"super stream ({partitions})" if super_stream else "stream"
        for protocol, name in PROTOCOLS.items():
            df = source(spark, url, super_stream, min_partitions, protocol, stream_port)
            label = f"Spark source over {name}"
            out = scratch / f"{protocol}-{super_stream}"
            results.append(timed(f"{label}: count()", target, n, df.count))
            results.append(
                timed(
                    f"{label}: parquet write",
                    target,
                    n,
                    lambda d=df, o=out: d.write.mode("overwrite").parquet(str(o)),
                )
            )
        df = spark.read.parquet(str(out))  # the copy of the last pass
        out = scratch / f"copy-{super_stream}"
        results.append(timed("parquet copy: count()", target, n, df.count))
        results.append(
            timed(
                "parquet copy: parquet write",
                target,
                n,
                lambda d=df, o=out: d.write.mode("overwrite").parquet(str(o)),
            )
        )
    return results


def render(
    results: list[Result],
    args: argparse.Namespace,
    load: tuple[str, str],
    version: str,
    chunk_size: float,
) -> str:
    import pyspark

    lines = [
        heading(args),
        "",
        "```bash",
        f".venv/bin/python bench/spark_source.py --messages {args.messages}"
        f" --partitions {args.partitions} --min-partitions {args.min_partitions}"
        f" --rounds {args.rounds}"
        + (
            f" --max-records-per-partition {args.max_records_per_partition}"
            if args.max_records_per_partition
            else ""
        )
        + (f" --stream-port {args.stream_port}" if args.stream_port else "")
        + (f" --writer {args.writer}" if args.writer != "amqp" else "")
        + (f" --body {args.body}" if args.body != "same" else "")
        + " --write-docs",
        "```",
        "",
        f"Messages in one stream and in a super stream, same broker, same run:"
        f" {BODY_KINDS[args.body]}, written "
        + WRITTEN_BY[args.writer]
        + f": {chunk_size:,.0f} messages a chunk on average, and the broker's cost of sending"
        " a stream goes by the chunk. The plain"
        " consumer is one pika connection reading every message from `first` into a list"
        " (prefetch 2000, a multiple ack every 1000). The source runs on `local[2]`, over AMQP"
        " 0-9-1 (`protocol=amqp`) and over the stream protocol (`protocol=stream`), timed from"
        " the action to its return with Spark's job overhead included; the parquet copy is the"
        " same pipeline over a parquet copy of the rows. The issue's size is 1,000,000 messages;"
        " this table's size is in the command above."
        + (
            " The rstream consumer (installed beside rabbitry for the run, not a dependency)"
            " reads the same stream over the stream protocol, the broker's rabbitmq_stream"
            " plugin enabled."
            if any(r.name.startswith("rstream") for r in results)
            else ""
        ),
        "",
        f"{version}, pyspark {pyspark.__version__}, {args.rounds} round(s)"
        f" ({dt.date.today().isoformat()}); load average (1, 5, 15 min) before {load[0]},"
        f" after {load[1]}, on 2 cores shared with the broker and other work:",
        "",
        "| contender | reads | rows | seconds | rows/s |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r.name} | {r.target} | {r.rows:,} | {r.seconds:.2f} | {r.rate:,.0f} |")
    by = {(r.name, r.target): r for r in results}
    lines += ["", "| ratio | reads | value | target |", "|---|---|---|---|"]
    for target in dict.fromkeys(r.target for r in results):
        plain = by[("plain Python stream consumer (pika) into memory", target)]
        copy_write = by[("parquet copy: parquet write", target)]
        counts = {}
        for protocol, name in PROTOCOLS.items():
            count = counts[protocol] = by[(f"Spark source over {name}: count()", target)]
            write = by[(f"Spark source over {name}: parquet write", target)]
            lines.append(
                f"| source count ({protocol}) / plain consumer | {target}"
                f" | {count.rate / plain.rate:.2f}x | - |"
            )
            # below 0.5x, reading is the larger part of the stream-to-parquet copy
            lines.append(
                f"| source parquet write ({protocol}) / parquet copy write | {target}"
                f" | {write.rate / copy_write.rate:.2f}x | {'>= 0.5x' if protocol == 'stream' else '-'} |"
            )
        lines.append(
            f"| source count, stream protocol / AMQP 0-9-1 | {target}"
            f" | {counts['stream'].rate / counts['amqp'].rate:.2f}x | >= 4x |"
        )
    rstream = by.get(("rstream consumer (stream protocol) into memory", "stream"))
    if rstream is not None:
        plain = by[("plain Python stream consumer (pika) into memory", "stream")]
        count = by[("Spark source over stream protocol: count()", "stream")]
        lines.append(
            f"| rstream / plain consumer | stream | {rstream.rate / plain.rate:.2f}x | - |"
        )
        lines.append(f"| source count / rstream | stream | {count.rate / rstream.rate:.2f}x | - |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--min-partitions", type=int, default=1, help="the minPartitions option")
    parser.add_argument("--stream-port", type=int, help="stream protocol port: runs rstream too")
    parser.add_argument(
        "--writer",
        choices=("amqp", "stream", "confirm-each"),
        default="amqp",
        help="how the streams are written: over AMQP 0-9-1, over the stream protocol, or"
        " over AMQP 0-9-1 one message at a time, each confirmed before the next (a chunk each)",
    )
    parser.add_argument(
        "--body",
        choices=tuple(BODY_KINDS),
        default="same",
        help="the messages' bodies: all alike (parquet stores them as one dictionary entry),"
        " varied JSON order events, or random bytes",
    )
    parser.add_argument(
        "--max-records-per-partition",
        type=int,
        help="the maxRecordsPerPartition option (the source's default: 500,000)",
    )
    args = parser.parse_args()
    if args.max_records_per_partition:
        EXTRA_OPTIONS["maxRecordsPerPartition"] = str(args.max_records_per_partition)
    url, n = args.url, args.messages
    print(f"broker {mask_uri(url)}, {n:,} messages: {BODY_KINDS[args.body]}", flush=True)
    load_before = load_average()
    names = fresh_streams(url, args.partitions)
    started = time.perf_counter()
    port = args.stream_port or DEFAULT_PORT
    if args.writer == "stream":
        fill_streamed(url, n, args.partitions, port, args.body)
    elif args.writer == "confirm-each":
        fill_each(url, n, args.partitions, args.body)
    else:
        fill(url, n, args.partitions, args.body)
    chunk_size = per_chunk(url, n, port)
    print(
        f"filled over {args.writer} in {time.perf_counter() - started:.1f} s,"
        f" {chunk_size:,.0f} messages a chunk",
        flush=True,
    )
    spark = spark_session()
    # a read of ten messages starts the Python workers
    source(spark, url, False, protocol="stream", stream_port=args.stream_port).where(
        "offset < 10"
    ).count()
    scratch = Path(tempfile.mkdtemp(prefix="rabbitry-bench-source-"))
    runs: dict[tuple[str, str], list[Result]] = {}
    try:
        for _ in range(args.rounds):
            round_results = [
                plain_consumer(url, [STREAM], n),
                plain_consumer(url, names, n),
                *spark_runs(
                    spark,
                    url,
                    n,
                    args.partitions,
                    args.min_partitions,
                    scratch,
                    args.stream_port,
                ),
            ]
            if args.stream_port:
                other = rstream_consumer(url, args.stream_port, n)
                round_results += [other] if other is not None else []
            for r in round_results:
                runs.setdefault((r.name, r.target), []).append(r)
                print(
                    f"{r.name} ({r.target}): {r.rate:,.0f} rows/s ({r.seconds:.2f} s)", flush=True
                )
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    medians = [sorted(rs, key=lambda r: r.rate)[len(rs) // 2] for rs in runs.values()]
    order = {"stream": 0}
    medians.sort(key=lambda r: order.get(r.target, 1))
    text = render(medians, args, (load_before, load_average()), broker_version(url), chunk_size)
    print()
    print(text)
    fresh_streams(url, args.partitions)  # leave the streams empty
    if args.write_docs:
        write_section(heading(args), text)
        print(f"wrote {heading(args)!r} in docs/benchmarks.md")


if __name__ == "__main__":
    main()
