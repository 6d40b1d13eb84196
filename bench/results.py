"""What every bench script shares: the broker's version, the machine's load, ratios, and its
section of docs/benchmarks.md.

The scripts run as ``.venv/bin/python bench/<name>.py``, so this folder is on ``sys.path`` and
``from results import ...`` finds this module.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import yaml

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs" / "benchmarks.md"
NODE_DIR = HERE / ".node"


def broker_version(url: str) -> str:
    """``RabbitMQ 4.0.5``: what the broker says of itself when a client connects."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        props = connection._impl.server_properties  # pika keeps them there
        version = props.get("version", b"?")
        return f"RabbitMQ {version.decode() if isinstance(version, bytes) else version}"
    finally:
        connection.close()


def load_average() -> str:
    """The 1, 5 and 15 minute load of this machine, to print beside the figures."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def reference_seconds(rounds: int = 5) -> float:
    """The best of ``rounds`` runs of a fixed pure-Python workload (ten million loop steps of
    integer arithmetic): how fast this machine's cores run the interpreter. Machines of one
    kind differ by more than two times from one session to the next; a figure with no peer in
    its run (a plan's seconds) is comparable across runs only next to this one."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        total = 0
        for step in range(10_000_000):
            total += step
        best = min(best, time.perf_counter() - started)
    return best


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as a table cell (``1.42x``), or ``-`` when either side did not run."""
    return f"{a / b:.2f}x" if a and b else "-"


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank ``pct`` percentile of ``values`` (any order)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))]


def write_section(heading: str, text: str) -> None:
    """Put ``text`` (starting with ``heading``) in docs/benchmarks.md, replacing the section
    of that heading or appending it; the other sections stay as they are."""
    current = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if heading in current:
        before, rest = current.split(heading, 1)
        after = rest.split("\n## ", 1)
        tail = "\n## " + after[1] if len(after) > 1 else ""
        current = before + text.rstrip() + "\n" + tail
    else:
        current = current.rstrip() + "\n\n" + text.rstrip() + "\n"
    DOCS.write_text(current)


def write_bench_section(heading: str, command: str, doc: str | None, *parts: str) -> None:
    """``write_section`` of a bench's usual section: ``heading``, the ``command`` that made it,
    what the bench measures (the third paragraph of its docstring ``doc``) and ``parts``."""
    what = (doc or "").split("\n\n", 2)[2].strip()
    write_section(
        heading, "\n".join([heading, "", "```bash", command, "```", "", what, "", *parts])
    )


def arguments(doc: str | None, default_url: str) -> argparse.ArgumentParser:
    """The options every broker bench takes: --url, --rounds (median of), --write-docs."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("RABBITMQ_URL", default_url))
    parser.add_argument("--rounds", type=int, default=1, help="median of this many rounds")
    parser.add_argument(
        "--write-docs", action="store_true", help="put the table in docs/benchmarks.md"
    )
    return parser


def node_script(name: str) -> Path | None:
    """bench/node/<name> ready to run with amqplib installed beside it (None, with a word on
    stderr, where node or npm is missing: the peer is then left out of the table)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        print("node/npm not found: skipping amqplib", file=sys.stderr)
        return None
    NODE_DIR.mkdir(exist_ok=True)
    shutil.copy(HERE / "node" / "package.json", NODE_DIR / "package.json")
    shutil.copy(HERE / "node" / name, NODE_DIR / name)
    if not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=NODE_DIR, check=True
        )
    return NODE_DIR / name


@dataclass
class Timed:
    """A count of rows (or messages) moved in one timed run, and its rate."""

    name: str
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


@dataclass
class Run(Timed):
    """One contender's timed run of ``rows`` messages on one queue type, and its CPU seconds."""

    queue_type: str
    cpu: float

    @property
    def cpu_per_100k(self) -> float:
        return self.cpu * 100_000 / self.rows


def fresh_queue(url: str, name: str, queue_type: str) -> str:
    """Declare ``name`` anew (deleted first) as a durable queue of ``queue_type``."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_delete(name)
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
    connection.close()
    return name


def run_node(script: Path, *args: str) -> dict[str, Any]:
    """Run a bench/node script; the JSON object its last line prints (seconds, cpu, ...)."""
    done = subprocess.run(["node", str(script), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"amqplib failed: {done.stderr.strip()[-500:]}")
    data: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return data


def one_vhost_spec(stack: str, vhost: str, **objects: list[dict[str, Any]]) -> str:
    """A spec of one stack with one vhost holding ``objects`` (exchanges=[...], queues=[...])."""
    document = {"version": 1, "name": stack, "vhosts": [{"name": vhost, **objects}]}
    return yaml.safe_dump(document, sort_keys=False)
