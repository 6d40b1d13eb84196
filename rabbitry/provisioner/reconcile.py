"""Keep a broker at its spec: plan at an interval (and on demand), apply what is allowed.

What ``rabbitry reconcile`` runs, usable from Python: ``Reconciler(spec, options).run(stop)``.
Each pass reads the spec from disk again (a changed file, or a secret file it reads, counts
from the next pass), plans without the stack's lock, and only when the plan holds changes the
options allow takes the lock, plans again under it and applies those (``allowed``): the lock is
held while applying, never between passes. What the options (or ``protect: true``) do not
allow is reported each pass, not made. A pass that fails (the broker down, a spec that does not
load) is retried after a back-off that doubles up to ``max_backoff`` (``backoff_delay``).

Passes are reported to ``on_pass`` as ``PassReport`` values; ``ReconcileMetrics`` turns them
into Prometheus metrics and ``serve_health`` serves them over HTTP with the health endpoints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Unpack

from rabbitry.diagnostics import Diagnostic
from rabbitry.errors import MissingExtra, RabbitryError

try:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    from prometheus_client import Counter as PromCounter
except ImportError as exc:  # the loop serves its metrics: the `metrics` extra
    raise MissingExtra("rabbitry reconcile", "prometheus-client", "metrics") from exc

from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.applier import apply_plan
from rabbitry.provisioner.apply_options import ApplyOptions
from rabbitry.provisioner.live_plan import locked_plan, plan_topology
from rabbitry.provisioner.lock import StackLock
from rabbitry.provisioner.plans import Action, Plan
from rabbitry.provisioner.queue_counter import AmqpQueueCounter
from rabbitry.provisioner.refusals import refusals, refused
from rabbitry.provisioner.relayout import touched_by
from rabbitry.provisioner.stack import SpecSource
from rabbitry.provisioner.target import Target, target_of
from rabbitry.uri import mask_text

__all__ = [
    "PassReport",
    "ReconcileMetrics",
    "ReconcileOptions",
    "Reconciler",
    "allowed",
    "backoff_delay",
    "serve_health",
]

logger = logging.getLogger("rabbitry.reconcile")


@dataclass(frozen=True, kw_only=True)
class ReconcileOptions:
    """What a reconcile loop may do, and how often it looks."""

    interval: float = 60.0
    """Seconds between passes (a request starts one at once)."""
    max_backoff: float = 300.0
    """Longest wait after failed passes (the wait doubles from ``interval`` up to it)."""
    allow_replace: bool = False
    prune: bool = False
    force: bool = False
    take_over: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.interval <= 0 or self.max_backoff <= 0:
            raise ValueError("interval and max_backoff must be positive (seconds)")

    @property
    def apply_options(self) -> ApplyOptions:
        return ApplyOptions(
            allow_replace=self.allow_replace,
            prune=self.prune,
            force=self.force,
            take_over=self.take_over,
        )


def backoff_delay(interval: float, failures: int, max_backoff: float) -> float:
    """Seconds to wait before the next pass after ``failures`` failed passes in a row."""
    if failures <= 0:
        return interval
    return float(min(interval * 2 ** min(failures - 1, 30), max(max_backoff, interval)))


def allowed(
    plan: Plan, options: ApplyOptions, connected: str | None = None
) -> tuple[Plan, list[Diagnostic]]:
    """The plan cut down to the changes ``options`` allow, and why each other one is not made
    (what ``refusals`` says of it alone; deletions without prune: left for it). Pure. The
    changes left out are ``excluded``: their objects, and what the record says of them, stay."""
    kept = []
    not_made: list[Diagnostic] = []
    for change in plan.changes:
        if change.action is Action.DELETE and not options.prune:
            why = f"{change.title}: no longer in the spec; deleted only with --prune"
            not_made.append(refused(change, "a deletion without --prune", why))
            continue
        alone = replace(plan, changes=(change,), relayouts=touched_by(plan.relayouts, (change,)))
        problems = refusals(alone, options, connected)
        if problems:
            not_made.extend(problems)
        else:
            kept.append(change)
    left_out = {c.key for c in plan.changes} - {c.key for c in kept}
    cut = replace(
        plan,
        changes=tuple(kept),
        excluded=plan.excluded | left_out,
        relayouts=touched_by(plan.relayouts, kept),
    )
    return cut, list(dict.fromkeys(not_made))


@dataclass(frozen=True)
class PassReport:
    """What one pass found and did."""

    ok: bool
    """The pass read, planned and applied without an error (``error`` says the one it met)."""
    started: float
    """Wall-clock time the pass started (epoch seconds)."""
    seconds: float
    """How long it took, on the monotonic clock."""
    drift: Mapping[str, int] = field(default_factory=dict)
    """Kind -> changes the pass's plan found (what differs from the spec)."""
    applied: tuple[str, ...] = ()
    refused: tuple[Diagnostic, ...] = ()
    """Why each change it would not make was not made (flags, protection, ownership)."""
    error: str = ""
    """Why the pass failed (secrets masked); empty when ``ok``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "started": round(self.started, 3),
            "seconds": round(self.seconds, 3),
            "drift": dict(sorted(self.drift.items())),
            "applied": list(self.applied),
            "refused": [str(d) for d in self.refused],
            "diagnostics": [d.to_json() for d in self.refused],
            "error": self.error,
        }


class Reconciler:
    """Plans ``spec`` against the broker at each pass and applies what ``options`` allow."""

    def __init__(
        self,
        spec: str | Path,
        options: ReconcileOptions,
        *,
        on_pass: Callable[[PassReport], None] | None = None,
        **source: Unpack[SpecSource],
    ) -> None:
        self.spec = spec
        self.options = options
        # kept, not resolved: each pass reads the spec and its broker afresh
        self._target_options: dict[str, Any] = {
            **source,
            "var_files": tuple(source.get("var_files", ())),
        }
        self.on_pass = on_pass
        self.last: PassReport | None = None
        self.last_success: PassReport | None = None
        self.running = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock_token = uuid.uuid4().hex
        """Every pass holds the stack's lock under this one token: a lock an earlier pass left
        behind (the broker went away mid-apply, so it could not let go) is this loop's own,
        taken again at once instead of after its ttl. Passes never overlap, so that earlier
        pass is over."""

    # -- control, from any thread (a signal handler, the HTTP endpoint) -----------------------

    def request(self) -> None:
        """Start a pass now (or right after the one running)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop after the pass running (an apply is never cut off half-way)."""
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        """Pass after pass until ``stop``."""
        failures = 0
        self.running = True
        try:
            while not self._stop.is_set():
                self._wake.clear()
                report = self.run_once()
                failures = 0 if report.ok else failures + 1
                delay = backoff_delay(self.options.interval, failures, self.options.max_backoff)
                if not report.ok:
                    logger.warning("pass failed; next in %.1f s", delay, extra={"retry_in": delay})
                self._wake.wait(delay)
        finally:
            self.running = False

    def run_once(self) -> PassReport:
        """One pass: plan, apply what is allowed, report (never raises for broker or spec
        trouble: the report says it)."""
        started, clock = time.time(), time.monotonic()
        try:
            drift, applied, refused = self._pass()
            report = PassReport(
                True, started, time.monotonic() - clock, drift, tuple(applied), tuple(refused)
            )
        except (RabbitryError, OSError) as exc:
            error = mask_text(str(exc)) or type(exc).__name__
            report = PassReport(False, started, time.monotonic() - clock, error=error)
        except Exception as exc:  # the loop outlives a bug in one pass; the log shows it
            logger.exception("pass failed unexpectedly")
            report = PassReport(False, started, time.monotonic() - clock, error=repr(exc))
        self.last = report
        if report.ok:
            self.last_success = report
        _log(report)
        if self.on_pass is not None:
            self.on_pass(report)
        return report

    def _pass(self) -> tuple[dict[str, int], list[str], list[Diagnostic]]:
        target = target_of(self.spec, **self._target_options)
        topology = target.topology
        options = self.options.apply_options
        with AmqpQueueCounter(target.endpoints) as counter:
            with target.endpoints.management() as client:
                found = plan_topology(client, topology, counter)
                cut, refused = allowed(found, options, client.username)
            drift = dict(Counter(c.kind for c in found.changes))
            if not cut.has_changes:
                return drift, [], refused
            # under the lock, from fresh reads: another run may have applied meanwhile
            with self._locked(target, topology.name, counter) as (client, again):
                cut, refused = allowed(again, options, client.username)
                if not cut.has_changes:
                    return drift, [], refused
                result = apply_plan(client, cut, options, counter)
        return drift, list(result.done), refused

    @contextlib.contextmanager
    def _locked(
        self, target: Target, stack: str, counter: AmqpQueueCounter
    ) -> Iterator[tuple[ManagementClient, Plan]]:
        """The plan made under the stack's lock (and those of ``take_over``), and its client."""
        topology = target.topology

        def make_plan(client: ManagementClient) -> Plan:
            return plan_topology(client, topology, counter, applying=True)

        if self.options.take_over:
            with locked_plan(target, stack, make_plan, 0.0, self.options.take_over) as held:
                yield held
            return
        with target.endpoints.management() as client:
            lock = StackLock(client, stack)
            lock.token = self._lock_token
            with lock.held():
                yield client, make_plan(client)


