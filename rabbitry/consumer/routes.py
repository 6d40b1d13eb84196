"""What a handler registration makes: a ``Route`` (one queue's handler and how it is run), from
where the queue is declared (``Place``) and the handler's options (``HandlerOptions``), each
option checked as it is given (``bind``). ``App`` keeps the routes; the worker runs them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

from rabbitry.amqp.codecs import JSON, Codec
from rabbitry.consumer.bodies import Handler, handler_shape, typed_handler
from rabbitry.consumer.kill_switch import KillSwitch
from rabbitry.consumer.limits import Limits
from rabbitry.consumer.parked_copy import ParkedHeaders
from rabbitry.consumer.periodic import PeriodicQueue
from rabbitry.consumer.targets import Target
from rabbitry.errors import AppError as AppError
from rabbitry.errors import SignatureError
from rabbitry.policies.retry import ImmediateRetry
from rabbitry.topology.patterns.retry_setup import QueueRetry

if TYPE_CHECKING:  # a worker whose spec's view is cached never loads the model (``view``)
    from rabbitry.topology.spec.model import QueueSpec, Spec, VhostSpec

StreamOffset = str | int | datetime
"""Where a stream handler starts: ``first``, ``last``, ``next``, an offset, or a time."""
STREAM_OFFSETS = ("first", "last", "next")
STREAM_OFFSET_ARGUMENT = "x-stream-offset"


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
    vhost: str | None = None
    """The spec's vhost that declares the queue (None: an app without a spec)."""
    stream: bool = False
    """A stream queue: read from ``consume_arguments["x-stream-offset"]``, acks return
    credit, a failure is logged and skipped (a stream cannot dead-letter)."""
    consumers: int = 1
    """Consumers opened on the queue (a modulus-sharded exchange: one per plugin shard)."""
    track: str | None = None
    """A stream handler's reader name: its position is kept on the broker (``tracking``)."""
    sharded_exchange: bool = False
    """``queue`` is a modulus-sharded exchange's name, which the sharding plugin consumes from."""
    kill_switch: KillSwitch | None = None
    """Stop consuming the queue a while when its handler fails too often (``kill_switch``)."""
    immediate: ImmediateRetry | None = None
    """Calls in process before a failure goes to the ladder (``immediate=``, else the spec's
    ``retry.immediate``; None: one call)."""
    parked_headers: ParkedHeaders | None = None
    """Extra headers for the parked copy of a message (``parked_headers=``)."""


@dataclass(frozen=True)
class Place:
    """Where a handler's queue is declared, as ``_bind`` needs it (from the spec or its view)."""

    vhost: str | None
    target: Target
    ordered: bool = False
    """The queue is declared with single-active-consumer."""
    retry: QueueRetry | None = None
    retry_error: str | None = None
    """Why the spec's retry set-up of the queue cannot be resolved."""


class HandlerOptions(TypedDict, total=False):
    """How one handler is run (``@app.handler``, ``add``, ``add_shards``)."""

    offset: StreamOffset
    """Where a stream queue is read from: ``first``, ``last``, ``next`` (the broker's
    default), an offset, or a ``datetime``; only for stream queues."""
    track: str | None
    """A stream handler's reader name: the worker keeps its position on the broker under it
    and a new process resumes there (``offset=`` is then only where the first one starts)."""
    timeout: float | None
    """Time-to-run in seconds: a handler that takes longer counts as failed (retryable)."""
    idempotent: bool
    """Skip messages whose id was handled before (by the app's idempotency store)."""
    ordered: bool | None
    """One message at a time, in queue order (default: the queue's single-active-consumer)."""
    priority: int | None
    """Consumer priority (``x-priority``)."""
    retry: QueueRetry | None
    """Replaces the spec's retry set-up (or gives one to an app without a spec)."""
    codec: Codec | None
    """Replaces the app's codec for this handler's body."""
    concurrency: int | None
    """At most this many of this handler's messages in flight, without holding the others."""
    rate: float | None
    """At most this many of this handler's messages started per second."""
    burst: int
    """How many of them may start back to back (default 1)."""
    kill_switch: KillSwitch | None
    """Stop consuming the queue for a cool-down when the handler's failures pass a ratio."""
    immediate: ImmediateRetry | None
    """Calls of the handler in process, a short pause apart, before a failure goes to the
    retry ladder; replaces the spec's ``retry.immediate`` (``ImmediateRetry(attempts=1)``: off)."""
    parked_headers: ParkedHeaders | None
    """``fn(message, error) -> headers``: headers of your own on the copy parked for a message
    (names of ``x-rabbitry-`` and the broker's ``x-death`` family are rabbitry's and skipped)."""


