"""Publishing speed: rabbitry Publisher/AsyncPublisher vs pika, aio-pika and Node's amqplib.

Usage:  python bench/publish.py [--messages 50000] [--naive-messages 5000] [--rounds 1]
        [--url URL] [--skip-node] [--write-docs]
Broker: --url, else $RABBITMQ_URL, else a dev broker (`rabbitry dev-broker up`) at
amqp://guest:guest@localhost:5672/. 1 KB persistent messages to the default exchange, into a
durable classic and a durable quorum queue (re-created empty for every contender), one client
process each, same broker, same run. Confirmed contenders keep a window of unconfirmed
messages: rabbitry 512, amqplib 512, aio-pika gathered windows of 256; the naive pika loop
waits for every confirm. Unconfirmed contenders are timed until the broker holds every
message. Reported: msg/s, ratios, client CPU seconds per 100k messages, confirm latency
(time from handing a message to the client until its confirm) p50/p99.
Amqplib is installed from the npm registry into bench/.node/ (gitignored) on first use.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aio_pika
import pika
from results import (
    Run,
    arguments,
    broker_version,
    fresh_queue,
    node_script,
    run_node,
    write_section,
)

from rabbitry.publisher import AsyncPublisher, Delivery, Publisher
from rabbitry.uri import mask_uri

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / ".node"
SIZE = 1024
BODY = b"x" * SIZE
QUEUE_TYPES = ("classic", "quorum")


@dataclass
class Result(Run):
    latencies_ms: list[float] = field(default_factory=list)
    p50: float | None = None
    p99: float | None = None

    def finish(self) -> Result:
        if self.latencies_ms and self.p50 is None:
            data = sorted(self.latencies_ms)
            self.p50 = data[len(data) // 2]
            self.p99 = data[min(len(data) - 1, int(len(data) * 0.99))]
        self.latencies_ms = []
        return self


def wait_for_count(url: str, queue: str, queue_type: str, count: int, limit: float = 300) -> None:
    """Poll until the broker holds ``count`` messages in ``queue``."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    end = time.monotonic() + limit
    try:
        while time.monotonic() < end:
            ok = channel.queue_declare(
                queue, durable=True, passive=True, arguments={"x-queue-type": queue_type}
            )
            if ok.method.message_count >= count:
                return
            time.sleep(0.005)
        raise RuntimeError(f"{queue} never reached {count} messages")
    finally:
        connection.close()


class Clock:
    """Wall and CPU time of this process."""

    def __enter__(self) -> Clock:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def timed_bodies(n: int, sent: list[float]) -> Iterator[bytes]:
    clock = time.perf_counter
    for _ in range(n):
        sent.append(clock())
        yield BODY


def latency_hook(
    settled: dict[int, float], chain: Callable[[Delivery], None] | None
) -> Callable[[Delivery], None]:
    clock = time.perf_counter

    def hook(delivery: Delivery) -> None:
        settled[id(delivery)] = clock()
        if chain is not None:
            chain(delivery)

    return hook


def latencies(out: list[Delivery], sent: list[float], settled: dict[int, float]) -> list[float]:
    return [(settled[id(d)] - s) * 1000 for d, s in zip(out, sent, strict=True) if id(d) in settled]


# -- contenders --------------------------------------------------------------------------------


def rabbitry_sync(url: str, qt: str, n: int, confirms: bool) -> Result:
    queue = fresh_queue(url, f"bench.publish.{qt}", qt)
    sent: list[float] = []
    settled: dict[int, float] = {}
    with Publisher(url, confirms=confirms, window=512) as pub:
        pub.publish(b"warm-up", routing_key=queue)
        if confirms:
            pub.tracker.on_settle = latency_hook(settled, None)
        with Clock() as clock:
            out = pub.publish_many(timed_bodies(n, sent), routing_key=queue)
            if not confirms:
                wait_for_count(url, queue, qt, n + 1)
    assert all(d.ok for d in out)
    name = "rabbitry Publisher" + ("" if confirms else ", confirms off")
    return Result(name, n, clock.wall, qt, clock.cpu, latencies(out, sent, settled)).finish()


def rabbitry_async(url: str, qt: str, n: int, confirms: bool, window: int = 512) -> Result:
    queue = fresh_queue(url, f"bench.publish.{qt}", qt)
    sent: list[float] = []
    settled: dict[int, float] = {}

    async def main() -> tuple[list[Delivery], Clock]:
        async with AsyncPublisher(url, confirms=confirms, window=window) as pub:
            await pub.publish(b"warm-up", routing_key=queue)
            pub.tracker.on_settle = latency_hook(settled, pub.tracker.on_settle)
            with Clock() as clock:
                out = await pub.publish_many(timed_bodies(n, sent), routing_key=queue)
                if not confirms:
                    await asyncio.to_thread(wait_for_count, url, queue, qt, n + 1)
            return out, clock

    out, clock = asyncio.run(main())
    assert all(d.ok for d in out)
    name = "rabbitry AsyncPublisher" + ("" if confirms else ", confirms off")
    return Result(name, n, clock.wall, qt, clock.cpu, latencies(out, sent, settled)).finish()


