"""Delay accuracy under load: lateness of 10,000 messages with random delays through binary levels.

Usage:  python bench/delay.py [--messages 10000] [--max-delay 60] [--queue-type quorum]
Broker: $RABBITRY_URL / $RABBITRY_MANAGEMENT_URL (e.g. eval "$(rabbitry dev-broker env)").

The spec (binary levels, 1 s unit, 6 levels for 1..60 s, one target queue) is applied by
rabbitry into a fresh vhost. Messages get random delays of 1..max seconds and are published in
random order with publisher confirms; a consumer on its own connection records each arrival.
Lateness = arrival - (publish time + delay rounded up to the unit). Reported: lateness p50, p99,
max; early and lost messages (both must be 0); delayed-message throughput (messages delivered
per second while deliveries were due).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pika
from results import percentile

from rabbitry.management.client import ManagementClient, q
from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.provisioner.applier import ApplyOptions, apply_plan
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import read_state
from rabbitry.topology import load_spec, load_topology
from rabbitry.topology.patterns.delays import delay_scheme

SPEC = """
version: 1
name: {vhost}
vhosts:
  - name: {vhost}
    queues: [{{name: due, type: {qtype}}}]
    delays:
      - {{name: delay, unit: 1s, max: {max}s, queue_type: {qtype}, targets: [{{queue: due}}]}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--max-delay", type=int, default=60)
    parser.add_argument("--queue-type", choices=["quorum", "classic"], default="quorum")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    endpoints = resolve_endpoints()
    client = ManagementClient(endpoints.management_url, timeout=120)
    vhost = f"bench-delay-{uuid.uuid4().hex[:6]}"

    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "delay.yaml"
        spec_path.write_text(SPEC.format(vhost=vhost, qtype=args.queue_type, max=args.max_delay))
        topology = load_topology(spec_path)
        scheme = delay_scheme(load_spec(spec_path).vhosts[0].delays[0])
    apply_plan(client, plan(topology, read_state(client, vhost, [vhost])), ApplyOptions())

    url = endpoints.amqp_url_for(vhost)
    rng = random.Random(args.seed)
    delays = [rng.uniform(1, args.max_delay) for _ in range(args.messages)]
    due: list[float] = [0.0] * args.messages
    arrived: dict[int, float] = {}
    done = threading.Event()

    def consume() -> None:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=300)
        pending = 0
        for method, _props, body in channel.consume("due", inactivity_timeout=0.05):
            if method is not None:
                arrived.setdefault(int(body), time.monotonic())
                pending += 1
                if pending >= 100:
                    channel.basic_ack(method.delivery_tag, multiple=True)
                    pending = 0
            elif pending:
                channel.basic_ack(multiple=True)
                pending = 0
            if done.is_set():
                break
        connection.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    publish_start = time.monotonic()
    for index in rng.sample(range(args.messages), args.messages):
        route = scheme.route(delays[index], "due")
        sent = time.monotonic()
        channel.basic_publish(
            route.exchange,
            route.routing_key,
            str(index).encode(),
            pika.BasicProperties(delivery_mode=2),
            mandatory=True,
        )
        due[index] = sent + route.delay_ms / 1000
    publish_seconds = time.monotonic() - publish_start
    connection.close()

    deadline = max(due) + 30
    while len(arrived) < args.messages and time.monotonic() < deadline:
        time.sleep(0.2)
    done.set()
    consumer.join(timeout=5)
    client.delete(f"/vhosts/{q(vhost)}")
    client.delete(f"/global-parameters/{q('rabbitry.stack.' + vhost)}")

    lateness_ms = [(arrived[i] - due[i]) * 1000 for i in arrived]
    early = sum(1 for x in lateness_ms if x < 0)
    lost = args.messages - len(arrived)
    first_due, last_arrival = min(due), max(arrived.values(), default=0.0)
    throughput = len(arrived) / max(1e-9, last_arrival - first_due)
    version = client.overview().get("rabbitmq_version")
    print(
        f"RabbitMQ {version}; {args.messages} messages, delays 1..{args.max_delay} s,"
        f" {scheme.levels} {args.queue_type} levels of 1 s; published in"
        f" {publish_seconds:.1f} s ({args.messages / publish_seconds:,.0f} msg/s, confirmed)\n"
    )
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| lateness p50 | {statistics.median(lateness_ms):.1f} ms | |")
    print(f"| lateness p99 | {percentile(lateness_ms, 99):.1f} ms | <= 100 ms |")
    print(f"| lateness max | {max(lateness_ms):.1f} ms | <= 250 ms |")
    print(f"| early | {early} | 0 |")
    print(f"| lost | {lost} | 0 |")
    print(f"| delayed-message throughput | {throughput:,.0f} msg/s | |")
    ok = percentile(lateness_ms, 99) <= 100 and max(lateness_ms) <= 250 and early == 0 and lost == 0
    print(f"\ntargets: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
