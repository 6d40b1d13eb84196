"""Prometheus metrics of the workers and publishers in this process, through prometheus-client.

Workers and publishers count in plain integers on their hot paths; ``RabbitryCollector`` reads
those counters when Prometheus scrapes, so counting costs no lock and no registry call. The
worker's ``--metrics-port`` serves them; in your own process::

    import prometheus_client
    import rabbitry.metrics

    rabbitry.metrics.register()              # into prometheus_client.REGISTRY
    prometheus_client.start_http_server(9100)

Families (every worker of the process summed per label set; the counters of workers and
publishers that were garbage-collected stay in the sums, so no total ever goes down):

- ``rabbitry_worker_messages_total{queue,outcome}``: settled deliveries by outcome: ``handled``,
  ``retried``, ``parked``, ``rejected``, ``requeued``, ``duplicate``, ``cancelled``;
- ``rabbitry_worker_received_total{queue}``, ``rabbitry_worker_failures_total{queue}``,
  ``rabbitry_worker_timeouts_total{queue}``, ``rabbitry_worker_retried_total{queue,tier}``,
  ``rabbitry_worker_immediate_retries_total{queue}`` (handler calls made again in process);
- ``rabbitry_worker_handler_seconds{queue}`` (histogram), ``rabbitry_worker_in_flight{queue}``,
  ``rabbitry_worker_reconnects_total``;
- ``rabbitry_worker_kill_switch_state{queue,state}``: how many of the process's workers have the
  queue's kill switch ``closed``, ``open`` or ``half_open`` (queues with a kill switch only);
  ``rabbitry_worker_kill_switch_trips_total{queue}``;
- ``rabbitry_publisher_messages_total{outcome}``: ``confirmed``, ``nacked``, ``returned``,
  ``failed``; ``rabbitry_publisher_republished_total``, ``rabbitry_publisher_in_flight``,
  ``rabbitry_publisher_reconnects_total``, ``rabbitry_publisher_confirm_seconds`` (histogram).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rabbitry.errors import MissingExtra

try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as exc:  # only where metrics are served: the `metrics` extra
    raise MissingExtra("serving Prometheus metrics", "prometheus-client", "metrics") from exc

from rabbitry.amqp.confirms import CONFIRM_BUCKETS
from rabbitry.consumer import metrics as worker_metrics
from rabbitry.consumer.metrics import LATENCY_BUCKETS, QueueCounters, WorkerMetrics
from rabbitry.publisher import base as publisher_base
from rabbitry.publisher.metrics import RETIRED as RETIRED_PUBLISHERS
from rabbitry.publisher.metrics import RetiredPublishers

if TYPE_CHECKING:
    from rabbitry.publisher.base import PublisherBase

__all__ = ["RabbitryCollector", "register", "serve"]

OUTCOMES = (
    "handled",
    "retried",
    "parked",
    "rejected",
    "requeued",
    "duplicate",
    "cancelled",
    "skipped",
)


SWITCH_STATES = ("closed", "open", "half_open")


def _buckets(bounds: Sequence[float], counts: Sequence[int], total: int) -> list[tuple[str, float]]:
    out, running = [], 0
    for bound, count in zip(bounds, counts, strict=False):
        running += count
        out.append((f"{bound:g}", float(running)))
    out.append(("+Inf", float(total)))
    return out


class RabbitryCollector(Collector):
    """Reads the counters of ``workers`` and ``publishers`` (default: every one of the
    process, alive or retired)."""

    def __init__(
        self,
        workers: Iterable[WorkerMetrics] | None = None,
        publishers: Iterable[PublisherBase] | None = None,
    ) -> None:
        self._workers = workers
        self._publishers = publishers

    def describe(self) -> Iterable[Metric]:
        return []  # described by collecting, which is cheap

    def collect(self) -> Iterator[Metric]:
        if self._workers is not None:
            workers = list(self._workers)
        else:
            workers = [*worker_metrics.LIVE, *worker_metrics.retired()]
        if self._publishers is not None:
            yield from _worker_families(workers)
            yield from _publisher_families(list(self._publishers), None)
            return
        yield from _worker_families(workers)
        yield from _publisher_families(list(publisher_base.LIVE), RETIRED_PUBLISHERS)


_Kind = type[CounterMetricFamily] | type[GaugeMetricFamily]
_WORKER_FAMILIES: tuple[tuple[str, _Kind, str, tuple[str, ...]], ...] = (
    ("messages", CounterMetricFamily, "Deliveries settled by the worker, by outcome.",
     ("vhost", "queue", "outcome")),
    ("received", CounterMetricFamily, "Deliveries received.", ("vhost", "queue")),
    ("failures", CounterMetricFamily,
     "Handler failures (each then retried, parked or rejected).", ("vhost", "queue")),
    ("timeouts", CounterMetricFamily, "Handlers that ran past their time-to-run.",
     ("vhost", "queue")),
    ("immediate_retries", CounterMetricFamily,
     "Handler calls made again in process after a failed call (immediate retries).",
     ("vhost", "queue")),
    ("retried", CounterMetricFamily, "Messages sent to a retry tier.",
     ("vhost", "queue", "tier")),
    ("in_flight", GaugeMetricFamily, "Deliveries received and not yet settled.",
     ("vhost", "queue")),
    ("kill_switch_state", GaugeMetricFamily,
     "Workers whose kill switch of the queue is in this state.", ("vhost", "queue", "state")),
    ("kill_switch_trips", CounterMetricFamily,
     "Times a kill switch stopped consuming the queue.", ("vhost", "queue")),
)  # fmt: skip
"""The labelled families of the workers, in the order they are served: name (after
``rabbitry_worker_``), kind, help and labels; their values are ``_WorkerSums.families[name]``."""


class _WorkerSums:
    """The counters of several workers summed per label set (a family's labels as the key)."""

    def __init__(self) -> None:
        self.families: dict[str, dict[tuple[str, ...], int]] = {
            name: defaultdict(int) for name, *_ in _WORKER_FAMILIES
        }
        self.histogram: dict[tuple[str, str], list[Any]] = {}
        self.reconnects = 0

    def add(self, worker: WorkerMetrics) -> None:
        self.reconnects += worker.reconnects
        for queue, counters in list(worker.queues.items()):
            self._add_queue(worker, queue, counters)

    def _add_queue(self, worker: WorkerMetrics, name: str, c: QueueCounters) -> None:
        f = self.families
        queue = (worker.vhost, name)
        tiers = sum(c.retried.values())
        handled = c.acked - tiers - c.parked - c.duplicates - c.cancelled - c.skipped
        settled = (handled, tiers, c.parked, c.rejected, c.requeued, c.duplicates, c.cancelled)
        for outcome, value in zip(OUTCOMES, (*settled, c.skipped), strict=True):
            f["messages"][(*queue, outcome)] += max(0, value)
        f["received"][queue] += c.received
        f["failures"][queue] += c.failed
        f["timeouts"][queue] += c.timeouts
        f["immediate_retries"][queue] += c.immediate_retries
        for tier, count in list(c.retried.items()):
            f["retried"][(*queue, tier)] += count
        f["in_flight"][queue] += worker.in_flight(name)
        if c.kill_switch and not worker.settled_only:
            for state in SWITCH_STATES:
                f["kill_switch_state"][(*queue, state)] += c.kill_switch == state
        if c.kill_switch_trips:
            f["kill_switch_trips"][queue] += c.kill_switch_trips
        h = self.histogram.setdefault(queue, [[0] * len(c.latency_buckets), 0.0, 0])
        h[0] = [a + b for a, b in zip(h[0], c.latency_buckets, strict=True)]
        h[1] += c.latency_sum
        h[2] += c.latency_count


def _worker_families(workers: list[WorkerMetrics]) -> Iterator[Metric]:
    sums = _WorkerSums()
    for worker in workers:
        sums.add(worker)
    for name, kind, text, labels in _WORKER_FAMILIES:
        family = kind(f"rabbitry_worker_{name}", text, labels=list(labels))
        for key, value in sorted(sums.families[name].items()):
            family.add_metric(list(key), value)
        yield family
    hist = HistogramMetricFamily(
        "rabbitry_worker_handler_seconds", "Handler run time.", labels=["vhost", "queue"]
    )
    for queue, (counts, total, count) in sorted(sums.histogram.items()):
        hist.add_metric(list(queue), _buckets(LATENCY_BUCKETS, counts, count), sum_value=total)
    yield hist
    yield CounterMetricFamily(
        "rabbitry_worker_reconnects", "Connections re-established.", value=sums.reconnects
    )


def _publisher_families(
    publishers: list[PublisherBase], retired: RetiredPublishers | None
) -> Iterator[Metric]:
    totals: dict[str, int] = defaultdict(int)
    buckets = [0] * (len(CONFIRM_BUCKETS) + 1)
    latency_sum, latency_count = 0.0, 0
    if retired is not None:
        for name in ("confirmed", "nacked", "returned", "failed", "republished", "reconnects"):
            totals[name] += getattr(retired, name)
        buckets = list(retired.buckets)
        latency_sum, latency_count = retired.latency_sum, retired.latency_count
    for publisher in publishers:
        tracker = publisher.tracker
        totals["confirmed"] += tracker.confirmed
        totals["nacked"] += tracker.nacked
        totals["returned"] += tracker.returned
        totals["failed"] += tracker.failed
        totals["republished"] += tracker.republished
        totals["in_flight"] += tracker.unsettled
        totals["reconnects"] += publisher.reconnects
        latency = tracker.latency
        buckets = [a + b for a, b in zip(buckets, latency.buckets, strict=True)]
        latency_sum += latency.sum
        latency_count += latency.count
    family = CounterMetricFamily(
        "rabbitry_publisher_messages",
        "Messages the broker settled, by outcome.",
        labels=["outcome"],
    )
    for outcome in ("confirmed", "nacked", "returned", "failed"):
        family.add_metric([outcome], totals[outcome])
    yield family
    yield CounterMetricFamily(
        "rabbitry_publisher_republished",
        "Messages sent again after a connection loss (possible duplicates).",
        value=totals["republished"],
    )
    yield GaugeMetricFamily(
        "rabbitry_publisher_in_flight", "Messages awaiting a confirm.", value=totals["in_flight"]
    )
    yield CounterMetricFamily(
        "rabbitry_publisher_reconnects", "Connections re-established.", value=totals["reconnects"]
    )
    hist = HistogramMetricFamily(
        "rabbitry_publisher_confirm_seconds", "Time from write to the broker's confirm."
    )
    hist.add_metric([], _buckets(CONFIRM_BUCKETS, buckets, latency_count), sum_value=latency_sum)
    yield hist


_registered: dict[int, RabbitryCollector] = {}


def register(registry: CollectorRegistry | None = None) -> RabbitryCollector:
    """Add rabbitry's collector to ``registry`` (default ``prometheus_client.REGISTRY``), once."""
    target = REGISTRY if registry is None else registry
    collector = _registered.get(id(target))
    if collector is None:
        collector = RabbitryCollector()
        target.register(collector)
        _registered[id(target)] = collector
    return collector


def serve(port: int, host: str = "0.0.0.0", registry: CollectorRegistry | None = None) -> Any:
    """Serve ``/metrics`` on ``port`` from a daemon thread: Prometheus text, or OpenMetrics
    when the scraper asks for it (``Accept: application/openmetrics-text``). Returns the
    server (``shutdown()`` it)."""
    from prometheus_client import start_http_server

    target = REGISTRY if registry is None else registry
    register(target)
    server, _thread = start_http_server(port, addr=host, registry=target)
    return server
