"""A burst of delayed jobs through the publisher alone: how the adaptive window's limit for
delayed messages changes their lateness, without a worker or a peer in the way.

Usage:  python bench/delay_burst.py [--jobs 3000] [--max-delay 15] [--rounds 3]
        [--limits 512,32,16] [--lanes 1,2,4] [--queue-type quorum]
Broker: $RABBITRY_URL / $RABBITRY_MANAGEMENT_URL (e.g. eval "$(rabbitry dev-broker env)").

Each round applies the spec of bench/peers.py (a queue ``jobs`` and a binary delay of 1 s
levels reaching ``--max-delay``) into a fresh vhost, consumes ``jobs`` with a plain channel
(rabbitry's ``amqp.channel``, multiple acks), and publishes the jobs of bench/peer_jobs/ledger.py
(delays 1..D s, the same schedule as the peers') with one ``Publisher.stream`` at its defaults,
the adaptive window's limit for delayed messages set to each of ``--limits`` in turn (512: no
limit, the rule before it), and its levels laid out with each of ``--lanes`` (queues side by
side per level, the spec's ``lanes``). Rounds alternate the settings (every limit with every lane
count, in turn). Reported per round: the time the
publishing took, the lateness p50/p99/max (arrival - hand-off - delay), each job's time from
hand-off until the stream yields it settled (its confirm, and those of the jobs before it;
p50/p99), the lateness p50 by the number of levels a job passed, and
the largest window the publisher reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from results import percentile

from rabbitry.amqp.channel import Channel
from rabbitry.amqp.message import Message
from rabbitry.management.client import ManagementClient, q
from rabbitry.management.endpoints import resolve_endpoints
from rabbitry.publisher import Publisher

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peer_jobs"))
from ledger import jobs as schedule  # noqa: E402 - the peers' schedule

RABBITRY = str(Path(sys.executable).parent / "rabbitry")
SPEC = """\
version: 1
name: {vhost}
vhosts:
  - name: {vhost}
    queues: [{{name: jobs, type: {qt}}}]
    delays:
      - {{name: delay, unit: 1s, max: {max_delay}s, lanes: {lanes}, queue_type: {qt}, targets: [{{queue: jobs}}]}}
"""


def one_round(
    client: ManagementClient,
    url_for: Callable[[str], str],
    args: argparse.Namespace,
    limit: int,
    lanes: int,
    tmp: Path,
) -> str:
    vhost = f"bench-delay-burst-{limit}-{lanes}"
    client.delete(f"/vhosts/{q(vhost)}")
    spec = tmp / f"{vhost}.yaml"
    text = SPEC.format(vhost=vhost, qt=args.queue_type, max_delay=args.max_delay, lanes=lanes)
    spec.write_text(text)
    done = subprocess.run(
        [RABBITRY, "apply", str(spec), "--auto-approve"], capture_output=True, text=True
    )
    if done.returncode not in (0, 2):
        raise RuntimeError(f"rabbitry apply failed:\n{done.stdout}{done.stderr}")
    url = url_for(vhost)
    arrived: dict[int, float] = {}
    stop, ready = threading.Event(), threading.Event()

    def consume() -> None:
        with Channel(url) as channel:
            channel.qos(1000)
            channel.consume("jobs")
            ready.set()
            while not stop.is_set():
                delivered, last = channel.next_delivery(0.05), 0
                while delivered is not None:
                    arrived[json.loads(delivered.body)["id"]] = time.time()
                    last = delivered.delivery_tag
                    delivered = channel.next_delivery(0)
                if last:
                    channel.ack(last, multiple=True)
                    channel.flush()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    ready.wait(30)
    jobs = schedule(0, args.jobs, args.max_delay)
    handed: dict[int, float] = {}
    confirmed: dict[int, float] = {}
    widest = 0

    def messages() -> Iterator[Message]:
        nonlocal widest
        for job, delay in jobs:
            widest = max(widest, pub.window)
            handed[job] = time.time()
            yield Message(json.dumps({"id": job}).encode(), delay=delay)

    started = time.monotonic()
    with Publisher.from_spec(str(spec), vhost=vhost, url=url) as pub:
        assert pub.adaptive is not None
        pub.adaptive.rule = dataclasses.replace(pub.adaptive.rule, delayed=limit)
        for (job, _), delivery in zip(
            jobs, pub.stream(messages(), routing_key="jobs"), strict=True
        ):
            if not delivery.ok:
                raise RuntimeError(f"job {job} not stored: {delivery.error}")
            confirmed[job] = time.time()
    took = time.monotonic() - started
    deadline = time.time() + args.max_delay + 30
    while len(arrived) < args.jobs and time.time() < deadline:
        time.sleep(0.1)
    stop.set()
    consumer.join(5)
    client.delete(f"/vhosts/{q(vhost)}")
    client.delete(f"/global-parameters/{q('rabbitry.stack.' + vhost)}")
    delays = dict(jobs)
    late = {j: (arrived[j] - handed[j] - delays[j]) * 1000 for j in arrived}
    wait = [(confirmed[j] - handed[j]) * 1000 for j in confirmed]
    by_levels: dict[int, list[float]] = {}
    for job, ms in late.items():
        by_levels.setdefault(bin(delays[job]).count("1"), []).append(ms)
    values = list(late.values())
    return (
        f"| {limit} | {lanes} | {os.getloadavg()[0]:.1f} | {took:.2f} | {statistics.median(values):.1f} |"
        f" {percentile(values, 99):.1f} | {max(values):.1f} | {statistics.median(wait):.1f} |"
        f" {percentile(wait, 99):.1f} | "
        + " / ".join(f"{statistics.median(v):.0f}" for _, v in sorted(by_levels.items()))
        + f" | {widest} | {args.jobs - len(arrived)} | {sum(1 for v in values if v < 0)} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--max-delay", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limits", default="512,32,16")
    parser.add_argument("--lanes", default="1", help="lane counts, comma-separated")
    parser.add_argument("--queue-type", choices=["quorum", "classic"], default="quorum")
    args = parser.parse_args()
    endpoints = resolve_endpoints()
    client = ManagementClient(endpoints.management_url, timeout=120)
    print(
        "| limit | lanes | load | publish s | lateness p50 ms | p99 ms | max ms | confirm p50 ms | p99 ms"
        " | p50 ms by levels passed (1 / 2 / ...) | widest window | lost | early |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="delay-burst-") as tmp:
        for _ in range(args.rounds):
            for limit in (int(x) for x in args.limits.split(",")):
                for lanes in (int(x) for x in args.lanes.split(",")):
                    row = one_round(client, endpoints.amqp_url_for, args, limit, lanes, Path(tmp))
                    print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