def _log(report: PassReport) -> None:
    extra = {"pass": report.to_json()}
    if not report.ok:
        logger.error("pass failed: %s", report.error, extra=extra)
        return
    for refusal in report.refused:
        logger.warning("not done: %s", refusal, extra={"refused": str(refusal)})
    if report.applied:
        logger.info("applied %d change(s)", len(report.applied), extra=extra)
    else:
        logger.info("nothing to apply", extra=extra)


class ReconcileMetrics:
    """Prometheus metrics of a reconcile loop, in a registry of their own:

    - ``rabbitry_reconcile_drift{kind}``: changes the last pass's plan found, by kind;
    - ``rabbitry_reconcile_refused_changes``: changes the last pass would not make;
    - ``rabbitry_reconcile_last_success_timestamp_seconds``: when the last good pass started;
    - ``rabbitry_reconcile_duration_seconds``: how long the last pass took;
    - ``rabbitry_reconcile_passes_total{outcome}``: passes, ``ok`` or ``failed``;
    - ``rabbitry_reconcile_applied_changes_total``: changes applied since start.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # every name below is rabbitry_reconcile_<name>
        named: dict[str, Any] = {
            "namespace": "rabbitry",
            "subsystem": "reconcile",
            "registry": self.registry,
        }
        self.drift = Gauge(
            "drift", "Changes the last plan found, by kind of object", ["kind"], **named
        )
        refused = "Changes the last pass would not make (flags, protection, ownership)"
        self.refused = Gauge("refused_changes", refused, **named)
        last_success = "When the last successful pass started (epoch seconds)"
        self.last_success = Gauge("last_success_timestamp_seconds", last_success, **named)
        self.duration = Gauge("duration_seconds", "How long the last pass took", **named)
        self.passes = PromCounter("passes", "Passes, by outcome", ["outcome"], **named)
        self.applied = PromCounter("applied_changes", "Changes applied", **named)
        self._kinds: set[str] = set()

    def record(self, report: PassReport) -> None:
        self.duration.set(report.seconds)
        self.passes.labels("ok" if report.ok else "failed").inc()
        if not report.ok:
            return
        self.last_success.set(report.started)
        self.refused.set(len(report.refused))
        self.applied.inc(len(report.applied))
        for kind in self._kinds | set(report.drift):
            self.drift.labels(kind).set(report.drift.get(kind, 0))
        self._kinds |= set(report.drift)

    def text(self) -> bytes:
        return generate_latest(self.registry)


def serve_health(
    reconciler: Reconciler, metrics: ReconcileMetrics, host: str, port: int
) -> ThreadingHTTPServer:
    """Serve, in a daemon thread: ``GET /healthz`` (200 while the loop runs), ``GET /readyz``
    (200 once the last pass succeeded, else 503 with why), ``GET /metrics`` (Prometheus) and
    ``POST /reconcile`` (start a pass now). Port 0 picks a free one (``server_address``)."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value).encode())

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/healthz":
                alive = reconciler.running and not reconciler.stopping
                self._json(200 if alive else 503, {"running": alive})
            elif path == "/readyz":
                last = reconciler.last
                ready = last is not None and last.ok
                body = {"ready": ready, "last_pass": last.to_json() if last else None}
                self._json(200 if ready else 503, body)
            elif path == "/metrics":
                self._send(200, metrics.text(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._json(404, {"error": f"no such path {path!r}"})

        def do_POST(self) -> None:
            if self.path.split("?")[0] == "/reconcile":
                reconciler.request()
                self._json(202, {"requested": True})
            else:
                self._json(404, {"error": "POST /reconcile starts a pass"})

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("http: " + format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="rabbitry-health", daemon=True).start()
    return server
