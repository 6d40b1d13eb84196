"""Consuming speed: rabbitry AsyncWorker/Worker vs aio-pika, pika and Node's amqplib.

Usage:  python bench/consume.py [--messages 50000] [--rounds 1] [--url URL] [--skip-node]
        [--write-docs]
Broker: --url, else $RABBITMQ_URL, else a dev broker (`rabbitry dev-broker up`) at
amqp://guest:guest@localhost:5672/. For every contender a durable classic and a durable quorum
queue are re-created and filled with a backlog of 1 KB persistent messages (published with
confirms before the clock starts); the contender then drains the backlog with a no-op handler
and manual acks, prefetch 300, one client process each, same broker, same run. The clock runs
from connecting until the last message is acked (the queue is checked empty afterwards).
- rabbitry AsyncWorker / Worker: their defaults (multiple acks per read batch).
- aio-pika: `await message.ack()` for each message (its usual consumer).
- pika BlockingConnection: `basic_ack` for each message.
- Node amqplib: a multiple ack every 150 messages (the fast Node consumer).
- retry path: an AsyncWorker whose handler fails every message once: each is republished with
  a confirm to a retry tier queue (TTL 1 ms, dead-lettering back), acked, delivered again and
  then acked; the clock stops when every message has succeeded.
Amqplib is installed from the npm registry into bench/.node/ (gitignored) on first use.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

import aio_pika
import pika
from results import Run, arguments, broker_version, node_script, ratio, run_node, write_section

from rabbitry.consumer import App, AsyncWorker, IncomingMessage, Worker
from rabbitry.policies.retry import Backoff, RetryPolicy
from rabbitry.publisher import Publisher
from rabbitry.topology.patterns.retries import QueueRetry
from rabbitry.uri import mask_uri

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / ".node"
SIZE = 1024
BODY = b"x" * SIZE
PREFETCH = 300
ACK_EVERY = 150
QUEUE_TYPES = ("classic", "quorum")

ASYNC = "rabbitry AsyncWorker"
SYNC = "rabbitry Worker"
AIO_PIKA = "aio-pika, ack each"
PIKA = "pika BlockingConnection, ack each"
AMQPLIB = f"Node amqplib, multiple-ack every {ACK_EVERY}"
RETRY = "rabbitry AsyncWorker, every message fails once"


Result = Run


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def vhost_url(url: str) -> str:
    return url if url.rstrip("/").count("/") > 2 else url.rstrip("/") + "/%2F"


def fill(url: str, qt: str, n: int, name: str = "bench.consume") -> str:
    queue = f"{name}.{qt}"
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_delete(queue)
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": qt})
    connection.close()
    with Publisher(url) as pub:
        for d in pub.stream([BODY] * n, routing_key=queue):
            if not d.ok:
                raise RuntimeError(f"backlog not stored: {d.error}")
    return queue


def remaining(url: str, queue: str, settle: float = 5.0) -> int:
    """Messages left in ``queue``, after giving the broker ``settle`` s to apply the last acks."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    deadline = time.monotonic() + settle
    while True:
        count = int(channel.queue_declare(queue, passive=True).method.message_count)
        if count == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    connection.close()
    return count


def timed(name: str, qt: str, n: int, run: Callable[[], None]) -> Result:
    cpu0, t0 = cpu_now(), time.perf_counter()
    run()
    return Result(name, n, time.perf_counter() - t0, qt, cpu_now() - cpu0)


# -- contenders ----------------------------------------------------------------------------------


def rabbitry_async(url: str, queue: str, qt: str, n: int) -> Result:
    app = App()
    seen = 0

    @app.handler(queue)
    async def handle(message: IncomingMessage) -> None:
        nonlocal seen
        seen += 1

    worker = AsyncWorker(app, url, prefetch=PREFETCH)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        while worker.metrics[queue].acked < n and not task.done():
            await asyncio.sleep(0.005)
        worker.stop()
        await task

    return timed(ASYNC, qt, n, lambda: asyncio.run(main()))


def rabbitry_sync(url: str, queue: str, qt: str, n: int) -> Result:
    app = App()
    worker: Worker

    @app.handler(queue)
    def handle(message: IncomingMessage) -> None:
        if worker.metrics[queue].received >= n:
            worker.stop()

    worker = Worker(app, url, prefetch=PREFETCH)
    return timed(SYNC, qt, n, worker.run)


def aio_pika_ack_each(url: str, queue: str, qt: str, n: int) -> Result:
    async def main() -> None:
        connection = await aio_pika.connect(url)
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        q = await channel.get_queue(queue, ensure=False)
        done = asyncio.Event()
        seen = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal seen
            await message.ack()
            seen += 1
            if seen >= n:
                done.set()

        await q.consume(on_message)
        await done.wait()
        await connection.close()

    return timed(AIO_PIKA, qt, n, lambda: asyncio.run(main()))


def pika_ack_each(url: str, queue: str, qt: str, n: int) -> Result:
    def run() -> None:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=PREFETCH)
        seen = 0

        def on_message(ch: object, method: object, props: object, body: bytes) -> None:
            nonlocal seen
            channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]
            seen += 1
            if seen >= n:
                channel.stop_consuming()

        channel.basic_consume(queue, on_message)
        channel.start_consuming()
        connection.close()

    return timed(PIKA, qt, n, run)


def amqplib(url: str, queue: str, qt: str, n: int, script: Path) -> Result:
    data = run_node(script, url, queue, str(n), str(PREFETCH), str(ACK_EVERY))
    return Result(AMQPLIB, n, data["seconds"], qt, data["cpu"])


