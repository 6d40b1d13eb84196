"""Tracing is optional: without opentelemetry-api rabbitry imports, publishes and consumes as
before; with the API and no tracer provider, nothing is traced."""

from __future__ import annotations

import subprocess
import sys

WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if rabbitry[otel] were not installed
import rabbitry.consumer, rabbitry.publisher, rabbitry.metrics
from rabbitry.amqp import tracing
from rabbitry.publisher import Publisher
assert tracing.tracer() is None
delivery = Publisher("amqp://localhost:1/").prepare(b"x", routing_key="q")
assert "traceparent" not in (delivery.frames.decode("latin-1"))
print("ok")
"""


def test_without_the_otel_extra_everything_imports_and_nothing_is_traced() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_with_the_api_and_no_provider_nothing_is_traced() -> None:
    import opentelemetry.trace  # the test extra installs the API  # noqa: F401

    from rabbitry.amqp import tracing
    from rabbitry.publisher import Publisher

    assert tracing.tracer() is None
    delivery = Publisher("amqp://localhost:1/").prepare(b"x", routing_key="q")
    assert b"traceparent" not in delivery.frames
