"""Middleware inside tracing: the delivery's CONSUMER span is current in the hooks around the
handler, and spans a middleware starts nest under it (run in a fresh process: a tracer
provider can be set once per process)."""

from __future__ import annotations

import json
import subprocess
import sys

RUN = r"""
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from rabbitry.consumer import App, Middleware
from rabbitry.policies.retry import Backoff, RetryPolicy
from rabbitry.testing import HandlerHarness
from rabbitry.topology.patterns.retries import QueueRetry

tracer = trace.get_tracer("test")
seen = {}

class Traced(Middleware):
    def before(self, message):
        seen.setdefault("before", []).append(trace.get_current_span().get_span_context().span_id)
        with tracer.start_as_current_span("middleware work"):
            pass

    def on_error(self, message, error):
        seen.setdefault("on_error", []).append(trace.get_current_span().get_span_context().span_id)

    def after(self, message):
        seen.setdefault("after", []).append(trace.get_current_span().get_span_context().span_id)

retry = QueueRetry(queue="work", policy=RetryPolicy(attempts=2, backoff=Backoff(tiers_ms=(1000,))),
                   parking_queue="work.parking", tier_queues={1000: "work.retry.1s"})
app = App(middleware=[Traced()])

@app.handler("work", retry=retry)
def handle(message):
    if message.attempt == 1:
        raise RuntimeError("first attempt fails")

outcomes = HandlerHarness(app).follow("work", b"job")
spans = exporter.get_finished_spans()
consumer = [s for s in spans if s.kind == trace.SpanKind.CONSUMER]
own = [s for s in spans if s.name == "middleware work"]
print(json.dumps({
    "actions": [o.action.value for o in outcomes],
    "carried": "traceparent" in outcomes[0].headers,
    "consumer": [s.context.span_id for s in consumer],
    "outcomes": [s.attributes["rabbitry.outcome"] for s in consumer],
    "own_parents": [s.parent.span_id for s in own],
    "same_trace": len({s.context.trace_id for s in consumer}) == 1,
    "seen": seen,
}))
"""


def test_hooks_run_inside_the_consumer_span_and_their_spans_nest_under_it() -> None:
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["actions"] == ["retry", "ack"]
    assert found["outcomes"] == ["retried", "acked"]
    assert found["carried"] and found["same_trace"], "attempt 2 continues attempt 1's trace"
    first, second = found["consumer"]
    assert found["seen"] == {"before": [first, second], "on_error": [first], "after": [second]}
    assert found["own_parents"] == [first, second]