def retry_path(url: str, qt: str, n: int) -> Result:
    queue = fill(url, qt, n, name="bench.retry")
    tier = f"{queue}.retry.1ms"
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_delete(tier)
    arguments: dict[str, object] = {
        "x-queue-type": qt,
        "x-message-ttl": 1,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue,
    }
    if qt == "quorum":
        arguments |= {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    channel.queue_declare(tier, durable=True, arguments=arguments)
    # the worker checks at start that its parking lot exists (no message reaches it here)
    channel.queue_declare(f"{queue}.parking", durable=True, arguments={"x-queue-type": qt})
    connection.close()
    retry = QueueRetry(
        queue=queue,
        policy=RetryPolicy(attempts=2, backoff=Backoff(tiers_ms=(1,))),
        parking_queue=f"{queue}.parking",
        tier_queues={1: tier},
    )
    app = App()
    succeeded = 0

    @app.handler(queue, retry=retry)
    async def handle(message: IncomingMessage) -> None:
        nonlocal succeeded
        if message.attempt == 1:
            raise RuntimeError("first attempt fails")
        succeeded += 1

    worker = AsyncWorker(app, url, prefetch=PREFETCH)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        while succeeded < n and not task.done():
            await asyncio.sleep(0.005)
        worker.stop()
        await task

    import logging

    logging.getLogger("rabbitry.worker").setLevel(logging.CRITICAL)
    result = timed(RETRY, qt, n, lambda: asyncio.run(main()))
    if remaining(url, queue) or remaining(url, tier):
        raise RuntimeError("retry path left messages behind")
    return result


# -- report --------------------------------------------------------------------------------------


def table(results: dict[tuple[str, str], Result]) -> str:
    names = list(dict.fromkeys(name for name, _ in results))
    lines = ["| contender | queue | msg/s | CPU s / 100k |", "|---|---|---|---|"]
    for qt in QUEUE_TYPES:
        for name in names:
            r = results.get((name, qt))
            if r is not None:
                lines.append(f"| {name} | {qt} | {r.rate:,.0f} | {r.cpu_per_100k:.2f} |")
    return "\n".join(lines)


def ratios(results: dict[tuple[str, str], Result]) -> str:
    lines = ["| ratio | classic | quorum | target |", "|---|---|---|---|"]
    checks = [
        ("AsyncWorker / aio-pika ack each", ASYNC, AIO_PIKA, ">= 3x"),
        ("AsyncWorker / amqplib", ASYNC, AMQPLIB, ">= 0.5x"),
        ("Worker / pika ack each", SYNC, PIKA, ""),
        ("Worker / amqplib", SYNC, AMQPLIB, ""),
        ("retry path / AsyncWorker", RETRY, ASYNC, ""),
    ]
    for label, a, b, target in checks:
        cells = []
        for qt in QUEUE_TYPES:
            ra, rb = results.get((a, qt)), results.get((b, qt))
            cells.append(ratio(ra and ra.rate, rb and rb.rate))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {target} |")
    return "\n".join(lines)


def main() -> None:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--skip-node", action="store_true")
    args = parser.parse_args()
    url = vhost_url(args.url)
    n = args.messages
    script = None if args.skip_node else node_script("consume.js")
    print(f"broker {mask_uri(url)}, {n} messages of {SIZE} B, prefetch {PREFETCH}", flush=True)
    load_before = os.getloadavg()
    runs: dict[tuple[str, str], list[Result]] = {}
    for _ in range(args.rounds):
        for qt in QUEUE_TYPES:
            contenders: list[Callable[[str], Result]] = [
                lambda q, qt=qt: rabbitry_async(url, q, qt, n),
                lambda q, qt=qt: rabbitry_sync(url, q, qt, n),
                lambda q, qt=qt: aio_pika_ack_each(url, q, qt, n),
                lambda q, qt=qt: pika_ack_each(url, q, qt, n),
            ]
            if script is not None:
                contenders.append(lambda q, qt=qt: amqplib(url, q, qt, n, script))
            for contender in contenders:
                queue = fill(url, qt, n)
                result = contender(queue)
                if remaining(url, queue):
                    raise RuntimeError(f"{result.name} left messages in {queue}")
                runs.setdefault((result.name, qt), []).append(result)
                print(f"  {result.name:48} {qt:8} {result.rate:>10,.0f} msg/s", flush=True)
            result = retry_path(url, qt, n)
            runs.setdefault((result.name, qt), []).append(result)
            print(f"  {result.name:48} {qt:8} {result.rate:>10,.0f} msg/s", flush=True)
    results = {
        key: sorted(values, key=lambda r: r.rate)[len(values) // 2] for key, values in runs.items()
    }
    load_after = os.getloadavg()
    text = "\n".join(
        [
            "## Consuming (bench/consume.py)",
            "",
            "```bash",
            f".venv/bin/python bench/consume.py --messages {n} --rounds {args.rounds}",
            "```",
            "",
            (__doc__ or "").split("\n\n", 1)[1].split("Amqplib is installed")[0].strip(),
            "",
            f"{broker_version(url)}, {n:,} messages per run, median of {args.rounds}"
            f" round(s), {time.strftime('%Y-%m-%d')}; load average {load_before[0]:.2f} before,"
            f" {load_after[0]:.2f} after:",
            "",
            table(results),
            "",
            ratios(results),
            "",
        ]
    )
    print(text)
    if args.write_docs:
        write_section("## Consuming (bench/consume.py)", text)


if __name__ == "__main__":
    main()
