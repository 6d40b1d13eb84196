"""Handlers bound to the queues of a spec: ``App`` and its ``@app.handler(queue)`` decorator.

``App`` resolves everything a worker needs per queue once, from the spec: the retry set-up
(``QueueRetry``: policy, tier queues or delay levels, parking lot), whether the queue asks for
ordered consumption (``x-single-active-consumer``), plus the handler's own options
(time-to-run, idempotency). Handlers are plain functions or coroutine functions taking one
``IncomingMessage``, or a typed body (``bodies``); returning means success, raising means
failure. ``App(middleware=[...])`` or ``app.use(m)`` adds hooks around every handler
(``middleware``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

from rabbitry.amqp.codecs import JSON, Codec
from rabbitry.consumer.bodies import Handler, SignatureError, handler_shape, typed_handler
from rabbitry.consumer.limits import Limits
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.middleware import Middleware
from rabbitry.consumer.periodic import (
    PeriodicError,
    PeriodicJob,
    PeriodicQueue,
    periodic_job,
    run_occurrence,
)
from rabbitry.consumer.schedule import ScheduleError, schedule_of
from rabbitry.consumer.stores import (
    CancelStore,
    IdempotencyStore,
    MemoryCancelStore,
    MemoryIdempotencyStore,
)
from rabbitry.errors import RabbitryError, SpecError
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.retries import QueueRetry, queue_retry
from rabbitry.topology.spec.model import Spec, VhostSpec
from rabbitry.uri import split_uris

H = TypeVar("H", bound=Callable[..., Any])


class AppError(RabbitryError):
    """A handler registration that cannot work (unknown queue, duplicate handler)."""


@dataclass(frozen=True)
class Route:
    """One queue's handler and how it is run."""

    queue: str
    handler: Handler
    """Called with the ``IncomingMessage`` (a typed handler's body is decoded inside it)."""
    is_async: bool
    retry: QueueRetry | None = None
    timeout: float | None = None
    """Time-to-run in seconds: a handler that takes longer counts as failed (retryable)."""
    idempotent: bool = False
    """Skip messages whose id was handled before (by the app's idempotency store)."""
    ordered: bool = False
    """One message at a time, in queue order (single-active-consumer queues)."""
    consume_arguments: Mapping[str, Any] = field(default_factory=dict)
    body_type: Any = None
    """The type a typed handler declared for the body (None: it takes the message)."""
    codec: Codec = JSON
    """How the body of a typed handler is decoded."""
    limits: Limits | None = None
    """At most N in flight and R started per second, for this handler alone."""
    periodic: PeriodicQueue | None = None
    """The queue carries occurrences of periodic jobs (``periodic``): the worker schedules
    the next one and skips copies."""