def pika_naive(url: str, qt: str, n: int) -> Result:
    queue = fresh_queue(url, f"bench.publish.{qt}", qt)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    lat: list[float] = []
    clock_fn = time.perf_counter
    with Clock() as clock:
        for _ in range(n):
            t = clock_fn()
            channel.basic_publish("", queue, BODY, props)
            lat.append((clock_fn() - t) * 1000)
    connection.close()
    return Result(
        "pika BlockingConnection, confirm each", n, clock.wall, qt, clock.cpu, lat
    ).finish()


def aio_pika_windows(url: str, qt: str, n: int, window: int = 256) -> Result:
    queue = fresh_queue(url, f"bench.publish.{qt}", qt)
    lat: list[float] = []

    async def main() -> Clock:
        connection = await aio_pika.connect(url)
        channel = await connection.channel(publisher_confirms=True)
        exchange = channel.default_exchange
        with Clock() as clock:
            for start in range(0, n, window):
                t = time.perf_counter()
                count = min(window, n - start)
                await asyncio.gather(
                    *(
                        exchange.publish(
                            aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                            routing_key=queue,
                        )
                        for _ in range(count)
                    )
                )
                lat.extend([(time.perf_counter() - t) * 1000] * count)
        await connection.close()
        return clock

    clock = asyncio.run(main())
    name = f"aio-pika, gathered windows of {window}"
    return Result(name, n, clock.wall, qt, clock.cpu, lat).finish()


AMQPLIB = "Node amqplib confirm channel, window 512"
AMQPLIB_OFF = "Node amqplib, confirms off"


def amqplib(url: str, qt: str, n: int, script: Path, confirms: bool = True) -> Result:
    queue = fresh_queue(url, f"bench.publish.{qt}", qt)
    data = run_node(script, url, queue, str(n), "512" if confirms else "0", str(SIZE))
    return Result(
        AMQPLIB if confirms else AMQPLIB_OFF,
        n,
        data["seconds"],
        qt,
        data["cpu"],
        p50=data.get("p50"),
        p99=data.get("p99"),
    )


# -- report ------------------------------------------------------------------------------------