def bind(place: Place, func: Callable[..., Any], options: HandlerOptions, codec: Codec) -> Route:
    """The route of ``func`` on the queue at ``place``, each option checked against the queue
    (``codec``: the app's, unless the options name one)."""
    queue = place.target.queue
    timeout = options.get("timeout")
    if timeout is not None and timeout <= 0:
        raise AppError(f"timeout of {queue!r} must be positive, got {timeout}")
    stream = place.target.stream or (place.vhost is None and options.get("offset") is not None)
    arguments = _stream_arguments(place, options, stream)
    retry = _retry(place, options, stream)
    try:
        limits = Limits(
            concurrency=options.get("concurrency"),
            rate=options.get("rate"),
            burst=options.get("burst", 1),
        )
    except ValueError as exc:
        raise AppError(f"handler of {queue!r}: {exc}") from None
    kill_switch = _kill_switch(queue, options, stream)
    try:
        shape = handler_shape(func)
    except SignatureError as exc:
        raise AppError(f"{exc} (queue {queue!r})") from None
    codec = options.get("codec") or codec
    priority = options.get("priority")
    if priority is not None:
        arguments["x-priority"] = priority
    return Route(
        queue=queue,
        handler=typed_handler(func, shape, queue, codec),
        is_async=inspect.iscoroutinefunction(func),
        retry=retry,
        timeout=timeout,
        idempotent=options.get("idempotent", False),
        ordered=place.ordered if (ordered := options.get("ordered")) is None else ordered,
        consume_arguments=arguments,
        body_type=shape.body_type,
        codec=codec,
        limits=limits if limits.limited else None,
        vhost=place.vhost,
        stream=stream,
        consumers=place.target.consumers,
        track=options.get("track"),
        sharded_exchange=place.target.sharded_exchange,
        kill_switch=kill_switch,
        immediate=options.get("immediate") or (retry.policy.immediate if retry else None),
        parked_headers=options.get("parked_headers"),
    )


def _stream_arguments(place: Place, options: HandlerOptions, stream: bool) -> dict[str, Any]:
    """The consume arguments of ``offset=``, with ``track=`` checked: both only for streams."""
    target, where = place.target, place.vhost
    queue = target.queue
    offset = options.get("offset")
    arguments: dict[str, Any] = {}
    if offset is not None:
        if not stream:
            raise AppError(
                f"offset= reads a stream, and queue {queue!r} ({target.declared_by} of vhost"
                f" {where or '?'!r}) is not one: drop offset="
            )
        arguments[STREAM_OFFSET_ARGUMENT] = stream_offset(offset, queue)
    track = options.get("track")
    if track is not None and (not stream or not track or len(track) > 100):
        raise AppError(
            f"track={track!r} of queue {queue!r}: "
            + (
                "track= keeps a stream reader's position, and the queue is no stream: drop it"
                if not stream
                else "give a reader name of 1 to 100 characters"
            )
        )
    return arguments


