"""The publisher's window: confirmed throughput against the time each message waits.

Usage:  python bench/window.py [--messages 50000] [--windows 16,32,64,128,256,512,default]
        [--rounds 3] [--write-docs]
Broker: --url, else $RABBITMQ_URL, else a dev broker (`rabbitry dev-broker up`).

One blocking `Publisher.stream` per window (`default`: the publisher's adaptive window, no
`window=`) and queue type sends N persistent 1 KB messages to
a durable queue (re-created empty for each round), as fast as the window allows; each row is
the median round by rate. Reported: confirmed msg/s, and the time from handing each message to
the client until its confirm, p50 and p99. Past the window that keeps the broker busy, more
unconfirmed messages add little speed: they wait in the broker's queue, and that wait is added
to every message, delayed ones included (a delayed message's lateness starts with it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pika
from results import (
    arguments,
    broker_version,
    fresh_queue,
    load_average,
    percentile,
    write_bench_section,
)

from rabbitry.amqp.message import Message
from rabbitry.publisher import Publisher
from rabbitry.uri import mask_uri

HEADING = "## Publisher window: throughput or wait (bench/window.py)"


def one(url: str, queue: str, window: int | None, count: int) -> tuple[float, float, float]:
    """(msg/s, p50 ms, p99 ms) of ``count`` messages through ``window``."""
    body = b"x" * 1024
    handed: list[float] = []

    def messages() -> Iterator[Message]:
        for _ in range(count):
            handed.append(time.perf_counter())  # read by the window: the hand-over time
            yield Message(body, persistent=True)

    waits: list[float] = []
    with Publisher(url) as publisher:
        started = time.perf_counter()
        for index, delivery in enumerate(
            publisher.stream(messages(), routing_key=queue, window=window)
        ):
            if not delivery.ok:
                raise SystemExit(f"message {index} not confirmed: {delivery.error}")
            waits.append(time.perf_counter() - handed[index])
        seconds = time.perf_counter() - started
    return count / seconds, percentile(waits, 50) * 1000, percentile(waits, 99) * 1000


def drop(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_delete(queue)
    connection.close()


def main() -> int:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/%2F")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--windows", default="16,32,64,128,256,512,default")
    parser.add_argument("--queue-types", default="quorum,classic")
    args = parser.parse_args()
    windows = [None if w == "default" else int(w) for w in args.windows.split(",")]
    version = broker_version(args.url)
    print(f"{version} at {mask_uri(args.url)}", flush=True)
    rows = ["| queue | window | msg/s | wait p50 ms | wait p99 ms |", "|---|---|---|---|---|"]
    for queue_type in args.queue_types.split(","):
        for window in windows:
            rounds = []
            for _ in range(args.rounds):
                queue = fresh_queue(args.url, f"bench-window-{queue_type}", queue_type)
                rounds.append(one(args.url, queue, window, args.messages))
            rate, p50, p99 = sorted(rounds)[len(rounds) // 2]
            shown = "default (adaptive)" if window is None else window
            row = f"| {queue_type} | {shown} | {rate:,.0f} | {p50:.1f} | {p99:.1f} |"
            rows.append(row)
            print(row, flush=True)
        drop(args.url, f"bench-window-{queue_type}")
    header = (
        f"{version}; {args.messages:,} persistent 1 KB messages per round, median of"
        f" {args.rounds};"
        f" {time.strftime('%Y-%m-%d')}; load {load_average()}."
    )
    print(header)
    if args.write_docs:
        command = (
            f".venv/bin/python bench/window.py --messages {args.messages}"
            f" --windows {args.windows} --rounds {args.rounds} --write-docs"
        )
        write_bench_section(HEADING, command, __doc__, header, "", *rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