def median_result(results: list[Result]) -> Result:
    by_rate = sorted(results, key=lambda r: r.rate)
    return by_rate[len(by_rate) // 2]


def table(results: dict[tuple[str, str], Result]) -> str:
    names = list(dict.fromkeys(name for name, _ in results))
    lines = [
        "| contender | queue | msg/s | CPU s / 100k | confirm p50 ms | confirm p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for qt in QUEUE_TYPES:
        for name in names:
            r = results.get((name, qt))
            if r is None:
                continue
            p50 = f"{r.p50:.1f}" if r.p50 is not None else "-"
            p99 = f"{r.p99:.1f}" if r.p99 is not None else "-"
            lines.append(
                f"| {name} | {qt} | {r.rate:,.0f} | {r.cpu_per_100k:.2f} | {p50} | {p99} |"
            )
    return "\n".join(lines)


def ratios(results: dict[tuple[str, str], Result]) -> str:
    lines = [
        "| ratio | classic | quorum | target |",
        "|---|---|---|---|",
    ]
    checks = [
        (
            "AsyncPublisher / amqplib",
            "rabbitry AsyncPublisher",
            AMQPLIB,
            1.0,
        ),
        (
            "Publisher / amqplib",
            "rabbitry Publisher",
            AMQPLIB,
            None,
        ),
        (
            "AsyncPublisher / aio-pika windows",
            "rabbitry AsyncPublisher",
            "aio-pika, gathered windows of 256",
            None,
        ),
        (
            "Publisher / naive pika",
            "rabbitry Publisher",
            "pika BlockingConnection, confirm each",
            5.0,
        ),
        (
            "Publisher confirmed / unconfirmed",
            "rabbitry Publisher",
            "rabbitry Publisher, confirms off",
            0.8,
        ),
        (
            "AsyncPublisher confirmed / unconfirmed",
            "rabbitry AsyncPublisher",
            "rabbitry AsyncPublisher, confirms off",
            0.8,
        ),
        ("amqplib confirmed / unconfirmed (the broker's share)", AMQPLIB, AMQPLIB_OFF, None),
    ]
    missed = []
    for label, a, b, target in checks:
        cells = []
        for qt in QUEUE_TYPES:
            ra, rb = results.get((a, qt)), results.get((b, qt))
            cells.append(f"{ra.rate / rb.rate:.2f}x" if ra and rb else "-")
            if ra and rb and target and ra.rate / rb.rate < target:
                missed.append(f"{label} on {qt} ({ra.rate / rb.rate:.2f}x)")
        goal = f">= {target:.1f}x" if target else ""
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {goal} |")
    lines += ["", "Targets met." if not missed else "Not met: " + "; ".join(missed) + "."]
    return "\n".join(lines)


def sweep_table(
    sweep: dict[tuple[int, str], Result], results: dict[tuple[str, str], Result]
) -> str:
    """How the confirmed rate answers a larger window: where it stops growing, the broker
    (not the client's pipeline) sets the confirmed rate."""
    if not sweep:
        return ""
    windows = sorted({w for w, _ in sweep})
    lines = [
        "",
        "The AsyncPublisher with larger windows (one run each, after the rounds), and against the",
        "median unconfirmed rate:",
        "",
        "| window | classic msg/s | classic vs unconfirmed | quorum msg/s | quorum vs unconfirmed |",
        "|---|---|---|---|---|",
    ]
    for window in windows:
        cells = []
        for qt in QUEUE_TYPES:
            r = sweep.get((window, qt))
            off = results.get(("rabbitry AsyncPublisher, confirms off", qt))
            cells.append(f"{r.rate:,.0f}" if r else "-")
            cells.append(f"{r.rate / off.rate:.2f}x" if r and off else "-")
        lines.append(f"| {window:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/%2F")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--naive-messages", type=int, default=5_000)
    parser.add_argument("--skip-node", action="store_true")
    parser.add_argument(
        "--sweep-windows",
        default="512,2048,8192,32768",
        help="AsyncPublisher windows to try on each queue type after the rounds ('' skips)",
    )
    args = parser.parse_args()
    url = args.url
    n = args.messages
    script = None if args.skip_node else node_script("publish.js")
    contenders: list[tuple[str, Callable[[str, str], Result]]] = [
        ("rabbitry Publisher", lambda u, qt: rabbitry_sync(u, qt, n, True)),
        ("rabbitry Publisher, confirms off", lambda u, qt: rabbitry_sync(u, qt, n, False)),
        ("rabbitry AsyncPublisher", lambda u, qt: rabbitry_async(u, qt, n, True)),
        ("rabbitry AsyncPublisher, confirms off", lambda u, qt: rabbitry_async(u, qt, n, False)),
        (
            "pika BlockingConnection, confirm each",
            lambda u, qt: pika_naive(u, qt, args.naive_messages),
        ),
        ("aio-pika, gathered windows of 256", lambda u, qt: aio_pika_windows(u, qt, n // 2)),
    ]
    if script is not None:
        contenders.append((AMQPLIB, lambda u, qt: amqplib(u, qt, n, script)))
        contenders.append((AMQPLIB_OFF, lambda u, qt: amqplib(u, qt, n, script, confirms=False)))
    print(
        f"broker {mask_uri(url)}, {n} messages of {SIZE} B, {args.rounds} round(s)", file=sys.stderr
    )
    runs: dict[tuple[str, str], list[Result]] = {}
    for round_no in range(args.rounds):
        order = contenders[round_no % len(contenders) :] + contenders[: round_no % len(contenders)]
        for qt in QUEUE_TYPES:
            for name, run in order:
                result = run(url, qt)
                runs.setdefault((name, qt), []).append(result)
                print(f"  {qt:8} {name:45} {result.rate:10,.0f} msg/s", file=sys.stderr)
    results = {key: median_result(rs) for key, rs in runs.items()}
    windows = [int(w) for w in args.sweep_windows.split(",") if w.strip()]
    sweep: dict[tuple[int, str], Result] = {}
    for qt in QUEUE_TYPES:
        for window in windows:
            result = rabbitry_async(url, qt, n, True, window)
            sweep[window, qt] = result
            print(
                f"  {qt:8} AsyncPublisher window {window:<27} {result.rate:10,.0f} msg/s",
                file=sys.stderr,
            )
    for qt in QUEUE_TYPES:
        fresh_queue(url, f"bench.publish.{qt}", qt)  # leave the broker with empty queues
    day = time.strftime("%Y-%m-%d")
    version = broker_version(url)
    text = f"""## Publishing (bench/publish.py)

```bash
.venv/bin/python bench/publish.py --rounds {args.rounds} --messages {n} --write-docs
```

1 KB persistent messages through the default exchange into one durable classic and one durable
quorum queue (re-created empty for each contender), one client process, same broker, same run;
rounds rotate the order of the contenders and the median round is shown. Confirmed contenders
pipeline a window of unconfirmed messages (rabbitry 512, amqplib 512, aio-pika gathered windows
of 256); the naive pika loop waits for each confirm ({args.naive_messages:,} messages). Unconfirmed runs
are timed until the broker holds every message. CPU is the client process's own (user + system);
latency is from handing a message to the client until its confirm.

{version}, {args.rounds} round(s), {n:,} messages ({day}):

{table(results)}

Ratios (median rounds):

{ratios(results)}
{sweep_table(sweep, results)}
How to read the confirmed / unconfirmed rows: without confirms a publisher is limited by how fast
the broker takes messages in; with them, by how fast a queue makes them safe. A classic queue
confirms a persistent message only after its batched write to disk, and that work runs in the
one process of the queue whatever the number of clients (two connections publishing into the
same queue were no faster here), so every client loses about the same share: compare the
amqplib row. A window larger than 512 buys a classic queue a little (the sweep) but slows a
quorum queue, whose credit flow pushes back past a few hundred messages in flight: 512 stays the
default, and `window=2048` is the setting for classic queues.
"""
    print(text)
    if args.write_docs:
        write_section("## Publishing (bench/publish.py)", text)


if __name__ == "__main__":
    main()
