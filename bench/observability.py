"""What traces and metrics cost: publish and consume throughput of rabbitry before them, and now
without the otel extra, with the API and no SDK, and with the SDK exporting to nowhere.

Usage:  python bench/observability.py [--messages 50000] [--rounds 3] [--baseline REF]
        [--url URL] [--write-docs]
Broker: --url, else $RABBITMQ_URL, else a dev broker (`rabbitry dev-broker up`) at
amqp://guest:guest@localhost:5672/. Every contender is a fresh interpreter on the same broker in
the same run, in rotated order, each round; reported is the median. ``--baseline`` is the
revision before traces and metrics existed (checked out into a temporary git worktree and run
with the same workload). Workloads, 1 KB messages into a durable classic queue: `publish_many`
of N messages (AsyncPublisher, window 512: one PRODUCER span per batch when traced), N/10
single `publish` calls (Publisher: one PRODUCER span each when traced), and draining N messages
with AsyncWorker and a no-op handler (one CONSUMER span per delivery when traced).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results import arguments, broker_version, load_average, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE = "bc23d6d"  # the last revision before metrics and traces

WORKLOAD = r"""
import asyncio, json, os, sys, time
mode, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "no extra":
    sys.modules["opentelemetry"] = None  # as if rabbitry[otel] were not installed
elif mode == "SDK, no-op exporter":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Nowhere(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    trace.set_tracer_provider(provider)

import pika
from rabbitry.consumer import App, AsyncWorker
from rabbitry.publisher import AsyncPublisher, Publisher

BODY = b"x" * 1024
QUEUE = "bench.observability"

def fresh():
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    ch.queue_delete(QUEUE)
    ch.queue_declare(QUEUE, durable=True)
    c.close()

out = {}
fresh()
async def many():
    async with AsyncPublisher(url, window=512) as pub:
        started = time.perf_counter()
        done = await pub.publish_many((BODY for _ in range(n)), routing_key=QUEUE)
        assert all(d.ok for d in done)
        return time.perf_counter() - started
out["publish_many"] = n / asyncio.run(many())

singles = n // 10
with Publisher(url) as pub:
    started = time.perf_counter()
    for _ in range(singles):
        pub.publish(BODY, routing_key=QUEUE)
    out["publish"] = singles / (time.perf_counter() - started)

total = n + singles
app = App()
@app.handler(QUEUE)
async def handle(message):
    pass
worker = AsyncWorker(app, url, prefetch=300)
async def drain():
    task = asyncio.create_task(worker.run())
    started = time.perf_counter()
    while worker.metrics[QUEUE].acked < total and not task.done():
        await asyncio.sleep(0.002)
    took = time.perf_counter() - started
    worker.stop()
    await task
    return took
out["consume"] = total / asyncio.run(drain())
print(json.dumps(out))
"""

MODES = ("baseline", "no extra", "API, no SDK", "SDK, no-op exporter")


def run(mode: str, url: str, messages: int, baseline_dir: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    code_dir = baseline_dir if mode == "baseline" else ROOT
    env["PYTHONPATH"] = str(code_dir)
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD, mode, url, str(messages)],
        capture_output=True,
        text=True,
        env=env,
        cwd=code_dir,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode}: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = arguments(__doc__, "amqp://guest:guest@localhost:5672/")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--baseline", default=BASELINE)
    args = parser.parse_args()
    rounds = max(1, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        baseline_dir = Path(tmp) / "baseline"
        add = ["worktree", "add", "-q", "--detach", str(baseline_dir), args.baseline]
        subprocess.run(["git", "-C", str(ROOT), *add], check=True)
        try:
            found: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
            for r in range(rounds):
                order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
                for mode in order:
                    found[mode].append(run(mode, args.url, args.messages, baseline_dir))
                    print(f"round {r + 1} {mode}: {found[mode][-1]}", file=sys.stderr)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline_dir)],
                check=False,
            )
    medians = {
        mode: {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        for mode, runs in found.items()
    }
    base = medians["baseline"]
    lines = [
        "## Traces and metrics: what they cost",
        "",
        f"`python bench/observability.py --messages {args.messages} --rounds {rounds}`;"
        f" {broker_version(args.url)}, {os.cpu_count()} cores, load {load_average()}."
        f" Baseline: {args.baseline} (before metrics and traces). Median of {rounds} rounds,"
        " messages per second and the ratio to the baseline.",
        "",
        "| contender | publish_many (batch span) | publish (span each) | consume (span each) |",
        "| --- | --- | --- | --- |",
    ]
    for mode in MODES:
        m = medians[mode]
        cells = [
            f"{m[k]:,.0f}" + ("" if mode == "baseline" else f" ({m[k] / base[k]:.2f}x)")
            for k in ("publish_many", "publish", "consume")
        ]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write_docs:
        write_section(lines[0], text)


if __name__ == "__main__":
    main()
