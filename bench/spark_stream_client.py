"""Which stream-protocol client the Spark source and sink use: rabbitry's own frames vs rstream.

Usage:  python bench/spark_stream_client.py --stream-port PORT [--messages 200000] [--url URL]
One stream of 1 KB messages published over AMQP 0-9-1 (as the Spark source usually finds them),
read from its first offset into rows (body, routing key, headers, properties: what the source
makes of a message) by:
- rabbitry's AMQP 0-9-1 stream reader (``rabbitry.consumer.streams``: the source's AMQP path);
- rabbitry's stream-protocol client (``rabbitry.stream``: sans-I/O session, blocking socket,
  its AMQP 1.0 decoder);
- rstream (pip ``rstream``, asyncio; its own AMQP 1.0 decoder), when importable.
Then each writes the same rows into a fresh stream with de-duplication (named producer,
publishing ids): rabbitry's client and rstream's ``Producer``.
Prints rows/s and the load average (the machine is shared: compare within one run).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any
from urllib.parse import unquote, urlsplit

import pika
from results import arguments, load_average

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.streams import StreamReader, offset_of
from rabbitry.publisher import Publisher
from rabbitry.spark.source_rows import row_of
from rabbitry.stream import amqp10
from rabbitry.stream.blocking import StreamClient

STREAM = "bench.stream-client"
OUT = "bench.stream-client.out"
BODY = b"x" * 1024


def fresh(url: str, *names: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for name in names:
        channel.queue_delete(name)
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()


def amqp_path(url: str, n: int) -> float:
    started = time.perf_counter()
    with StreamReader(url, prefetch=2000) as reader:
        rows = [row_of(m, STREAM, offset_of(m)) for m in reader.read(STREAM, 0, n)]
    assert len(rows) == n
    return time.perf_counter() - started


def own_client(url: str, port: int, n: int) -> float:
    started = time.perf_counter()
    with StreamClient(ConnectionSettings.from_url(url), port=port) as client:
        rows = []
        for chunk in client.read_chunks(STREAM, 0, n):
            for offset, record in enumerate(chunk.records, chunk.first_offset):
                m = amqp10.decode(record)
                rows.append((m.body, m.routing_key, m.headers, m.properties, STREAM, offset))
    assert len(rows) == n
    return time.perf_counter() - started


def own_sink(url: str, port: int, n: int) -> float:
    messages = [(OUT, i + 1, amqp10.encode(BODY, message_id=f"m-{i}")) for i in range(n)]
    started = time.perf_counter()
    with StreamClient(ConnectionSettings.from_url(url), port=port) as client:
        client.publish("bench-own", messages)
    return time.perf_counter() - started


def _rstream_args(url: str, port: int) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "localhost",
        "port": port,
        "username": unquote(parts.username or "guest"),
        "password": unquote(parts.password or "guest"),
        "vhost": unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
    }


def rstream_client(url: str, port: int, n: int) -> float:
    from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder

    async def run() -> float:
        rows: list[Any] = []
        done = asyncio.Event()

        async def on_message(message: AMQPMessage, context: Any) -> None:
            rows.append(
                (
                    bytes(message.body),
                    message.message_annotations,
                    message.application_properties,
                    message.properties,
                    STREAM,
                    context.offset,
                )
            )
            if len(rows) >= n:
                done.set()

        started = time.perf_counter()
        async with Consumer(**_rstream_args(url, port)) as consumer:
            await consumer.start()
            await consumer.subscribe(
                stream=STREAM,
                callback=on_message,
                decoder=amqp_decoder,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            )
            await asyncio.wait_for(done.wait(), 600)
            return time.perf_counter() - started

    return asyncio.run(run())


def rstream_sink(url: str, port: int, n: int) -> float:
    from rstream import AMQPMessage, Producer

    async def run() -> float:
        started = time.perf_counter()
        async with Producer(**_rstream_args(url, port)) as producer:
            messages = []
            for i in range(n):
                # rstream 1.1.1's AMQPMessage refuses publishing_id= as a keyword
                message = AMQPMessage(body=BODY)
                message.publishing_id = i + 1
                messages.append(message)
            for i in range(0, n, 500):
                await producer.send_batch(OUT, messages[i : i + 500], publisher_name="bench-rs")
        return time.perf_counter() - started

    return asyncio.run(run())


def main() -> None:
    parser = arguments(__doc__, os.environ.get("RABBITMQ_URL", "amqp://guest:guest@localhost/"))
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--stream-port", type=int, required=True)
    args = parser.parse_args()
    url, n, port = args.url, args.messages, args.stream_port
    fresh(url, STREAM)
    with Publisher(url, window=1024) as publisher:
        assert all(
            d.ok for d in publisher.publish_many((BODY for _ in range(n)), routing_key=STREAM)
        )
    print(f"{n} messages of 1 KB; load average {load_average()}")
    contenders = [
        ("AMQP 0-9-1 reader (rabbitry.consumer.streams)", amqp_path),
        ("stream protocol, rabbitry.stream", own_client),
    ]
    try:
        import rstream  # noqa: F401

        contenders.append(("stream protocol, rstream 1.1.1", rstream_client))
    except ImportError:
        print("rstream is not installed: left out")
    for name, read in contenders:
        seconds = read(url, n) if name.startswith("AMQP") else read(url, port, n)
        print(f"read  {name}: {n / seconds:,.0f} rows/s (load {load_average()})", flush=True)
    writers = [("rabbitry.stream (named producer)", own_sink)]
    if len(contenders) > 2:
        writers.append(("rstream Producer (publishing ids)", rstream_sink))
    for name, write in writers:
        fresh(url, OUT)
        seconds = write(url, port, n)
        print(f"write {name}: {n / seconds:,.0f} rows/s (load {load_average()})", flush=True)


if __name__ == "__main__":
    main()