class App:
    """A set of handlers for the queues of one vhost of a spec.

    ``App("spec.yaml", vhost="shop")`` (or ``App(spec=Spec)``, or ``App()`` without a spec: no
    retries, failures are rejected and dead-lettered by the broker's rules). ``codec`` decodes
    the bodies of typed handlers (JSON by default); ``middleware`` wraps every handler, the
    first one outermost.
    """

    def __init__(
        self,
        spec: str | Path | Spec | None = None,
        *,
        vhost: str | None = None,
        variables: Mapping[str, str] | None = None,
        idempotency: IdempotencyStore | None = None,
        cancellation: CancelStore | bool = False,
        url: str | None = None,
        codec: Codec = JSON,
        middleware: Iterable[Middleware] = (),
    ) -> None:
        if isinstance(spec, str | Path):
            from rabbitry.topology import load_spec

            spec = load_spec(Path(spec), variables)
        self.spec = spec
        self.vhost = _pick_vhost(spec, vhost) if spec is not None else None
        broker = spec.broker if spec is not None else None
        self.url = url or (broker.urls if broker is not None else None)
        self.node_order = broker.node_order if broker is not None else None
        """The spec's ``broker.node_order``: how workers of this app walk several URLs."""
        self.idempotency: IdempotencyStore = idempotency or MemoryIdempotencyStore()
        if cancellation is True:
            self.cancellation: CancelStore | None = MemoryCancelStore()
        elif cancellation is False:
            self.cancellation = None
        else:
            self.cancellation = cancellation
        self.routes: dict[str, Route] = {}
        self.codec = codec
        self.middleware: list[Middleware] = []
        for item in middleware:
            self.use(item)
        self.periodic_jobs: dict[str, PeriodicJob] = {}

    def use(self, middleware: Middleware) -> Middleware:
        """Add a middleware inside those added before (so the first one added is outermost)."""
        if not isinstance(middleware, Middleware):
            raise AppError(
                f"{middleware!r} is not a Middleware: subclass rabbitry.consumer.Middleware"
                " and override before/after/on_error/decided"
            )
        self.middleware.append(middleware)
        return middleware

    def handler(
        self,
        queue: str,
        *,
        timeout: float | None = None,
        idempotent: bool = False,
        ordered: bool | None = None,
        priority: int | None = None,
        retry: QueueRetry | None = None,
        codec: Codec | None = None,
        concurrency: int | None = None,
        rate: float | None = None,
        burst: int = 1,
    ) -> Callable[[H], H]:
        """Decorator: run the function for every message of ``queue``."""

        def register(func: H) -> H:
            self.add(
                queue,
                func,
                timeout=timeout,
                idempotent=idempotent,
                ordered=ordered,
                priority=priority,
                retry=retry,
                codec=codec,
                concurrency=concurrency,
                rate=rate,
                burst=burst,
            )
            return func

        return register

    def add(
        self,
        queue: str,
        func: Callable[..., Any],
        *,
        timeout: float | None = None,
        idempotent: bool = False,
        ordered: bool | None = None,
        priority: int | None = None,
        retry: QueueRetry | None = None,
        codec: Codec | None = None,
        concurrency: int | None = None,
        rate: float | None = None,
        burst: int = 1,
    ) -> Route:
        """Bind ``func`` to ``queue``; ``retry`` replaces the spec's retry set-up (or gives one
        to an app without a spec); ``codec`` replaces the app's for this handler's body;
        ``concurrency`` and ``rate`` (per second, ``burst`` back to back) limit this handler
        alone, without holding back the others."""
        if queue in self.routes:
            raise AppError(f"queue {queue!r} already has a handler ({self.routes[queue].handler})")
        if timeout is not None and timeout <= 0:
            raise AppError(f"timeout of {queue!r} must be positive, got {timeout}")
        spec_ordered = False
        if self.vhost is not None:
            queue_spec = next((q for q in self.vhost.queues if q.name == queue), None)
            if queue_spec is None:
                known = ", ".join(q.name for q in self.vhost.queues) or "none"
                raise AppError(
                    f"queue {queue!r} is not declared in vhost {self.vhost.name!r}"
                    f" (queues: {known})"
                )
            try:
                if retry is None:
                    retry = queue_retry(self.vhost, queue_spec)
            except SpecError as exc:
                raise AppError(str(exc)) from None
            spec_ordered = bool(queue_spec.arguments.single_active_consumer)
        try:
            limits = Limits(concurrency=concurrency, rate=rate, burst=burst)
        except ValueError as exc:
            raise AppError(f"handler of {queue!r}: {exc}") from None
        try:
            shape = handler_shape(func)
        except SignatureError as exc:
            raise AppError(f"{exc} (queue {queue!r})") from None
        codec = codec or self.codec
        arguments: dict[str, Any] = {}
        if priority is not None:
            arguments["x-priority"] = priority
        route = Route(
            queue=queue,
            handler=typed_handler(func, shape, queue, codec),
            is_async=inspect.iscoroutinefunction(func),
            retry=retry,
            timeout=timeout,
            idempotent=idempotent,
            ordered=spec_ordered if ordered is None else ordered,
            consume_arguments=arguments,
            body_type=shape.body_type,
            codec=codec,
            limits=limits if limits.limited else None,
        )
        self.routes[queue] = route
        return route

    def periodic(
        self,
        every: str | float | timedelta | None = None,
        *,
        cron: str | None = None,
        name: str | None = None,
        queue: str | None = None,
    ) -> Callable[[H], H]:
        """Decorator: run the function every ``every`` (``"5m"``, seconds, a ``timedelta``;
        aligned to the epoch, UTC) or at the times of a 5-field ``cron`` expression (UTC).

        Occurrences travel on the spec's periodic queue (``queues[].periodic``; ``queue=``
        picks one when the vhost has several) through its delay levels; ``name`` (default:
        the function's name) is the job's identity across workers and deploys.
        The function takes nothing, or the ``Occurrence``."""

        def register(func: H) -> H:
            self.add_periodic(func, every, cron=cron, name=name, queue=queue)
            return func

        return register

    def add_periodic(
        self,
        func: Callable[..., Any],
        every: str | float | timedelta | None = None,
        *,
        cron: str | None = None,
        name: str | None = None,
        queue: str | None = None,
    ) -> PeriodicJob:
        """Register ``func`` as a periodic job (what ``@app.periodic`` does)."""
        try:
            job = periodic_job(func, schedule_of(every, cron=cron), name)
        except (ScheduleError, PeriodicError) as exc:
            raise AppError(str(exc)) from None
        route = self._periodic_route(queue)
        assert route.periodic is not None
        jobs = route.periodic.jobs
        if job.name in jobs:
            raise AppError(
                f"periodic job {job.name!r} is registered twice (pass name= to tell them apart)"
            )
        jobs[job.name] = job
        self.periodic_jobs[job.name] = job
        return job

    def _periodic_route(self, queue: str | None) -> Route:
        """The route of the periodic queue (made with the first job registered on it)."""
        if self.vhost is None:
            raise AppError(
                "periodic jobs need a spec: declare a queue with `periodic: <delay>` and give"
                " the App the spec"
            )
        periodic = [q for q in self.vhost.queues if q.periodic is not None]
        if queue is not None:
            periodic = [q for q in periodic if q.name == queue]
        if len(periodic) != 1:
            names = ", ".join(q.name for q in self.vhost.queues if q.periodic) or "none"
            raise AppError(
                (
                    f"queue {queue!r} of vhost {self.vhost.name!r} is not a periodic queue"
                    if queue is not None
                    else f"vhost {self.vhost.name!r} has {'several' if periodic else 'no'}"
                    " periodic queues"
                )
                + f" (periodic queues: {names}); declare one with `periodic: <delay>`"
                + (" or pass queue=" if queue is None and periodic else "")
            )
        spec = periodic[0]
        existing = self.routes.get(spec.name)
        if existing is not None:
            if existing.periodic is None:
                raise AppError(f"queue {spec.name!r} already has a handler ({existing.handler})")
            return existing
        delay = next((d for d in self.vhost.delays if d.name == spec.periodic), None)
        if delay is None:
            raise AppError(
                f"periodic queue {spec.name!r} names delay {spec.periodic!r}, which vhost"
                f" {self.vhost.name!r} does not declare"
            )
        carrier = PeriodicQueue(spec.name, delay_scheme(delay))
        jobs = carrier.jobs

        async def periodic_jobs(message: IncomingMessage) -> None:
            await run_occurrence(jobs, message)

        route = self.add(spec.name, periodic_jobs, ordered=False)
        route = replace(route, periodic=carrier)
        self.routes[spec.name] = route
        return route

    @property
    def queues(self) -> list[str]:
        return list(self.routes)

    def __repr__(self) -> str:
        where = f" vhost={self.vhost.name!r}" if self.vhost is not None else ""
        return f"<App{where} queues={self.queues}>"


def _pick_vhost(spec: Spec, name: str | None) -> VhostSpec:
    if name is not None:
        for vhost in spec.vhosts:
            if vhost.name == name:
                return vhost
        raise AppError(f"the spec declares no vhost {name!r}")
    if len(spec.vhosts) != 1:
        names = ", ".join(v.name for v in spec.vhosts)
        raise AppError(f"the spec declares several vhosts ({names}): pass vhost=")
    return spec.vhosts[0]


def url_for_app(url: str, app: App) -> str:
    """``url`` pointed at the vhost of the app's spec, when it has one.

    As for plan and apply, RABBITRY_URL says where the broker is and the spec says which vhost:
    a URL naming the default vhost (``/%2F``, as ``rabbitry dev-broker env`` writes it) must not
    send the workers of a spec's vhost to ``/``. Every URL of a cluster's list is pointed so.
    """
    if app.vhost is None:
        return url
    path = "/" + quote(app.vhost.name, safe="")
    return ",".join(
        urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
        for parts in map(urlsplit, split_uris(url))
    )
