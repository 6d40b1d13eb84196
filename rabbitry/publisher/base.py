"""What the sync and async publishers share: options, message preparation, statistics."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypedDict, Unpack

from rabbitry.amqp import tracing
from rabbitry.amqp.codecs import Codec
from rabbitry.amqp.confirms import ConfirmTracker, Delivery
from rabbitry.amqp.message import Body, Message, MessageBuilder
from rabbitry.amqp.reconnect import NodeWalk
from rabbitry.amqp.session import ReplyHook, Session
from rabbitry.amqp.settings import (
    ConnectionOptions,
    ConnectionSettings,
    named_vhost,
    settings_for_vhost,
)
from rabbitry.errors import PublisherClosed, PublishError
from rabbitry.policies.delay import DelayScheme
from rabbitry.publisher.metrics import LivePublishers
from rabbitry.publisher.requests import (
    REPLY_TO,
    PendingReplies,
    RequestOptions,
    Waiting,
    fresh_correlation_id,
)
from rabbitry.publisher.window import AdaptiveWindow

if TYPE_CHECKING:  # routing reads the topology's pydantic models: loaded by the first publisher
    from rabbitry.publisher.routing import DelayLevels
    from rabbitry.topology.primitives import Topology
    from rabbitry.topology.spec.model import Spec

logger = logging.getLogger("rabbitry.publisher")

DEFAULT_WINDOW = 512
"""The window of ``window=None`` batches on a fixed-window publisher (and the adaptive
window's ceiling): see ``rabbitry.publisher.window``."""

RepublishHook = Callable[[list[Delivery]], None]


class PublishOptions(TypedDict, total=False):
    """The keywords of one message: ``publish``, ``send`` and ``prepare`` take these, with the
    defaults ``PublisherBase.prepare`` gives them."""

    exchange: str | None
    routing_key: str
    headers: Mapping[str, Any] | None
    mandatory: bool | None
    delay: float | timedelta | None
    shard_key: str | None
    message_id: str | None
    check_route: bool
    timeout: float | None
    traced: bool
    content_type: str | None
    content_encoding: str | None
    correlation_id: str | None
    reply_to: str | None
    expiration: str | int | None
    priority: int | None
    persistent: bool | None
    message_type: str | None
    user_id: str | None
    timestamp: int | None


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch's defaults, resolved once per ``stream`` call rather than per message."""

    exchange: str | None
    routing_key: str
    mandatory: bool | None
    headers: Mapping[str, Any] | None
    window: int | None
    """The batch's own window; None follows the publisher's (adaptive unless fixed)."""
    trace: Mapping[str, str] | None = None
    """The trace context every message of the batch carries (its PRODUCER span's)."""
    span: Any = None


class BatchOptions(TypedDict, total=False):
    """The keywords of ``publish_many`` and ``stream``: defaults for every message of a batch."""

    exchange: str | None
    routing_key: str
    mandatory: bool | None
    headers: Mapping[str, Any] | None
    window: int | None


@dataclass(frozen=True)
class PublisherStats:
    """Counters since the publisher was created."""

    confirmed: int
    nacked: int
    returned: int
    failed: int
    republished: int
    """Messages sent again after a connection or channel loss: possible duplicates."""
    reconnects: int
    in_flight: int


LIVE: weakref.WeakSet[PublisherBase] = LivePublishers()
"""Every publisher alive in this process (what ``rabbitry.metrics`` reads at a scrape)."""


class PublisherBase:
    """Options and message preparation; subclasses add the connection."""

    _session: Session | None = None

    def __init__(
        self,
        url: str | ConnectionSettings | None = None,
        *,
        confirms: bool = True,
        window: int | None = None,
        confirm_timeout: float | None = 30.0,
        exchange: str = "",
        mandatory: bool = True,
        persistent: bool = True,
        content_type: str | None = None,
        codec: Codec | None = None,
        app_id: str | None = None,
        timestamps: bool = True,
        topology: Topology | None = None,
        vhost: str | None = None,
        delays: DelayLevels | None = None,
        on_republish: RepublishHook | None = None,
        **connection: Unpack[ConnectionOptions],
    ) -> None:
        if window is not None and window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        if confirm_timeout is not None and confirm_timeout <= 0:
            raise ValueError("confirm_timeout must be positive (or None to wait forever)")
        from rabbitry.publisher.routing import Router

        if topology is not None and vhost is None:  # the URL's vhost picks the topology's
            vhost = url.vhost if isinstance(url, ConnectionSettings) else named_vhost(url or "")
        router = Router(topology, vhost, delays=delays)
        settings = settings_for_vhost(url, router.vhost or vhost, **connection)
        self.settings = settings
        self.walk = NodeWalk(settings)
        """Which of the cluster's nodes (one or more) the next connect goes to."""
        self.confirms = confirms
        self.adaptive = AdaptiveWindow() if window is None else None
        """The window's rule when none was given (``rabbitry.publisher.window``)."""
        self._fixed_window = window
        self.confirm_timeout = confirm_timeout
        self.default_exchange = exchange
        self.default_mandatory = mandatory
        self.router = router
        self.builder = MessageBuilder(
            app_id=app_id,
            content_type=content_type,
            codec=codec,
            persistent=persistent,
            timestamps=timestamps,
        )
        self.tracker = ConfirmTracker(clock=time.monotonic)
        self.on_republish = on_republish
        self.replies = PendingReplies()
        """Requests waiting for their replies (``request``)."""
        self._reply_hook: ReplyHook | None = None
        """Set by the first request: every connection then consumes replies."""
        self.reconnects = 0
        self.closed = False
        self.traced = True
        """Trace context in the messages and PRODUCER spans, when tracing is on."""
        LIVE.add(self)

    @classmethod
    def from_spec(
        cls,
        spec: str | Path | Spec | Topology,
        *,
        vhost: str | None = None,
        url: str | ConnectionSettings | None = None,
        variables: Mapping[str, str] | None = None,
        delays: DelayScheme | str | None = None,
        **options: Any,
    ) -> Self:
        """A publisher that resolves exchanges and shard keys from a spec (a path, with its
        template ``variables``, or a loaded ``Spec``) or an expanded ``Topology``, and delays
        from the spec's ``delays``: a delayed message goes through the delay whose targets
        include its address. ``delays=`` names the delay to use instead (or gives its levels;
        a ``Topology`` keeps no delays, so with one ``delays=`` levels are the only way).
        Before the first message through one of the spec's delays, the publisher checks once
        that the broker's levels have that delay's layout (``DelayLayoutMismatch`` if not).
        Without ``url``, the spec's ``broker.url`` is used (as workers use it), else the
        default local broker."""
        from rabbitry.publisher.routing import SpecDelays
        from rabbitry.topology import Spec, Topology, check_spec, expand, load_spec

        model: Spec | None = None
        if isinstance(spec, Topology):
            topology = spec
        else:
            model = spec if isinstance(spec, Spec) else load_spec(Path(spec), variables)
            check_spec(model)
            topology = expand(model)
        if url is None and model is not None and model.broker is not None:
            # the spec's broker, as `rabbitry worker run` and App take it: a publisher and the
            # workers of one spec must not end up on two brokers for want of a url=
            url = model.broker.urls
        named = delays if isinstance(delays, str) else None
        if named is not None and model is None:
            raise PublishError(
                f"delays={named!r} names a delay of the spec, but from_spec was given a Topology,"
                " which keeps no delays: give it the spec (a path or Spec) or the levels"
            )
        publisher = cls(
            url,
            topology=topology,
            vhost=vhost,
            delays=None if isinstance(delays, str) else delays,
            **options,
        )
        if model is not None and (delays is None or named is not None):
            chosen = next(v for v in model.vhosts if v.name == publisher.router.vhost)
            found = SpecDelays.of(chosen)
            publisher.router.delays = found if named is None else found.named(named)
            from rabbitry.publisher.layout import layout_check_for

            publisher.router.layout_check = layout_check_for(publisher.settings)
        return publisher

    @property
    def window(self) -> int:
        """How many messages may be unconfirmed now: the ``window`` given, else the adaptive
        window's current size."""
        adaptive = self.adaptive
        if adaptive is not None:
            return adaptive.window
        assert self._fixed_window is not None
        return self._fixed_window

    @property
    def blocked(self) -> bool:
        """True while the broker blocks this connection's publishing (``connection.blocked``,
        e.g. a memory or disk alarm): calls wait meanwhile, and nothing piles up."""
        session = self._session
        return session is not None and session.blocked

    @property
    def stats(self) -> PublisherStats:
        t = self.tracker
        return PublisherStats(
            confirmed=t.confirmed,
            nacked=t.nacked,
            returned=t.returned,
            failed=t.failed,
            republished=t.republished,
            reconnects=self.reconnects,
            in_flight=t.unsettled,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.settings.display}>"

    # -- preparing messages -----------------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float | None:
        if timeout is None:
            timeout = self.confirm_timeout
        return None if timeout is None else time.monotonic() + timeout

    def prepare(
        self,
        body: Body,
        *,
        exchange: str | None = None,
        routing_key: str = "",
        headers: Mapping[str, Any] | None = None,
        mandatory: bool | None = None,
        delay: float | timedelta | None = None,
        shard_key: str | None = None,
        message_id: str | None = None,
        check_route: bool = False,
        timeout: float | None = None,
        traced: bool = True,
        **properties: Any,
    ) -> Delivery:
        """A delivery ready to write (frames built, route resolved); nothing is sent.

        With tracing on (``rabbitry.amqp.tracing``), a PRODUCER span of its own unless
        ``traced`` is False (the messages of a batch share the batch's span)."""
        ex = self.default_exchange if exchange is None else exchange
        if delay is not None or shard_key is not None or self.router.knows_topology:
            if delay is not None and exchange is not None:
                raise PublishError(
                    "a delayed message goes through the delay levels: give the target address "
                    "as routing_key and no exchange"
                )
            target = self.router.resolve(ex, routing_key, shard_key=shard_key, delay=delay)
            ex, routing_key = target.exchange, target.routing_key
            if target.headers:
                headers = {**(headers or {}), **target.headers}
            if mandatory is None and target.delayed:
                mandatory = True
        if check_route and not self.router.reaches_queue(ex, routing_key, headers):
            from rabbitry.errors import NoRoute

            raise NoRoute(f"by the spec, exchange {ex!r} routes {routing_key!r} to no queue")
        span = None
        if traced and self.traced:
            tracer = tracing.tracer()
            if tracer is not None:
                span, carrier = tracing.start_producer(tracer, ex, routing_key)
                headers = {**(headers or {}), **carrier}
        delivery = self.builder.build(
            body,
            exchange=ex,
            routing_key=routing_key,
            mandatory=self.default_mandatory if mandatory is None else mandatory,
            headers=headers,
            message_id=message_id,
            deadline=self._deadline(timeout),
            **properties,
        )
        if span is not None:
            span.set_attribute("messaging.message.id", delivery.message_id)
            span.end()  # the message is handed over; its confirm is counted in the metrics
        return delivery

    def batch(self, options: BatchOptions) -> Batch:
        """A batch's defaults; with tracing on, one PRODUCER span for all its messages (a span
        per message would cost more than publishing it): ``end_batch`` ends it."""
        headers = options.get("headers")
        carrier = span = None
        if self.traced:
            tracer = tracing.tracer()
            if tracer is not None:
                exchange = options.get("exchange")
                span, carrier = tracing.start_producer(
                    tracer,
                    self.default_exchange if exchange is None else exchange,
                    options.get("routing_key", ""),
                )
                headers = {**(headers or {}), **carrier}
        return Batch(
            exchange=options.get("exchange"),
            routing_key=options.get("routing_key", ""),
            mandatory=options.get("mandatory"),
            headers=headers,
            window=options.get("window") or None,
            trace=carrier,
            span=span,
        )

    @staticmethod
    def end_batch(batch: Batch, count: int) -> None:
        if batch.span is not None:
            batch.span.set_attribute("messaging.batch.message_count", count)
            batch.span.end()

    def prepare_item(self, item: Message | Body, batch: Batch, deadline: float | None) -> Delivery:
        """One element of ``publish_many``: a ``Message`` or a bare body (batch defaults)."""
        exchange, routing_key, mandatory, headers = (
            batch.exchange,
            batch.routing_key,
            batch.mandatory,
            batch.headers,
        )
        if not isinstance(item, Message):
            if exchange is None and not self.router.knows_topology:
                # the fast path: no per-message routing work at all
                return self.builder.build(
                    item,
                    exchange=self.default_exchange,
                    routing_key=routing_key,
                    mandatory=self.default_mandatory if mandatory is None else mandatory,
                    headers=headers,
                    deadline=deadline,
                )
            item = Message(item)
        props: dict[str, Any] = dict(item.extra)
        for name in (
            "content_type",
            "correlation_id",
            "reply_to",
            "expiration",
            "priority",
            "persistent",
            "message_type",
        ):
            value = getattr(item, name)
            if value is not None:
                props[name] = value
        item_headers = item.headers
        if item_headers is not None and batch.trace is not None:
            item_headers = {**item_headers, **batch.trace}
        delivery = self.prepare(
            item.body,
            exchange=item.exchange if item.exchange is not None else exchange,
            routing_key=item.routing_key if item.routing_key is not None else routing_key,
            headers=item_headers if item_headers is not None else headers,
            traced=False,
            mandatory=item.mandatory if item.mandatory is not None else mandatory,
            delay=item.delay,
            shard_key=item.shard_key,
            message_id=item.message_id,
            **props,
        )
        delivery.deadline = deadline
        return delivery

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise PublisherClosed("the publisher is closed")

    def _fail_in_flight(self) -> None:
        """At close: each message still unconfirmed fails with ``PublisherClosed``; requests
        whose reply can no longer come fail too."""
        self.tracker.fail_where(
            lambda d: True,
            lambda d: PublisherClosed(f"message {d.message_id}: publisher closed unconfirmed"),
        )
        self.replies.channel_lost("the publisher was closed")

    def _start_request(
        self,
        body: Body,
        routing_key: str,
        timeout: float,
        options: RequestOptions,
        done: Any = None,
    ) -> tuple[Delivery, Waiting]:
        """A request's delivery (confirmed and mandatory: an unroutable request fails at its
        confirm, not at the timeout) and its entry among the waiting requests (``done``: the
        asyncio future its reply sets)."""
        if not self.confirms:
            raise PublishError(
                "request() needs publisher confirms (an unroutable request is only known from its"
                " confirm): use a publisher with confirms=True"
            )
        if timeout <= 0:
            raise ValueError(f"request timeout must be positive, got {timeout}")
        correlation_id = options.pop("correlation_id", None) or fresh_correlation_id()
        waiting = self.replies.expect(correlation_id, done)
        try:
            delivery = self.prepare(
                body,
                routing_key=routing_key,
                mandatory=True,
                reply_to=REPLY_TO,
                correlation_id=correlation_id,
                **options,
            )
        except BaseException:
            self.replies.forget(correlation_id)
            raise
        waiting.delivery = delivery
        return delivery, waiting

    def _want_replies(self, session: Session) -> None:
        """Consume direct replies on ``session`` (and on every later one) from now on."""
        hook = self._reply_hook
        if hook is None:
            hook = self._reply_hook = self.replies.deliver
        session.consume_replies(hook)

    def _announce_republish(self, deliveries: list[Delivery]) -> None:
        if not deliveries:
            return
        logger.warning(
            "republishing %d unconfirmed message(s) on a new connection to %s",
            len(deliveries),
            self.walk.current.display,
        )
        if self.on_republish is not None:
            self.on_republish(deliveries)
