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


def scrape(collector: object, *, openmetrics: bool = False) -> dict[str, object]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.openmetrics import exposition as om
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    if openmetrics:
        families = om_parse(om.generate_latest(registry).decode())
    else:
        families = text_string_to_metric_families(generate_latest(registry).decode())
    return {
        f"{sample.name}{sorted(sample.labels.items())}": sample.value
        for family in families
        for sample in family.samples
    }


def test_worker_counters_scrape_through_prometheus_client() -> None:
    from rabbitry.metrics import RabbitryCollector

    metrics = WorkerMetrics()
    counters = metrics["orders.work"]
    counters.received = 7
    counters.acked = 5  # 2 handled, 2 retried, 1 parked
    counters.retried["1s"] += 2
    counters.parked = 1
    counters.failed = 3
    counters.observe(0.002)
    for openmetrics in (False, True):
        samples = scrape(
            RabbitryCollector(workers=[metrics], publishers=[]), openmetrics=openmetrics
        )
        q, v = ("queue", "orders.work"), ("vhost", "/")
        assert samples[f"rabbitry_worker_received_total{[q, v]}"] == 7
        assert samples[f"rabbitry_worker_failures_total{[q, v]}"] == 3
        assert samples[f"rabbitry_worker_messages_total{[('outcome', 'handled'), q, v]}"] == 2
        assert samples[f"rabbitry_worker_messages_total{[('outcome', 'retried'), q, v]}"] == 2
        assert samples[f"rabbitry_worker_messages_total{[('outcome', 'parked'), q, v]}"] == 1
        assert samples[f"rabbitry_worker_retried_total{[q, ('tier', '1s'), v]}"] == 2
        assert samples[f"rabbitry_worker_in_flight{[q, v]}"] == 2
        assert samples[f"rabbitry_worker_handler_seconds_bucket{[('le', '0.005'), q, v]}"] == 1
        assert samples[f"rabbitry_worker_handler_seconds_count{[q, v]}"] == 1
    assert metrics.total("retried") == 2


def test_publisher_confirm_latency_is_a_histogram_of_write_to_confirm() -> None:
    from rabbitry.amqp.confirms import ConfirmTracker, Delivery
    from rabbitry.metrics import RabbitryCollector

    now = [100.0]
    tracker = ConfirmTracker(clock=lambda: now[0])
    deliveries = [Delivery(b"", f"m{i}", "", "q", False) for i in range(3)]
    for d in deliveries:
        tracker.add(d)
    now[0] += 0.003
    tracker.ack(2, multiple=True)  # two confirmed after 3 ms
    now[0] += 0.5
    tracker.nack(3, multiple=False)

    class Publisher:
        reconnects = 1

    Publisher.tracker = tracker  # type: ignore[attr-defined]
    samples = scrape(RabbitryCollector(workers=[], publishers=[Publisher()]))  # type: ignore[list-item]
    assert samples["rabbitry_publisher_messages_total[('outcome', 'confirmed')]"] == 2
    assert samples["rabbitry_publisher_messages_total[('outcome', 'nacked')]"] == 1
    assert samples["rabbitry_publisher_confirm_seconds_count[]"] == 2
    assert samples["rabbitry_publisher_confirm_seconds_bucket[('le', '0.0025')]"] == 0
    assert samples["rabbitry_publisher_confirm_seconds_bucket[('le', '0.005')]"] == 2
    assert samples["rabbitry_publisher_reconnects_total[]"] == 1


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


def test_the_dashboard_and_alert_rules_use_only_metrics_rabbitry_exposes() -> None:
    import json
    import re
    from pathlib import Path

    import yaml

    from rabbitry.amqp.confirms import ConfirmTracker
    from rabbitry.metrics import RabbitryCollector

    metrics = WorkerMetrics()
    metrics["q"].retried["1s"] += 1
    metrics["q"].observe(0.1)

    class Publisher:
        reconnects = 0
        tracker = ConfirmTracker()

    exposed = {
        name.rsplit("[", 1)[0]
        for name in scrape(RabbitryCollector(workers=[metrics], publishers=[Publisher()]))  # type: ignore[list-item]
    }
    docs = Path(__file__).parents[3] / "docs" / "observability"
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = yaml.safe_load((docs / "alerts.yml").read_text())
    expressions += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {m for e in expressions for m in re.findall(r"rabbitry_[a-z_]+", e)}
    assert len(used) >= 8
    assert used <= exposed, used - exposed


def test_a_skipped_stream_failure_is_its_own_outcome_not_a_handled_one() -> None:
    from rabbitry.metrics import RabbitryCollector

    metrics = WorkerMetrics()
    counters = metrics["events"]
    counters.received = counters.acked = 3  # 2 handled, 1 failed and skipped
    counters.failed = counters.skipped = 1
    samples = scrape(RabbitryCollector(workers=[metrics], publishers=[]), openmetrics=False)
    q, v = ("queue", "events"), ("vhost", "/")
    assert samples[f"rabbitry_worker_messages_total{[('outcome', 'handled'), q, v]}"] == 2
    assert samples[f"rabbitry_worker_messages_total{[('outcome', 'skipped'), q, v]}"] == 1
