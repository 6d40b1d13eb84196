"""Handlers bound to the queues of a spec: ``App`` and its ``@app.handler(queue)`` decorator.

A handler may name any queue the spec declares (``targets``): a ``queues`` entry, a shard
queue of a sharded exchange, a super stream partition, or a whole group with
``@app.handler(shards="orders")``; in one vhost or in several (one connection per vhost).
``App`` resolves everything a worker needs per queue once, from the spec: the retry set-up
(``QueueRetry``: policy, tier queues or delay levels, parking lot), whether the queue asks for
ordered consumption (``x-single-active-consumer``), plus the handler's own options
(time-to-run, idempotency). Handlers are plain functions or coroutine functions taking one
``IncomingMessage``, or a typed body (``bodies``); returning means success, raising means
failure. A stream queue is read from an ``offset`` and cannot dead-letter: a failure there is
logged and skipped (``decision.after_stream_failure``), and a retry set-up is refused at
registration. ``App(middleware=[...])`` or ``app.use(m)`` adds hooks around every handler
(``middleware``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Unpack

from rabbitry.amqp.codecs import JSON, Codec
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.middleware import Middleware
from rabbitry.consumer.periodic import PeriodicJob, PeriodicQueue, periodic_job, run_occurrence
from rabbitry.consumer.routes import (
    HandlerOptions,
    Place,
    Route,
    bind,
    periodic_place,
    pick_names,
    pick_vhosts,
)
from rabbitry.consumer.schedule import schedule_of
from rabbitry.consumer.stores import (
    CancelStore,
    IdempotencyStore,
    MemoryCancelStore,
    MemoryIdempotencyStore,
)
from rabbitry.consumer.targets import Target, group_of, retry_of, target_of
from rabbitry.errors import AppError, PeriodicError, ScheduleError, SpecError, TargetError
from rabbitry.uri import split_uris

if TYPE_CHECKING:  # a worker whose spec's view is cached never loads the model (``view``)
    from rabbitry.consumer.view import WorkerView
    from rabbitry.topology.spec.model import Spec, VhostSpec

H = TypeVar("H", bound=Callable[..., Any])

__all__ = ["App", "AppError", "Route", "url_for_app"]  # Route, AppError: from ``routes``


class App:
    """A set of handlers for the queues of a spec, in one vhost or several.

    ``App("spec.yaml", vhost="shop")`` (or ``App(spec=Spec)``, or ``App()`` without a spec: no
    retries, failures are rejected and dead-lettered by the broker's rules). ``vhost`` may be a
    list of names; a spec of several vhosts without ``vhost=`` gives all of them, and a handler
    names its vhost when its queue is declared in more than one. Workers open one connection
    per vhost. ``routes`` are keyed by queue name, or by ``vhost/queue`` in an app of several
    vhosts. ``codec`` decodes the bodies of typed handlers (JSON by default); ``middleware``
    wraps every handler, the first one outermost.
    """

    views: ClassVar[bool] = False
    """Read a spec file's worker view from the cache, and store it there (``view``):
    ``rabbitry worker run`` turns it on, so an unchanged spec starts a worker without the
    spec model."""

    def __init__(
        self,
        spec: str | Path | Spec | None = None,
        *,
        vhost: str | Sequence[str] | None = None,
        variables: Mapping[str, str] | None = None,
        idempotency: IdempotencyStore | None = None,
        cancellation: CancelStore | bool = False,
        url: str | None = None,
        codec: Codec = JSON,
        middleware: Iterable[Middleware] = (),
    ) -> None:
        self._view: WorkerView | None = None
        self._source: tuple[Path, str] | None = None
        """The spec file and the text read from it, while ``_view`` stands in for the spec."""
        self._variables, self._chosen = variables, vhost
        self._spec: Spec | None = None
        self._vhosts: list[VhostSpec] = []
        self._vhost: VhostSpec | None = None
        self._vhost_names: list[str] = []
        if isinstance(spec, str | Path):
            spec = self._open(Path(spec), variables, vhost)
        self.url: str | None
        self.node_order: str | None
        """The spec's ``broker.node_order``: how workers of this app walk several URLs."""
        if self._view is not None:
            self.url = url or self._view.url
            self.node_order = self._view.node_order
        else:
            self._use(spec, vhost)
            broker = spec.broker if spec is not None else None
            self.url = url or (broker.urls if broker is not None else None)
            self.node_order = broker.node_order if broker is not None else None
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

    # -- the spec ---------------------------------------------------------------------------------

    def _open(
        self, path: Path, variables: Mapping[str, str] | None, vhost: str | Sequence[str] | None
    ) -> Spec | None:
        """The spec at ``path``, or None when its cached worker view stands in for it."""
        if not App.views:
            from rabbitry.topology import load_spec

            return load_spec(path, variables)
        from rabbitry.consumer import view as views

        text = views.spec_text(path)
        rendered = views.rendered(path, text, variables) if text is not None else None
        if text is not None and rendered is not None:
            found = views.cached(rendered)
            names = pick_names(found.vhosts, vhost) if found is not None else None
            if found is not None and names is not None:
                self._view, self._source, self._vhost_names = found, (path, text), names
                return None
        from rabbitry.topology import load_spec

        seen: list[str] = []
        spec = load_spec(path, variables, on_rendered=seen.append)
        if seen:
            views.remember(seen[0], spec)
        return spec

    def _use(self, spec: Spec | None, vhost: str | Sequence[str] | None) -> None:
        self._spec = spec
        self._vhosts = pick_vhosts(spec, vhost) if spec is not None else []
        self._vhost = self._vhosts[0] if len(self._vhosts) == 1 else None
        self._vhost_names = [v.name for v in self._vhosts]

    def _load(self) -> None:
        """Replace the worker view by the full spec, loaded from the text the view stands for."""
        if self._view is None or self._source is None:
            return
        from rabbitry.topology.spec.loader import load_spec_text

        path, text = self._source
        spec = load_spec_text(text, str(path), self._variables, search_path=path.parent)
        self._view, self._source = None, None
        self._use(spec, self._chosen)

    @property
    def spec(self) -> Spec | None:
        """The loaded spec (None for an app without one)."""
        self._load()
        return self._spec

    @property
    def vhosts(self) -> list[VhostSpec]:
        """The spec's vhosts whose queues this app's handlers may name."""
        self._load()
        return self._vhosts

    @property
    def vhost(self) -> VhostSpec | None:
        """The app's one vhost (None without a spec, or with several vhosts)."""
        self._load()
        return self._vhost

    @property
    def spec_file(self) -> str | None:
        """The file the spec was read from (None: a spec built in code, or no spec)."""
        if self._source is not None:
            return str(self._source[0])
        source = self._spec.source if self._spec is not None else None
        return source.file if source is not None else None

    @property
    def vhost_names(self) -> tuple[str, ...]:
        """The names of ``vhosts``, known without loading the spec a worker view stands for."""
        return tuple(self._vhost_names)

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
        queue: str | None = None,
        *,
        shards: str | None = None,
        vhost: str | None = None,
        nodes: int | None = None,
        **options: Unpack[HandlerOptions],
    ) -> Callable[[H], H]:
        """Decorator: run the function for every message of ``queue``, or of every shard of
        the sharded exchange or super stream ``shards`` (``add_shards``).

        ``vhost`` picks the vhost in an app of several; ``options`` are ``HandlerOptions``."""
        if (queue is None) == (shards is None):
            raise AppError(
                "@app.handler takes a queue name or shards=<sharded exchange or super stream>,"
                " one of them"
            )

        def register(func: H) -> H:
            if shards is not None:
                self.add_shards(shards, func, vhost=vhost, nodes=nodes, **options)
            else:
                assert queue is not None
                if nodes is not None:
                    raise AppError(
                        f"nodes= is for shards= of a modulus-sharded exchange, not {queue!r}"
                    )
                self.add(queue, func, vhost=vhost, **options)
            return func

        return register

    def add(
        self,
        queue: str,
        func: Callable[..., Any],
        *,
        vhost: str | None = None,
        **options: Unpack[HandlerOptions],
    ) -> Route:
        """Bind ``func`` to ``queue`` (in ``vhost``, for an app of several that declare it);
        ``options`` are ``HandlerOptions``."""
        return self._bind(self._resolve(queue, vhost), func, options)

    def add_shards(
        self,
        name: str,
        func: Callable[..., Any],
        *,
        vhost: str | None = None,
        nodes: int | None = None,
        **options: Unpack[HandlerOptions],
    ) -> list[Route]:
        """Bind ``func`` to every shard queue of the sharded exchange (consistent-hash or
        modulus-hash) or super stream ``name``: one consumer per shard, each shard retried
        and parked as the spec declares it. ``options`` are those of ``add``; a limit
        (``concurrency``, ``rate``) holds each shard on its own.

        For a modulus-sharded exchange the worker opens ``shards_per_node`` times ``nodes``
        consumers on the exchange's name, and the sharding plugin gives each one shard;
        ``nodes`` defaults to the number of URLs of the spec's ``broker.url`` (else 1)."""
        if not self.vhosts:
            raise AppError(f"shards={name!r} needs a spec that declares {name!r}: give the App one")
        if options.get("retry") is not None:
            raise AppError(
                f"shards={name!r}: retry= is one queue's set-up (its tier queues and parking lot);"
                " each shard retries as the spec's `queue:` template declares it: drop retry="
            )
        if nodes is not None and nodes < 1:
            raise AppError(f"nodes of shards={name!r} must be at least 1, got {nodes}")
        if nodes is None:
            nodes = len(split_uris(self.url)) if self.url else 1
        found: list[tuple[VhostSpec, list[Target]]] = []
        errors: list[str] = []
        for candidate in self._candidates(vhost):
            try:
                found.append((candidate, group_of(candidate, name, nodes=nodes)))
            except TargetError as exc:
                errors.append(str(exc))
        where, targets = self._one(found, errors, f"shards={name!r}")
        taken = [t.queue for t in targets if self._key(where.name, t.queue) in self.routes]
        if taken:
            raise AppError(f"shards={name!r}: {', '.join(taken)} already has a handler")
        return [self._bind(self._place(where, target), func, options) for target in targets]

    # -- resolution -------------------------------------------------------------------------------

    def _key(self, vhost: str | None, queue: str) -> str:
        return f"{vhost}/{queue}" if len(self._vhost_names) > 1 else queue

    def _candidates(self, vhost: str | None) -> list[VhostSpec]:
        if vhost is None:
            return self.vhosts
        chosen = [v for v in self.vhosts if v.name == vhost]
        if not chosen:
            names = ", ".join(v.name for v in self.vhosts) or "none: the app has no spec"
            raise AppError(f"vhost {vhost!r} is not one of the app's vhosts ({names})")
        return chosen

    def _one(
        self, found: list[tuple[VhostSpec, Any]], errors: list[str], what: str
    ) -> tuple[VhostSpec, Any]:
        """The only vhost that declares ``what``; an error listing each vhost's otherwise."""
        if len(found) == 1:
            return found[0]
        if not found:
            raise AppError("; ".join(errors))
        names = ", ".join(v.name for v, _ in found)
        raise AppError(f"{what} is declared in several vhosts ({names}): pass vhost=")

    def _resolve(self, queue: str, vhost: str | None) -> Place:
        if self._view is not None:
            names = (
                self._vhost_names if vhost is None else [n for n in self._vhost_names if n == vhost]
            )
            seen = [(n, q) for n in names if (q := self._view.queues.get(n, {}).get(queue))]
            if len(seen) == 1 and len(names) == 1:
                name, view = seen[0]
                target = Target(queue, view.declared_by, stream=view.stream)
                return Place(name, target, view.ordered, view.retry, view.retry_error)
        return self._place(*self._find(queue, vhost))

    @staticmethod
    def _place(where: VhostSpec | None, target: Target) -> Place:
        """Where a handler of ``target`` runs, with the spec's retry set-up and order."""
        if where is None:
            return Place(None, target)
        retry, error = None, None
        try:
            retry = retry_of(where, target)
        except SpecError as exc:
            error = str(exc)
        ordered = target.spec is not None and bool(target.spec.arguments.single_active_consumer)
        return Place(where.name, target, ordered, retry, error)

    def _find(self, queue: str, vhost: str | None) -> tuple[VhostSpec | None, Target]:
        if not self.vhosts:
            if vhost is not None:
                raise AppError(f"vhost={vhost!r} needs a spec that declares it: give the App one")
            return None, Target(queue, "the app (no spec)")
        found: list[tuple[VhostSpec, Target]] = []
        errors: list[str] = []
        for candidate in self._candidates(vhost):
            try:
                found.append((candidate, target_of(candidate, queue)))
            except TargetError as exc:
                errors.append(str(exc))
        return self._one(found, errors, f"queue {queue!r}")

    def _bind(self, place: Place, func: Callable[..., Any], options: HandlerOptions) -> Route:
        queue = place.target.queue
        key = self._key(place.vhost, queue)
        if key in self.routes:
            raise AppError(f"queue {queue!r} already has a handler ({self.routes[key].handler})")
        route = self.routes[key] = bind(place, func, options, self.codec)
        return route

    def parts(self) -> list[App]:
        """One app per vhost that has handlers (what a worker opens a connection for): the
        app itself when it has one vhost or none."""
        if len(self._vhost_names) <= 1:
            return [self]
        out: list[App] = []
        for vhost in self.vhosts:
            routes = {r.queue: r for r in self.routes.values() if r.vhost == vhost.name}
            if not routes:
                continue
            part = copy.copy(self)
            part._vhosts, part._vhost, part._vhost_names = [vhost], vhost, [vhost.name]
            part.routes = routes
            out.append(part)
        return out

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
        vhost, spec = periodic_place(self.vhosts, queue)
        key = self._key(vhost.name, spec.name)
        existing = self.routes.get(key)
        if existing is not None:
            if existing.periodic is None:
                raise AppError(f"queue {spec.name!r} already has a handler ({existing.handler})")
            return existing
        delay = next((d for d in vhost.delays if d.name == spec.periodic), None)
        if delay is None:
            raise AppError(
                f"periodic queue {spec.name!r} names delay {spec.periodic!r}, which vhost"
                f" {vhost.name!r} does not declare"
            )
        from rabbitry.topology.patterns.delays import delay_scheme

        carrier = PeriodicQueue(spec.name, delay_scheme(delay))
        jobs = carrier.jobs

        async def periodic_jobs(message: IncomingMessage) -> None:
            await run_occurrence(jobs, message)

        route = self.add(spec.name, periodic_jobs, vhost=vhost.name, ordered=False)
        route = replace(route, periodic=carrier)
        self.routes[key] = route
        return route

    @property
    def queues(self) -> list[str]:
        return list(self.routes)

    def __repr__(self) -> str:
        names = ", ".join(map(repr, self._vhost_names))
        where = (
            f" vhost={names}"
            if len(self._vhost_names) == 1
            else f" vhosts=[{names}]"
            if names
            else ""
        )
        return f"<App{where} queues={self.queues}>"


def url_for_app(url: str, app: App) -> str:
    """``url`` pointed at the vhost of the app's spec by the rule of every client
    (``rabbitry.amqp.settings.url_for_vhost``): a URL naming no vhost is given the app's, a URL
    naming another vhost is an error before anything starts. An app of several vhosts keeps
    the URL, checked against each (its workers point it at each vhost)."""
    from rabbitry.amqp.settings import url_for_vhost

    pointed = [url_for_vhost(url, name) for name in app.vhost_names]
    return pointed[0] if len(pointed) == 1 else url
