"""Queue migration time vs the lower bound of consuming and republishing the same messages.

Usage:  python bench/migrate.py [--sizes 50000 200000]
Broker: $RABBITRY_URL / $RABBITRY_MANAGEMENT_URL (e.g. eval "$(rabbitry dev-broker env)").

For each size N, in its own fresh vhost:
- rabbitry: a classic queue holding N 1 KB messages is changed to a quorum queue with a
  dead-letter exchange; `apply --allow-replace` migrates it (plan included). Timed end to end.
- lower bound: N messages in a classic queue are consumed (pika, prefetch 2,000) and republished
  into a quorum queue with the rabbitry Publisher (confirmed, batches of 1,000, the source acked
  with one multiple-ack per confirmed batch): one pass, the least a client-side copy needs.
The migration moves every message twice (out to a temporary queue and back under the original
name); it keeps up because the shovel moves them inside the broker.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pika

from rabbitry.management.client import ManagementClient, q
from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.provisioner.applier import ApplyOptions, apply_plan
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.queue_counter import AmqpQueueCounter
from rabbitry.provisioner.state import read_state
from rabbitry.publisher import Publisher
from rabbitry.topology import load_topology

SPEC = """
version: 1
name: {vhost}
vhosts:
  - name: {vhost}
    exchanges: [{{name: dead, type: fanout}}]
    queues:
      - {{name: work, {work}}}
      - {{name: copy, type: quorum}}
      - {{name: source, type: classic}}
"""
CLASSIC = "type: classic"
QUORUM = "type: quorum, arguments: {x-dead-letter-exchange: dead}"
BODY = b"x" * 1024


def apply(client: ManagementClient, spec: Path, counter: AmqpQueueCounter) -> None:
    topology = load_topology(spec)
    vhost = topology.vhosts[0].name
    the_plan = plan(topology, read_state(client, topology.name, [vhost]))
    apply_plan(client, the_plan, ApplyOptions(allow_replace=True), counter)


def fill(url: str, queue: str, count: int) -> None:
    with Publisher(url) as publisher:
        results = publisher.publish_many(
            (BODY for _ in range(count)), exchange="", routing_key=queue
        )
    assert all(r.ok for r in results)


def copy_by_client(url: str, source: str, target: str, count: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2000)
    moved = 0
    with Publisher(url) as publisher:
        batch: list[bytes] = []
        last_tag = 0
        for method, _props, body in channel.consume(source, inactivity_timeout=1.0):
            if method is not None:
                batch.append(body)
                last_tag = method.delivery_tag
            if batch and (len(batch) >= 1000 or method is None or moved + len(batch) >= count):
                results = publisher.publish_many(batch, exchange="", routing_key=target)
                assert all(r.ok for r in results)
                channel.basic_ack(last_tag, multiple=True)  # confirmed first, then acked
                moved += len(batch)
                batch = []
            if moved >= count or (method is None and not batch):
                break
    channel.cancel()
    connection.close()
    assert moved == count, f"moved {moved} of {count}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000])
    args = parser.parse_args()
    endpoints = resolve_endpoints()
    client = ManagementClient(endpoints.management_url, timeout=300)
    counter = AmqpQueueCounter(endpoints)
    version = client.overview().get("rabbitmq_version")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            vhost = f"bench-migrate-{uuid.uuid4().hex[:6]}"
            url = endpoints.amqp_url_for(vhost)
            before, after = Path(tmp) / f"{vhost}-1.yaml", Path(tmp) / f"{vhost}-2.yaml"
            before.write_text(SPEC.format(vhost=vhost, work=CLASSIC))
            after.write_text(SPEC.format(vhost=vhost, work=QUORUM))
            try:
                apply(client, before, counter)
                fill(url, "work", size)
                fill(url, "source", size)
                time.sleep(1)
                start = time.perf_counter()
                apply(client, after, counter)
                migrate_s = time.perf_counter() - start
                assert counter(vhost, "work")[0] == size, "every message is back in the queue"
                start = time.perf_counter()
                copy_by_client(url, "source", "copy", size)
                copy_s = time.perf_counter() - start
                assert counter(vhost, "copy")[0] == size
            finally:
                client.delete(f"/vhosts/{q(vhost)}")
                client.delete(f"/global-parameters/{q('rabbitry.stack.' + vhost)}")
            rows.append((size, migrate_s, copy_s))

    print(f"RabbitMQ {version}; 1 KB persistent messages; classic -> quorum\n")
    print("| messages | rabbitry migration | consume + republish (lower bound) | ratio | target |")
    print("|---|---|---|---|---|")
    for size, migrate_s, copy_s in rows:
        print(
            f"| {size:,} | {migrate_s:.1f} s ({size / migrate_s:,.0f} msg/s) | {copy_s:.1f} s"
            f" ({size / copy_s:,.0f} msg/s) | {migrate_s / copy_s:.2f}x | <= 1.5x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
