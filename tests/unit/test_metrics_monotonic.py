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
    handled = "rabbitry_worker_messages_total[('outcome', 'handled'), ('queue', 'gone-q')]"
    flight = "rabbitry_worker_in_flight[('queue', 'gone-q')]"
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
