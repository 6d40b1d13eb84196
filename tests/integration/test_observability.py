"""What operators see on a real broker: the worker's and publisher's metrics, scraped over HTTP
and parsed with prometheus-client's own parsers (Prometheus text and OpenMetrics)."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from rabbitry.consumer import App, AsyncWorker, IncomingMessage
from rabbitry.publisher import Publisher
from rabbitry.topology import load_spec
from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_worker import run_worker

pytestmark = pytest.mark.broker

SPEC = one_vhost_spec("""
        queues:
          - name: work
            retry: {attempts: 2, backoff: [300ms]}
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str, openmetrics: bool = False) -> dict[tuple[str, tuple[Any, ...]], float]:
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parse(text)
        for s in family.samples
    }


def test_the_metrics_endpoint_counts_handled_retried_and_parked_messages(broker: Broker) -> None:
    import rabbitry.metrics

    broker.apply(SPEC)
    app = App(load_spec(broker.tmp / "spec.yaml", {"vhost": broker.vhost, "stack": broker.stack}))
    failing = {"bad-0", "bad-1"}

    @app.handler("work")
    async def handle(message: IncomingMessage) -> None:
        if message.message_id in failing:
            raise RuntimeError("always fails")

    port = free_port()
    server = rabbitry.metrics.serve(port, host="127.0.0.1")
    openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
    try:
        # The figures are the process's: workers and publishers of earlier tests in this pytest
        # process counted too (their queues named `work` in other vhosts), and one still running
        # holds its deliveries in the in-flight gauge: this test's figures are what it adds.
        before = (
            samples(httpx.get(f"http://127.0.0.1:{port}/metrics").text),
            samples(
                httpx.get(f"http://127.0.0.1:{port}/metrics", headers=openmetrics).text,
                openmetrics=True,
            ),
        )
        with Publisher(broker.vhost_amqp_url) as publisher:
            for i in range(5):
                publisher.publish(b"ok", routing_key="work", message_id=f"ok-{i}")
            for mid in sorted(failing):
                publisher.publish(b"bad", routing_key="work", message_id=mid)
            worker = AsyncWorker(app, broker.vhost_amqp_url)
            run_worker(worker, lambda: worker.metrics["work"].parked >= 2 and not worker.in_flight)
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            negotiated = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=openmetrics)
    finally:
        server.shutdown()

    q, v = ("queue", "work"), ("vhost", broker.vhost)
    scraped = (samples(text), samples(negotiated.text, openmetrics=True))
    for after, base in zip(scraped, before, strict=True):
        found = {key: value - base.get(key, 0.0) for key, value in after.items()}
        outcomes = {
            dict(labels)["outcome"]: value
            for (name, labels), value in found.items()
            if name == "rabbitry_worker_messages_total" and q in labels and v in labels
        }
        assert (outcomes["handled"], outcomes["retried"], outcomes["parked"]) == (5, 2, 2)
        assert found[("rabbitry_worker_received_total", (q, v))] == 9  # 5 + 2 x 2 attempts
        assert found[("rabbitry_worker_failures_total", (q, v))] == 4
        assert found[("rabbitry_worker_retried_total", (q, ("tier", "300ms"), v))] == 2
        assert found[("rabbitry_worker_in_flight", (q, v))] == 0
        assert found[("rabbitry_worker_handler_seconds_count", (q, v))] == 9
        assert found[("rabbitry_publisher_messages_total", (("outcome", "confirmed"),))] >= 7
        assert found[("rabbitry_publisher_confirm_seconds_count", ())] >= 7
    assert negotiated.headers["content-type"].startswith("application/openmetrics-text")