def _retry(place: Place, options: HandlerOptions, stream: bool) -> QueueRetry | None:
    """The retry set-up: ``retry=``, else the spec's; none for a stream."""
    retry = options.get("retry")
    given = retry is not None
    if retry is None:
        if place.retry_error is not None:
            raise AppError(place.retry_error)
        retry = place.retry
    if stream and retry is not None:
        raise AppError(
            f"queue {place.target.queue!r} is a stream: a stream cannot dead-letter, so its"
            " messages cannot be retried or parked (a failure is logged and skipped); "
            + ("drop retry=" if given else "drop the queue's `retry:` from the spec")
        )
    return retry


def _kill_switch(queue: str, options: HandlerOptions, stream: bool) -> KillSwitch | None:
    kill_switch = options.get("kill_switch")
    if kill_switch is not None and (stream or not isinstance(kill_switch, KillSwitch)):
        raise AppError(
            f"kill_switch= of queue {queue!r}: "
            + (
                "a stream keeps its messages and is read by offset, so a failure is skipped,"
                " not retried: drop kill_switch="
                if stream
                else f"give a rabbitry.consumer.KillSwitch(...), not {kill_switch!r}"
            )
        )
    return kill_switch


def stream_offset(offset: StreamOffset, queue: str) -> StreamOffset:
    """``offset`` checked as an ``x-stream-offset`` value: ``first``, ``last``, ``next``, an
    offset (0 or more), or a time (a naive ``datetime`` is taken as UTC)."""
    if isinstance(offset, bool):
        pass  # an int to Python, never an offset
    elif (isinstance(offset, str) and offset in STREAM_OFFSETS) or (
        isinstance(offset, int) and offset >= 0
    ):
        return offset
    elif isinstance(offset, datetime):
        return offset if offset.tzinfo is not None else offset.replace(tzinfo=UTC)
    raise AppError(
        f"offset {offset!r} of stream {queue!r} is not a stream offset: give 'first', 'last',"
        " 'next', an offset (an int, 0 or more) or a datetime"
    )


def pick_names(names: Sequence[str], name: str | Sequence[str] | None) -> list[str] | None:
    """As ``pick_vhosts``, over the names of a worker view (None where it would raise)."""
    if name is None:
        return list(names)
    wanted = [name] if isinstance(name, str) else list(name)
    if not wanted or any(w not in names for w in wanted):
        return None
    return list(dict.fromkeys(wanted))


def pick_vhosts(spec: Spec, name: str | Sequence[str] | None) -> list[VhostSpec]:
    """The spec's vhosts named (all of them when ``name`` is None)."""
    if name is None:
        return list(spec.vhosts)
    wanted = [name] if isinstance(name, str) else list(name)
    by_name = {v.name: v for v in spec.vhosts}
    missing = [w for w in wanted if w not in by_name]
    if missing or not wanted:
        names = ", ".join(by_name) or "none"
        raise AppError(
            f"the spec declares no vhost {', '.join(map(repr, missing)) or '(none named)'}"
            f" (vhosts: {names})"
        )
    return [by_name[w] for w in dict.fromkeys(wanted)]


def periodic_place(vhosts: Sequence[VhostSpec], queue: str | None) -> tuple[VhostSpec, QueueSpec]:
    """The periodic queue periodic jobs travel on: ``queue``, or the one of ``vhosts``."""
    if not vhosts:
        raise AppError(
            "periodic jobs need a spec: declare a queue with `periodic: <delay>` and give"
            " the App the spec"
        )
    declared = [(v, q) for v in vhosts for q in v.queues if q.periodic is not None]
    periodic = [(v, q) for v, q in declared if queue is None or q.name == queue]
    where = " or ".join(repr(v.name) for v in vhosts)
    if len(periodic) != 1:
        names = ", ".join(q.name for _, q in declared) or "none"
        raise AppError(
            (
                f"queue {queue!r} of vhost {where} is not a periodic queue"
                if queue is not None
                else f"vhost {where} has {'several' if periodic else 'no'} periodic queues"
            )
            + f" (periodic queues: {names}); declare one with `periodic: <delay>`"
            + (" or pass queue=" if queue is None and periodic else "")
        )
    return periodic[0]
