"""What operators see on a real broker: the worker's and publisher's metrics, scraped over HTTP
and parsed with prometheus-client's own parsers (Prometheus text and OpenMetrics)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
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


def run_worker(worker: AsyncWorker, until: Callable[[], bool], timeout: float = 30.0) -> None:
    async def main() -> None:
        started = time.monotonic()
        task = asyncio.create_task(worker.run())
        while not until() and time.monotonic() - started < timeout and not task.done():
            await asyncio.sleep(0.02)
        worker.stop()
        await task

    asyncio.run(main())


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

    with Publisher(broker.vhost_amqp_url) as publisher:
        for i in range(5):
            publisher.publish(b"ok", routing_key="work", message_id=f"ok-{i}")
        for mid in sorted(failing):
            publisher.publish(b"bad", routing_key="work", message_id=mid)

        port = free_port()
        server = rabbitry.metrics.serve(port, host="127.0.0.1")
        try:
            worker = AsyncWorker(app, broker.vhost_amqp_url)
            run_worker(worker, lambda: worker.metrics["work"].parked >= 2 and not worker.in_flight)
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            negotiated = httpx.get(
                f"http://127.0.0.1:{port}/metrics",
                headers={"Accept": "application/openmetrics-text; version=1.0.0"},
            )
        finally:
            server.shutdown()

    q = ("queue", "work")
    for found in (samples(text), samples(negotiated.text, openmetrics=True)):
        outcomes = {
            dict(labels)["outcome"]: value
            for (name, labels), value in found.items()
            if name == "rabbitry_worker_messages_total"
        }
        assert (outcomes["handled"], outcomes["retried"], outcomes["parked"]) == (5, 2, 2)
        assert found[("rabbitry_worker_received_total", (q,))] == 9  # 5 + 2 x 2 attempts
        assert found[("rabbitry_worker_failures_total", (q,))] == 4
        assert found[("rabbitry_worker_retried_total", (q, ("tier", "300ms")))] == 2
        assert found[("rabbitry_worker_in_flight", (q,))] == 0
        assert found[("rabbitry_worker_handler_seconds_count", (q,))] == 9
        assert found[("rabbitry_publisher_messages_total", (("outcome", "confirmed"),))] >= 7
        assert found[("rabbitry_publisher_confirm_seconds_count", ())] >= 7
    assert negotiated.headers["content-type"].startswith("application/openmetrics-text")