TRACED_RUN = r"""
import asyncio, json, sys, time
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

import logging
from rabbitry.consumer import App, AsyncWorker, Worker
from rabbitry.publisher import Publisher

records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append({k: getattr(record, k, None) for k in ("queue", "message_id", "attempt", "trace_id")})
logging.getLogger("rabbitry").addHandler(Keep())
logging.getLogger("rabbitry").setLevel(logging.INFO)
from rabbitry.topology import load_spec

spec_path, vhost, stack, url, mode = sys.argv[1:6]
app = App(load_spec(spec_path, {"vhost": vhost, "stack": stack}))
tracer = trace.get_tracer("test")

def fail():
    with tracer.start_as_current_span("handler's own work"):
        raise RuntimeError("fails every time")

if mode == "sync":
    app.handler("work")(lambda message: fail())
else:
    @app.handler("work")
    async def handle(message):
        fail()

with Publisher(url) as publisher:
    publisher.publish(b"job", routing_key="work", message_id="job-1")

async def main():
    worker = AsyncWorker(app, url)
    task = asyncio.create_task(worker.run())
    started = time.monotonic()
    while worker.metrics["work"].parked < 1 and time.monotonic() - started < 20:
        await asyncio.sleep(0.02)
    worker.stop()
    await task

if mode == "sync":
    worker = Worker(app, url)
    def stop_when_parked():
        while worker.metrics["work"].parked < 1:
            time.sleep(0.02)
        worker.stop()
    import threading
    threading.Thread(target=stop_when_parked, daemon=True).start()
    worker.run()
else:
    asyncio.run(main())
spans = [
    {
        "name": s.name,
        "kind": s.kind.name,
        "trace": f"{s.context.trace_id:032x}",
        "id": f"{s.context.span_id:016x}",
        "parent": f"{s.parent.span_id:016x}" if s.parent else None,
        "attributes": dict(s.attributes),
        "events": [e.name for e in s.events],
        "status": s.status.status_code.name,
    }
    for s in exporter.get_finished_spans()
]
print(json.dumps({"spans": spans, "logs": [r for r in records if r["message_id"]]}))
"""


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_publish_retry_and_park_are_one_trace(broker: Broker, mode: str) -> None:
    import json
    import subprocess
    import sys

    broker.apply(SPEC)
    rest = [broker.stack, broker.vhost_amqp_url, mode]
    done = subprocess.run(
        [sys.executable, "-c", TRACED_RUN, str(broker.tmp / "spec.yaml"), broker.vhost, *rest],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    spans, logs = found["spans"], found["logs"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    (send,) = by_name["send work"]
    first, second = sorted(
        by_name["process work"], key=lambda s: s["attributes"]["rabbitry.attempt"]
    )
    assert {s["trace"] for s in spans} == {send["trace"]}, "one trace"
    assert send["kind"] == "PRODUCER" and first["kind"] == second["kind"] == "CONSUMER"
    assert first["parent"] == send["id"] and second["parent"] == first["id"]
    assert send["attributes"]["messaging.system"] == "rabbitmq"
    assert send["attributes"]["messaging.destination.name"] == "work"
    assert send["attributes"]["messaging.operation.type"] == "send"
    assert send["attributes"]["messaging.message.id"] == "job-1"
    assert first["attributes"]["messaging.message.id"] == "job-1"
    assert first["attributes"]["messaging.destination.name"] == "work"
    assert first["attributes"]["messaging.operation.type"] == "process"
    assert first["attributes"]["rabbitry.outcome"] == "retried"
    assert first["attributes"]["rabbitry.tier"] == "300ms"
    assert second["attributes"]["rabbitry.outcome"] == "parked"
    assert first["status"] == second["status"] == "ERROR"
    assert "retried" in first["events"] and "parked" in second["events"]
    # every log line about the message says which, where, which attempt, and which trace
    assert [(r["queue"], r["message_id"], r["trace_id"]) for r in logs] == [
        ("work", "job-1", send["trace"])
    ] * 2
    assert [r["attempt"] for r in logs] == [1, 2]
    handler_spans = by_name["handler's own work"]
    assert {s["parent"] for s in handler_spans} == {first["id"], second["id"]}
