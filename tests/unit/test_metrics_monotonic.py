"""Process-wide totals never go down: a publisher or worker that is garbage-collected keeps
counting in the scrape (Prometheus counters are monotonic)."""

from __future__ import annotations

import gc

from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.metrics import RabbitryCollector
from rabbitry.publisher import AsyncPublisher, Publisher
from tests.unit.consumer.test_stores_metrics_message import scrape

CONFIRMED = "rabbitry_publisher_messages_total[('outcome', 'confirmed')]"
RECONNECTS = "rabbitry_publisher_reconnects_total[]"


def test_a_dropped_publisher_keeps_counting_in_the_process_total() -> None:
    before = scrape(RabbitryCollector())
    for cls in (Publisher, AsyncPublisher):
        publisher = cls("amqp://guest:guest@localhost:1/")  # never connects
        publisher.tracker.confirmed += 5  # as five confirms would
        publisher.reconnects += 1
        assert scrape(RabbitryCollector())[CONFIRMED] == before[CONFIRMED] + 5
        del publisher
        gc.collect()
        assert scrape(RabbitryCollector())[CONFIRMED] == before[CONFIRMED] + 5, cls
        before = scrape(RabbitryCollector())
    assert before[RECONNECTS] >= 2


def test_a_collected_publisher_is_collected_and_counted_once() -> None:
    import weakref

    publisher = AsyncPublisher("amqp://guest:guest@localhost:1/")
    gone = weakref.ref(publisher)
    publisher.tracker.confirmed += 3
    before = scrape(RabbitryCollector())[CONFIRMED]
    del publisher
    gc.collect()
    assert gone() is None, "the publisher is kept alive by its retirement"
    gc.collect()
    assert scrape(RabbitryCollector())[CONFIRMED] == before


def test_a_dropped_worker_keeps_counting_and_shows_nothing_in_flight() -> None:
    handled = "rabbitry_worker_messages_total[('outcome', 'handled'), ('queue', 'gone-q'), ('vhost', '/')]"
    flight = "rabbitry_worker_in_flight[('queue', 'gone-q'), ('vhost', '/')]"
    base = scrape(RabbitryCollector()).get(handled, 0.0)
    metrics = WorkerMetrics()
    counters = metrics["gone-q"]
    counters.received, counters.acked = 9, 7
    assert scrape(RabbitryCollector())[handled] == base + 7
    assert scrape(RabbitryCollector())[flight] == 2
    del metrics, counters
    gc.collect()
    after = scrape(RabbitryCollector())
    assert after[handled] == base + 7
    assert after[flight] == 0, "a worker that is gone has nothing in flight"


def test_queues_of_one_name_in_two_vhosts_are_two_series_live_and_retired() -> None:
    """One process runs a worker per vhost of its app: a queue name two vhosts share must not
    add into one series, neither while the workers live nor after they are collected."""

    def handled(vhost: str) -> str:
        return f"rabbitry_worker_messages_total{[('outcome', 'handled'), ('queue', 'shared-q'), ('vhost', vhost)]}"

    base = scrape(RabbitryCollector())
    orders, billing = WorkerMetrics(vhost="orders"), WorkerMetrics(vhost="billing")
    orders["shared-q"].received = orders["shared-q"].acked = 3
    billing["shared-q"].received = billing["shared-q"].acked = 5
    billing["shared-q"].received += 1  # one in flight
    live = scrape(RabbitryCollector())
    assert live[handled("orders")] == base.get(handled("orders"), 0.0) + 3
    assert live[handled("billing")] == base.get(handled("billing"), 0.0) + 5
    assert live["rabbitry_worker_in_flight[('queue', 'shared-q'), ('vhost', 'billing')]"] == 1
    assert live["rabbitry_worker_in_flight[('queue', 'shared-q'), ('vhost', 'orders')]"] == 0
    del orders, billing
    gc.collect()
    gone = scrape(RabbitryCollector())
    assert gone[handled("orders")] == live[handled("orders")]
    assert gone[handled("billing")] == live[handled("billing")]
