"""Sharding throughput: publish + consume through 1, 2 and 4 consistent-hash shards vs one queue.

Usage:  python bench/sharding.py [--messages 20000] [--rounds 3] [--queue-type quorum]
                                 [--publishers 2] [--url AMQP_URL]
Broker: --url, else $RABBITRY_URL, else a fresh container broker (rabbitry.testing.start_broker).

Each contender gets its own vhost on the same broker, declared from a rabbitry spec (a plain
queue, or `sharded_exchanges` with N shards). Publishers (separate processes, random 16-hex keys,
1 KB persistent messages, no publisher confirms: pika's are one round trip per message
and would hide the queues) and one consumer process per queue
(prefetch 300, multiple-ack every 100) run at the same time; the figure is messages divided by
the wall time from the first publish to the last ack. Rounds alternate the contenders; the
median is reported. Everything (broker included) shares the machine's cores, so read ratios.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pika

from rabbitry.topology import expand, load_spec_text
from rabbitry.topology.primitives import Vhost

BODY = b"x" * 1024


def spec_text(vhost: str, shards: int, queue_type: str) -> str:
    if shards == 0:
        body = f"queues: [{{name: single, type: {queue_type}}}]"
    else:
        body = (
            f"sharded_exchanges: [{{name: work, shards: {shards}, queue: {{type: {queue_type}}}}}]"
        )
    return f"version: 1\nvhosts:\n  - name: {vhost}\n    {body}\n"


def declare(amqp_url: str, topology: Vhost) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    for exchange in topology.exchanges:
        channel.exchange_declare(
            exchange.name, exchange.type.value, durable=True, arguments=exchange.arguments
        )
    for queue in topology.queues:
        channel.queue_declare(queue.name, durable=True, arguments=queue.wire_arguments())
    for binding in topology.bindings:
        channel.queue_bind(binding.destination, binding.source, binding.routing_key)
    connection.close()


def publisher(amqp_url: str, exchange: str, routing_key: str | None, count: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    properties = pika.BasicProperties(delivery_mode=2)
    for _ in range(count):
        key = routing_key if routing_key is not None else secrets.token_hex(8)
        channel.basic_publish(exchange, key, BODY, properties)
    connection.close()


def consumer(amqp_url: str, queue: str, total: Any, expected: int, done: Any) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=300)
    state = {"unacked": 0, "last": 0}

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        state["unacked"] += 1
        state["last"] = method.delivery_tag
        with total.get_lock():
            total.value += 1
        if state["unacked"] >= 100:
            ch.basic_ack(method.delivery_tag, multiple=True)
            state["unacked"] = 0

    channel.basic_consume(queue, on_message)
    while True:
        stop = done.is_set()
        connection.process_data_events(time_limit=0.05)
        if state["unacked"]:
            channel.basic_ack(state["last"], multiple=True)
            state["unacked"] = 0
        if stop:
            break
    connection.close()


def run_once(amqp_url: str, topology: Vhost, shards: int, messages: int, publishers: int) -> float:
    queues = [q.name for q in topology.queues]
    exchange, routing_key = ("work", None) if shards else ("", "single")
    total = mp.Value("l", 0)
    done = mp.Event()
    consumers = [
        mp.Process(target=consumer, args=(amqp_url, q, total, messages, done)) for q in queues
    ]
    for process in consumers:
        process.start()
    time.sleep(1.0)  # consumers attached before the clock starts
    share = messages // publishers
    senders = [
        mp.Process(target=publisher, args=(amqp_url, exchange, routing_key, share))
        for _ in range(publishers)
    ]
    started = time.perf_counter()
    for process in senders:
        process.start()
    last, last_change = -1, time.monotonic()
    while total.value < share * publishers:
        if total.value != last:
            last, last_change = total.value, time.monotonic()
        elif time.monotonic() - last_change > 30:
            done.set()
            raise RuntimeError(
                f"stalled at {last} of {share * publishers} messages"
                f" (publisher exit codes {[p.exitcode for p in senders]})"
            )
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    done.set()
    for process in (*senders, *consumers):
        process.join(timeout=30)
    return share * publishers / elapsed


@contextmanager
def broker_url(url: str | None) -> Iterator[tuple[str, str]]:
    """(amqp url without vhost, management base url with credentials)."""
    url = url or os.environ.get("RABBITRY_URL")
    if url:
        parts = urlsplit(url)
        mgmt = f"http://{parts.username}:{parts.password}@{parts.hostname}:15672"
        yield urlunsplit((parts.scheme, parts.netloc, "/", "", "")), mgmt
        return
    from rabbitry.testing import start_broker

    with start_broker() as node:
        b = node.broker
        yield b.amqp_url(), f"http://{b.username}:{b.password}@{b.host}:{b.management_port}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--queue-type", default="quorum", choices=["quorum", "classic"])
    parser.add_argument("--url")
    args = parser.parse_args()
    contenders = {"one queue": 0, "1 shard": 1, "2 shards": 2, "4 shards": 4}
    results: dict[str, list[float]] = {name: [] for name in contenders}
    with broker_url(args.url) as (amqp, mgmt):
        parts = urlsplit(mgmt)
        http = httpx.Client(
            base_url=f"http://{parts.hostname}:{parts.port}/api",
            auth=(parts.username or "guest", parts.password or "guest"),
        )
        urls: dict[str, str] = {}
        vhosts: dict[str, Vhost] = {}
        for name, shards in contenders.items():
            vhost = f"bench-sharding-{shards}-{secrets.token_hex(3)}"
            http.put(f"/vhosts/{quote(vhost, safe='')}").raise_for_status()
            http.put(
                f"/permissions/{quote(vhost, safe='')}/{parts.username or 'guest'}",
                json={"configure": ".*", "write": ".*", "read": ".*"},
            ).raise_for_status()
            topology = expand(load_spec_text(spec_text(vhost, shards, args.queue_type))).vhosts[0]
            base = urlsplit(amqp)
            urls[name] = urlunsplit((base.scheme, base.netloc, "/" + quote(vhost, safe=""), "", ""))
            declare(urls[name], topology)
            vhosts[name] = topology
        try:
            for round_index in range(args.rounds):
                order = list(contenders)
                if round_index % 2:
                    order.reverse()
                for name in order:
                    rate = run_once(
                        urls[name], vhosts[name], contenders[name], args.messages, args.publishers
                    )
                    results[name].append(rate)
                    print(
                        f"round {round_index + 1}: {name:<10} {rate:>9,.0f} msg/s", file=sys.stderr
                    )
        finally:
            for topology in vhosts.values():
                http.delete(f"/vhosts/{quote(topology.name, safe='')}")
    baseline = statistics.median(results["one queue"])
    print(
        f"\n{args.messages:,} x 1 KB persistent messages, {args.queue_type} queues,"
        f" {args.publishers} publisher processes, one consumer process per queue,"
        f" median of {args.rounds} rounds\n"
    )
    print("| contender | msg/s (publish + consume) | vs one queue |")
    print("|---|---|---|")
    for name in contenders:
        rate = statistics.median(results[name])
        print(f"| {name} | {rate:,.0f} | {rate / baseline:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
