"""What a worker is given besides its app: the keywords of ``Worker`` and ``AsyncWorker``, the
tuning they share (``WorkerOptions``), the connection settings they derive from both, and the
split of an app of several vhosts into one part per connection (AMQP binds a connection to one
vhost)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypedDict

from rabbitry.amqp.settings import Backoff, ConnectionSettings, NodeOrder, settings_for_vhost
from rabbitry.consumer.app import App
from rabbitry.consumer.metrics import WorkerMetrics

DEFAULT_PREFETCH = 300


def worker_settings(
    app: App,
    url: str | ConnectionSettings | None,
    keywords: WorkerKeywords,
    vhost: str | None = None,
) -> ConnectionSettings:
    """Connection settings of a worker: given ones, or from the URL (or a cluster's URLs), the
    app's, or localhost; several URLs are walked in ``node_order``, else the spec's. The vhost
    is ``vhost``, else the app's one vhost, by the rule of every client
    (``settings_for_vhost``: a URL naming another vhost is an error).

    Workers reconnect for as long as they run, so their back-off never gives up by default.
    """
    names = app.vhost_names
    return settings_for_vhost(
        url or app.url,
        vhost or (names[0] if len(names) == 1 else None),
        heartbeat=keywords.get("heartbeat"),
        connection_name=keywords.get("connection_name") or "rabbitry worker",
        backoff=keywords.get("backoff") or Backoff(give_up_after=None),
        node_order=keywords.get("node_order") or app.node_order,
    )


class WorkerKeywords(TypedDict, total=False):
    """What ``Worker`` and ``AsyncWorker`` take besides the app and the URL."""

    prefetch: int
    """Unacked deliveries the broker may have outstanding (default 300)."""
    ack_every: int
    """Send a multiple ack after this many finished messages (0: half the prefetch)."""
    shutdown_timeout: float
    """How long in-flight handlers may still run at shutdown (default 30 s)."""
    heartbeat: int | None
    connection_name: str | None
    backoff: Backoff | None
    """Reconnect timing; workers never give up by default."""
    node_order: NodeOrder | str | None
    """How several URLs (a cluster's nodes) are walked: shuffled (default) or in order."""


class AsyncWorkerKeywords(WorkerKeywords, total=False):
    concurrency: int
    """Async handlers running at once (default 64)."""


def vhost_parts(
    app: App, url: str | ConnectionSettings | None, keywords: AsyncWorkerKeywords
) -> list[tuple[App, ConnectionSettings]]:
    """For an app of several vhosts: one part app per vhost with handlers, each with its
    connection settings (the worker's, pointed at that vhost); empty for an app of one.

    AMQP binds a connection to one vhost, so a worker of several opens one per vhost."""
    if len(app.vhost_names) <= 1:
        return []
    parts = app.parts()
    if not parts:
        raise ValueError("the app has no handlers: add one with @app.handler(queue)")
    out: list[tuple[App, ConnectionSettings]] = []
    for part in parts:
        assert part.vhost is not None
        name = part.vhost.name
        settings = worker_settings(app, url, keywords, name)
        named = f"{settings.connection_name or 'rabbitry worker'} ({name})"
        out.append((part, replace(settings, connection_name=named)))
    return out


def combined_metrics(parts: list[tuple[str, WorkerMetrics]]) -> WorkerMetrics:
    """The counters of the workers of several vhosts in one view, keyed ``vhost/queue`` (the
    keys of the app's routes); the counters themselves stay the parts'."""
    view = WorkerMetrics(live=False)
    for vhost, metrics in parts:
        view.reconnects += metrics.reconnects
        for queue, counters in metrics.queues.items():
            view.queues[f"{vhost}/{queue}"] = counters
    return view


@dataclass(frozen=True)
class WorkerOptions:
    """Tuning shared by both workers."""

    prefetch: int = DEFAULT_PREFETCH
    """Unacked deliveries the broker may have outstanding on this connection."""
    concurrency: int = 64
    """Async handlers running at once (the async worker; sync handlers run one at a time)."""
    ack_every: int = 0
    """Send a multiple ack after this many finished messages (0: half the prefetch)."""
    shutdown_timeout: float = 30.0
    """Graceful shutdown: how long in-flight handlers may still run before their messages
    are returned to the queue."""

    def __post_init__(self) -> None:
        if not 1 <= self.prefetch <= 65535:
            raise ValueError(f"prefetch must be between 1 and 65535, got {self.prefetch}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.ack_every < 0:
            raise ValueError("ack_every must not be negative")

    @property
    def ack_batch(self) -> int:
        return self.ack_every or max(1, self.prefetch // 2)
