"""Idempotency and cancellation stores, the Prometheus text, lazy property decoding."""

from __future__ import annotations

from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.consumer.message import IncomingMessage, decode_properties
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.stores import (
    CancelStore,
    IdempotencyStore,
    MemoryCancelStore,
    MemoryIdempotencyStore,
)


def test_idempotency_lru_evicts_the_least_recently_seen() -> None:
    store = MemoryIdempotencyStore(capacity=2)
    assert isinstance(store, IdempotencyStore)
    store.remember("a")
    store.remember("b")
    assert store.seen("a")  # a is now the most recent
    store.remember("c")
    assert store.seen("a") and store.seen("c") and not store.seen("b")


def test_cancel_store_drops_a_job_once() -> None:
    store = MemoryCancelStore()
    assert isinstance(store, CancelStore)
    store.cancel("job-1")
    assert store.take("job-1")
    assert not store.take("job-1")
    assert not store.take("job-2")


def test_prometheus_text() -> None:
    metrics = WorkerMetrics()
    counters = metrics["orders.work"]
    counters.received = 3
    counters.acked = 3
    counters.retried["1s"] += 2
    counters.observe(0.002)
    text = metrics.render()
    assert 'rabbitry_worker_received_total{queue="orders.work"} 3' in text
    assert 'rabbitry_worker_retried_total{queue="orders.work",tier="1s"} 2' in text
    assert 'rabbitry_worker_handler_seconds_bucket{queue="orders.work",le="0.005"} 1' in text
    assert 'rabbitry_worker_handler_seconds_count{queue="orders.work"} 1' in text
    assert "# TYPE rabbitry_worker_handler_seconds histogram" in text
    assert metrics.total("retried") == 2


def test_properties_are_decoded_like_pamqp_encodes_them() -> None:
    props = commands.Basic.Properties(
        content_type="application/json",
        headers={"x-rabbitry-attempt": 2, "tenant": "acme"},
        delivery_mode=2,
        correlation_id="c-1",
        message_id="m-1",
        timestamp=None,
        message_type="order",
        app_id="shop",
    )
    raw = pamqp_frame.marshal(header.ContentHeader(0, 5, props), 1)
    flags = int.from_bytes(raw[19:21], "big")
    decoded = decode_properties(flags, raw[21:-1])
    assert decoded["content_type"] == "application/json"
    assert decoded["headers"] == {"x-rabbitry-attempt": 2, "tenant": "acme"}
    assert decoded["message_id"] == "m-1" and decoded["type"] == "order"
    assert decoded["app_id"] == "shop" and decoded["delivery_mode"] == 2
    message = IncomingMessage(1, 0, False, "", "q", flags, raw[21:-1], b"{}", "q")
    assert message.message_id == "m-1" and message.attempt == 3 and message.json() == {}


def test_a_message_without_properties() -> None:
    message = IncomingMessage(1, 0, True, "ex", "key", 0, b"", b"hi", "q")
    assert message.message_id is None and message.headers == {} and message.attempt == 1
    assert message.text() == "hi"
