"""Reading management API answers streamed and capped (``provisioner.answer_limit``) against
reading them whole, at 50,000 objects, in one run.

Usage:  python bench/answer_limit.py --before TREE [--after TREE] [--objects 50000] [--plans 3]
        python bench/answer_limit.py --local [--objects 50000]

Each TREE is a checkout of rabbitry (``git archive COMMIT | tar -x -C TREE``): ``--before`` from
before the cap, ``--after`` with it (default: the tree this script lives in). Each side is a
whole CLI process, run with its tree first on ``PYTHONPATH``. Each side applies bench/scale.py's
spec into an empty vhost of a fresh broker of its own (bench/scale.py's containers, one at a
time); on the second broker, after ``SETTLE`` seconds, the sides plan in turn, ``--plans`` times
each. Printed too: the sizes of the largest answers at this size (``GET /api/definitions`` of
the broker and of the vhost, and the plan's largest listings), which the default limit must
hold with room.

``--local`` needs no broker: a server process on 127.0.0.1 answers a gzip JSON list of
``--objects`` queues as RabbitMQ would, and one management client reads it whole (as before the
cap: ``httpx.Client.request``) and another capped, in turn, 20 times each; the figure is the CPU
time of the reading thread (JSON parsed included), which a loaded machine disturbs far less than
the wall clock.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from results import load_average
from scale import cli_env, fresh_broker, run, spec_text

from rabbitry.management.client import ManagementClient, q
from rabbitry.testing.broker import BrokerUnavailable
from rabbitry.testing.containers import BrokerContainer

HERE = Path(__file__).resolve().parent
SETTLE = 30


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path, default=HERE.parent)
    parser.add_argument("--objects", type=int, default=50000)
    parser.add_argument("--plans", type=int, default=3)
    parser.add_argument("--local", action="store_true", help="only the client's own cost")
    parser.add_argument(
        "--plans-only", action="store_true", help="one apply (the tree before), then the plans"
    )
    args = parser.parse_args()
    if args.local:
        return local(args.objects)
    if args.before is None:
        parser.error("--before TREE is needed (or --local)")
    trees = {"before": str(args.before.resolve()), "after": str(args.after.resolve())}
    print(f"load at start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        name = f"cap-{uuid.uuid4().hex[:6]}"
        spec = Path(tmp) / f"{name}.yaml"
        spec.write_text(spec_text(name, name, args.objects))
        applies: dict[str, float] = {}
        sides = ("before",) if args.plans_only else ("after", "before")
        for side in sides:  # each into an empty vhost of a fresh broker
            with started_broker() as broker:
                env = cli_env(broker.broker)
                with ManagementClient(env["RABBITRY_MANAGEMENT_URL"], timeout=3600) as client:
                    client.put(f"/vhosts/{q(name)}", {})
                side_env = {**env, "PYTHONPATH": trees[side]}
                applies[side] = run("apply", str(spec), "--auto-approve", env=side_env)[0]
                print(f"apply ({side}, {trees[side]}): {applies[side]:.1f} s", flush=True)
                if side == "after":
                    continue
                # the last broker stays for the plans, made by both sides in turn
                time.sleep(SETTLE)
                plans: dict[str, list[float]] = {side: [] for side in trees}
                for number in range(args.plans):
                    order = list(trees) if number % 2 == 0 else list(reversed(trees))
                    for planner in order:
                        side_env = {**env, "PYTHONPATH": trees[planner]}
                        seconds, rss, out = run(
                            "plan", str(spec), "--detailed-exitcode", env=side_env
                        )
                        assert "No changes" in out, out[-2000:]
                        plans[planner].append(seconds)
                        print(
                            f"plan ({planner}): {seconds:.2f} s, peak RSS {rss / 1024:.0f} MiB",
                            flush=True,
                        )
                sizes = answer_sizes(env["RABBITRY_MANAGEMENT_URL"], name)
    print(f"load at end: {load_average()}", flush=True)
    for label, size in sizes.items():
        print(f"answer {label}: {size:,} bytes ({size / 1e6:.1f} MB)")
    median = {side: statistics.median(times) for side, times in plans.items()}
    if "after" in applies:
        print(
            f"apply: before {applies['before']:.1f} s, after {applies['after']:.1f} s,"
            f" after/before {applies['after'] / applies['before']:.3f}"
        )
    fastest = {side: min(times) for side, times in plans.items()}
    print(
        f"plan (fastest of {args.plans}): before {fastest['before']:.2f} s,"
        f" after {fastest['after']:.2f} s, after/before {fastest['after'] / fastest['before']:.3f}"
    )
    print(
        f"plan (median of {args.plans}): before {median['before']:.2f} s,"
        f" after {median['after']:.2f} s, after/before {median['after'] / median['before']:.3f}"
    )
    print(f"plan runs: {plans}")
    return 0


def started_broker(attempts: int = 3) -> BrokerContainer:
    """bench/scale.py's fresh broker; on a loaded machine the container engine may not answer
    its first call in time, so it is asked again."""
    for _ in range(attempts - 1):
        try:
            return fresh_broker()
        except BrokerUnavailable as exc:
            print(f"no broker yet ({exc}): asking again", flush=True)
            time.sleep(10)
    return fresh_broker()


def answer_sizes(management_url: str, vhost: str) -> dict[str, int]:
    """Bytes of the largest answers at this size, decoded."""
    url = httpx.URL(management_url)
    base = str(url.copy_with(username=None, password=None)).rstrip("/")
    v = quote(vhost, safe="")
    lean = "name,durable,auto_delete,exclusive,arguments,type"
    paths = {
        "GET /api/definitions (whole broker)": ("/api/definitions", {}),
        "GET /api/definitions/VHOST": (f"/api/definitions/{v}", {}),
        "GET /api/bindings/VHOST": (f"/api/bindings/{v}", {}),
        "GET /api/queues/VHOST (plan's columns)": (
            f"/api/queues/{v}",
            {"disable_stats": "true", "columns": lean},
        ),
    }
    sizes = {}
    with httpx.Client(timeout=600, auth=(url.username, url.password)) as client:
        for label, (path, params) in paths.items():
            answer = client.get(base + path, params=params)
            answer.raise_for_status()
            sizes[label] = len(answer.content)
    return sizes


class _Whole(ManagementClient):
    """The client as it read before the cap: the body read whole by httpx."""

    def _exchange(self, method: str, path: str, url: Any, *rest: Any) -> httpx.Response:
        body, params, timeout = rest
        return self._client.request(method, url, json=body, params=params, timeout=timeout)


def local(objects: int) -> int:
    queue = {"vhost": "scale", "durable": True, "auto_delete": False, "type": "quorum"}
    body = json.dumps(
        [{"name": f"q.{i}", **queue, "arguments": {"x-message-ttl": 60000}} for i in range(objects)]
    ).encode()
    packed = gzip.compress(body, 6)

    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(packed)))
            self.end_headers()
            self.wfile.write(packed)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    multiprocessing.Process(target=server.serve_forever, daemon=True).start()
    url = f"http://guest:guest@127.0.0.1:{server.server_address[1]}"
    clients = {"before": _Whole(url), "after": ManagementClient(url)}
    cpu: dict[str, list[float]] = {side: [] for side in clients}
    print(f"load at start: {load_average()}", flush=True)
    for number in range(20):
        for side in clients if number % 2 == 0 else reversed(clients):
            started = time.thread_time()
            assert len(clients[side].get("/queues")) == objects
            cpu[side].append(time.thread_time() - started)
    print(f"load at end: {load_average()}")
    median = {side: statistics.median(times) for side, times in cpu.items()}
    print(
        f"one answer of {len(body) / 1e6:.1f} MB ({len(packed) / 1e6:.2f} MB gzip), CPU of the"
        f" reading thread, median of 20: before {median['before'] * 1000:.1f} ms,"
        f" after {median['after'] * 1000:.1f} ms,"
        f" after/before {median['after'] / median['before']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
