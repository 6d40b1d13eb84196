"""Worker counters, and the Prometheus text exposition of them.

rabbitry writes the text format itself (it is a few lines of ``name{labels} value``) rather
than depend on ``prometheus-client``: the worker's counters live in plain integers on its hot
path, and a registry with locks per increment would cost more than the no-op handler it counts.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


@dataclass
class QueueCounters:
    received: int = 0
    acked: int = 0
    failed: int = 0
    parked: int = 0
    rejected: int = 0
    requeued: int = 0
    duplicates: int = 0
    cancelled: int = 0
    timeouts: int = 0
    retried: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """By tier (``1s``, ``5s``)."""
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    latency_count: int = 0

    def observe(self, seconds: float) -> None:
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1


class WorkerMetrics:
    """Counters per queue; ``render()`` gives the Prometheus text format."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueCounters] = defaultdict(QueueCounters)
        self.reconnects = 0

    def __getitem__(self, queue: str) -> QueueCounters:
        return self.queues[queue]

    def total(self, name: str) -> int:
        value = 0
        for counters in self.queues.values():
            item = getattr(counters, name)
            value += sum(item.values()) if isinstance(item, dict) else item
        return value

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, text: str) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")

        simple = (
            ("received", "Messages delivered to the worker."),
            ("acked", "Messages acknowledged (handled, retried, parked or skipped)."),
            ("failed", "Handler failures."),
            ("parked", "Messages moved to the parking lot."),
            ("rejected", "Messages rejected to the broker's dead-letter rules."),
            ("requeued", "Messages returned to the queue (shutdown, failed republish)."),
            ("duplicates", "Messages skipped as already handled."),
            ("cancelled", "Cancelled jobs dropped."),
            ("timeouts", "Handlers that ran past their time-to-run."),
        )
        for attr, text in simple:
            name = f"rabbitry_worker_{attr}_total"
            family(name, "counter", text)
            for queue, c in sorted(self.queues.items()):
                lines.append(f'{name}{{queue="{_esc(queue)}"}} {getattr(c, attr)}')
        family("rabbitry_worker_retried_total", "counter", "Messages sent to a retry tier.")
        for queue, c in sorted(self.queues.items()):
            for tier, count in sorted(c.retried.items()):
                lines.append(
                    f'rabbitry_worker_retried_total{{queue="{_esc(queue)}",tier="{tier}"}} {count}'
                )
        name = "rabbitry_worker_handler_seconds"
        family(name, "histogram", "Handler run time.")
        for queue, c in sorted(self.queues.items()):
            q = _esc(queue)
            running = 0
            for bound, count in zip(LATENCY_BUCKETS, c.latency_buckets, strict=False):
                running += count
                lines.append(f'{name}_bucket{{queue="{q}",le="{bound:g}"}} {running}')
            lines.append(f'{name}_bucket{{queue="{q}",le="+Inf"}} {c.latency_count}')
            lines.append(f'{name}_sum{{queue="{q}"}} {c.latency_sum:.6f}')
            lines.append(f'{name}_count{{queue="{q}"}} {c.latency_count}')
        family("rabbitry_worker_reconnects_total", "counter", "Connections re-established.")
        lines.append(f"rabbitry_worker_reconnects_total {self.reconnects}")
        return "\n".join(lines) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def serve_metrics(metrics: WorkerMetrics, port: int, host: str = "0.0.0.0") -> Any:
    """Serve ``GET /metrics`` from a daemon thread; returns the server (``shutdown()`` it)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    return server
