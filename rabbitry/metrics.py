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
from rabbitry.consumer.metrics import LATENCY_BUCKETS, WorkerMetrics
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
            workers = [*worker_metrics.LIVE, worker_metrics.RETIRED]
        if self._publishers is not None:
            yield from _worker_families(workers)
            yield from _publisher_families(list(self._publishers), None)
            return
        yield from _worker_families(workers)
        yield from _publisher_families(list(publisher_base.LIVE), RETIRED_PUBLISHERS)


def _worker_families(workers: list[WorkerMetrics]) -> Iterator[Metric]:
    outcomes: dict[tuple[str, str], int] = defaultdict(int)
    simple: dict[str, dict[str, int]] = {
        "received": defaultdict(int),
        "failed": defaultdict(int),
        "timeouts": defaultdict(int),
        "immediate_retries": defaultdict(int),
    }
    retried: dict[tuple[str, str], int] = defaultdict(int)
    in_flight: dict[str, int] = defaultdict(int)
    switches: dict[tuple[str, str], int] = defaultdict(int)
    trips: dict[str, int] = defaultdict(int)
    histogram: dict[str, list[Any]] = {}
    reconnects = 0
    for worker in workers:
        reconnects += worker.reconnects
        for queue, c in list(worker.queues.items()):
            tiers = sum(c.retried.values())
            handled = c.acked - tiers - c.parked - c.duplicates - c.cancelled - c.skipped
            for outcome, value in zip(
                OUTCOMES,
                (
                    handled,
                    tiers,
                    c.parked,
                    c.rejected,
                    c.requeued,
                    c.duplicates,
                    c.cancelled,
                    c.skipped,
                ),
                strict=True,
            ):
                outcomes[(queue, outcome)] += max(0, value)
            simple["received"][queue] += c.received
            simple["failed"][queue] += c.failed
            simple["timeouts"][queue] += c.timeouts
            simple["immediate_retries"][queue] += c.immediate_retries
            for tier, count in list(c.retried.items()):
                retried[(queue, tier)] += count
            in_flight[queue] += worker.in_flight(queue)
            if c.kill_switch and not worker.settled_only:
                for state in SWITCH_STATES:
                    switches[(queue, state)] += c.kill_switch == state
            if c.kill_switch_trips:
                trips[queue] += c.kill_switch_trips
            h = histogram.setdefault(queue, [[0] * len(c.latency_buckets), 0.0, 0])
            h[0] = [a + b for a, b in zip(h[0], c.latency_buckets, strict=True)]
            h[1] += c.latency_sum
            h[2] += c.latency_count

    family = CounterMetricFamily(
        "rabbitry_worker_messages",
        "Deliveries settled by the worker, by outcome.",
        labels=["queue", "outcome"],
    )
    for (queue, outcome), value in sorted(outcomes.items()):
        family.add_metric([queue, outcome], value)
    yield family
    for name, text in (
        ("received", "Deliveries received."),
        ("failures", "Handler failures (each then retried, parked or rejected)."),
        ("timeouts", "Handlers that ran past their time-to-run."),
        (
            "immediate_retries",
            "Handler calls made again in process after a failed call (immediate retries).",
        ),
    ):
        family = CounterMetricFamily(f"rabbitry_worker_{name}", text, labels=["queue"])
        for queue, value in sorted(simple["failed" if name == "failures" else name].items()):
            family.add_metric([queue], value)
        yield family
    family = CounterMetricFamily(
        "rabbitry_worker_retried", "Messages sent to a retry tier.", labels=["queue", "tier"]
    )
    for (queue, tier), value in sorted(retried.items()):
        family.add_metric([queue, tier], value)
    yield family
    gauge = GaugeMetricFamily(
        "rabbitry_worker_in_flight",
        "Deliveries received and not yet settled.",
        labels=["queue"],
    )
    for queue, value in sorted(in_flight.items()):
        gauge.add_metric([queue], value)
    yield gauge
    gauge = GaugeMetricFamily(
        "rabbitry_worker_kill_switch_state",
        "Workers whose kill switch of the queue is in this state.",
        labels=["queue", "state"],
    )
    for (queue, state), value in sorted(switches.items()):
        gauge.add_metric([queue, state], value)
    yield gauge
    family = CounterMetricFamily(
        "rabbitry_worker_kill_switch_trips",
        "Times a kill switch stopped consuming the queue.",
        labels=["queue"],
    )
    for queue, value in sorted(trips.items()):
        family.add_metric([queue], value)
    yield family
    hist = HistogramMetricFamily(
        "rabbitry_worker_handler_seconds", "Handler run time.", labels=["queue"]
    )
    for queue, (counts, total, count) in sorted(histogram.items()):
        hist.add_metric([queue], _buckets(LATENCY_BUCKETS, counts, count), sum_value=total)
    yield hist
    yield CounterMetricFamily(
        "rabbitry_worker_reconnects", "Connections re-established.", value=reconnects
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
