"""What a worker checks on the broker before it consumes anything, and the error it refuses with
(or stops with, when such an object goes away while it runs: ``TopologyLost``).

A worker's handlers rely on broker objects that only ``rabbitry apply`` makes: the queues they
consume, the retry tier queues or delay levels a failed message is published into, the parking
lot, and for ``retry: {via: broker}`` a broker whose quorum queues retry by themselves (4.3+).
A worker that starts without them loses messages while its log says all is well (a retry
published nowhere, a failed delivery redelivered at once until the broker drops it).

``STEPS`` is the check, one named step per line: each takes the worker's routes and what the
broker said of itself at connection.start (``BrokerFacts``) and returns what it needs, as
``Need`` values. An object need (a queue, an exchange) is asked of the broker by ``probe``
(passive declares on a side channel); a step that can tell from the facts alone that the broker
lacks something returns a ``Need`` of kind ``BROKER`` with the reason. Everything here is pure:
no clock, no I/O. What needs RabbitMQ 4.3 is not decided here but by the table of
``rabbitry.topology.versions`` (loaded only for a worker that retries through the broker).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rabbitry.errors import TopologyLost, TopologyMissing

if TYPE_CHECKING:
    from rabbitry.consumer.app import Route
    from rabbitry.policies.delay import DelayScheme

__all__ = [
    "STEPS",
    "BrokerFacts",
    "Need",
    "Needed",
    "StartCheck",
    "Step",
    "TopologyLost",
    "TopologyMissing",
    "lost_need",
    "needs_of",
    "topology_lost",
]


class Needed(enum.StrEnum):
    """The kinds of thing a worker needs."""

    QUEUE = "queue"
    EXCHANGE = "exchange"
    BROKER = "broker"
    """A property of the broker itself (its version): the step already judged it missing."""


@dataclass(frozen=True)
class Need:
    """One thing a worker needs, and why (which handler's queue, which step)."""

    kind: Needed
    name: str
    why: str
    step: str = ""
    """The name of the step that asked for it (filled in by ``needs_of``)."""

    def __str__(self) -> str:
        if self.kind is Needed.BROKER:
            return self.why
        return f"{self.kind} {self.name!r} ({self.why})"


@dataclass(frozen=True)
class BrokerFacts:
    """What the broker says of itself in connection.start (its server properties)."""

    product: str = ""
    version: tuple[int, ...] = ()
    """Empty when the broker did not say (or not in a form that reads as a version)."""

    @classmethod
    def of(cls, properties: Mapping[str, Any] | None) -> BrokerFacts:
        props = properties or {}
        product, version = _text(props.get("product")), _text(props.get("version"))
        numbers: list[int] = []
        for part in version.split("-", 1)[0].split("."):
            if not part.isdigit():
                break
            numbers.append(int(part))
        return cls(product, tuple(numbers))

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) or "an unknown version"


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


StepCheck = Callable[["Sequence[Route]", BrokerFacts], Iterable[Need]]


@dataclass(frozen=True)
class Step:
    """One named part of the start-up check."""

    name: str
    needs: StepCheck


# -- the steps ------------------------------------------------------------------------------------


def consumed_queues(routes: Sequence[Route], broker: BrokerFacts) -> Iterator[Need]:
    """The queue of every handler (a modulus-sharded exchange's name: the exchange)."""
    for route in routes:
        if route.sharded_exchange:
            yield Need(Needed.EXCHANGE, route.queue, "modulus-sharded exchange a handler consumes")
        else:
            yield Need(Needed.QUEUE, route.queue, "a handler consumes it")


def retry_mechanism(routes: Sequence[Route], broker: BrokerFacts) -> Iterator[Need]:
    """What a failed message goes through: the tier queues of a ladder, or (``via: broker``)
    a broker whose quorum queues hold a failed delivery for its delay, and its dead-letter
    target. Delay levels are the ``delay levels`` step's."""
    for route in routes:
        retry = route.retry
        if retry is None:
            continue
        for delay_ms, tier in retry.tier_queues.items():
            yield Need(Needed.QUEUE, tier, f"retry tier of {route.queue!r}, {delay_ms} ms")
        if retry.broker is not None:
            yield from _broker_retry(route.queue, broker)
            yield Need(
                Needed.QUEUE,
                retry.parking_queue,
                f"dead-letter target of {route.queue!r}, which retries via the broker",
            )


def _broker_retry(queue: str, broker: BrokerFacts) -> Iterator[Need]:
    """The broker's delayed retry, judged by the version table (loaded only here: a worker
    that retries through queues never holds it)."""
    from rabbitry.topology.queue_types import QueueType
    from rabbitry.topology.versions import RETRY_VIA_BROKER, Kind, Use, judge

    if not broker.version:
        yield Need(
            Needed.BROKER,
            RETRY_VIA_BROKER,
            f"queue {queue!r} retries via the broker, and the broker ({broker.product or 'it'})"
            " did not say its version: retry `via: queues`, or connect to RabbitMQ 4.3 or newer",
        )
        return
    use = Use(Kind.FEATURE, RETRY_VIA_BROKER, queue_type=QueueType.QUORUM)
    for verdict in judge([use], broker.version):
        if verdict.refused:
            yield Need(Needed.BROKER, RETRY_VIA_BROKER, verdict.message(f"queue {queue!r}"))


def parking_lots(routes: Sequence[Route], broker: BrokerFacts) -> Iterator[Need]:
    """The parking lot of every queue that retries: where a message goes after its last
    attempt, or at once for a failure that is never retried."""
    for route in routes:
        if route.retry is not None and route.retry.broker is None:
            yield Need(Needed.QUEUE, route.retry.parking_queue, f"parking lot of {route.queue!r}")


def delay_levels(routes: Sequence[Route], broker: BrokerFacts) -> Iterator[Need]:
    """The exchanges and queues of the delays the worker publishes into: a queue that retries
    ``via: <delay>``, and the delay that carries a periodic queue's occurrences."""
    for route in routes:
        if route.retry is not None and route.retry.delay is not None:
            yield from level_needs(route.retry.delay, f"retries of {route.queue!r}")
        if route.periodic is not None:
            yield from level_needs(route.periodic.delay, f"occurrences of {route.queue!r}")


def level_needs(scheme: DelayScheme, what: str) -> Iterator[Need]:
    """Every exchange and queue a message published into ``scheme`` may pass through, and the
    marker of its layout (``policies.delay.layout_exchange``)."""
    from rabbitry.policies.delay import BinaryDelays

    why = f"delay level carrying {what}"
    if isinstance(scheme, BinaryDelays):
        for level in range(scheme.levels):
            yield Need(Needed.EXCHANGE, scheme.level_exchange(level), why)
            for queue in scheme.level_queues(level):
                yield Need(Needed.QUEUE, queue, why)
    else:
        yield Need(Needed.EXCHANGE, scheme.entry_exchange, why)
        for index in range(len(scheme.levels_ms)):
            yield Need(Needed.QUEUE, scheme.level_queue(index), why)
    yield Need(Needed.EXCHANGE, scheme.delivery_exchange, f"delivery exchange carrying {what}")
    # the marker names the layout: without it the levels are laid out otherwise (or not yet
    # marked), and a message routed by the spec's layout would strand in them
    yield Need(
        Needed.EXCHANGE,
        scheme.layout_exchange,
        f"layout marker of the delay carrying {what}: the broker's levels have another layout",
    )


def fault_exchanges(routes: Sequence[Route], broker: BrokerFacts) -> Iterator[Need]:
    """The exchange a queue's fault events go to (``retry.faults``): a publish to an exchange
    that does not exist closes the worker's channel, and the parked message with it."""
    for route in routes:
        if route.retry is not None and route.retry.fault_exchange is not None:
            why = f"fault events of {route.queue!r}"
            yield Need(Needed.EXCHANGE, route.retry.fault_exchange, why)


STEPS: tuple[Step, ...] = (
    Step("consumed queues", consumed_queues),
    Step("retry mechanism", retry_mechanism),
    Step("parking lots", parking_lots),
    Step("delay levels", delay_levels),
    Step("fault exchanges", fault_exchanges),
)
"""The start-up check, in order: one more is one more line here."""


def needs_of(
    routes: Sequence[Route], broker: BrokerFacts, steps: Sequence[Step] = STEPS
) -> list[Need]:
    """Everything the steps ask for, each object once (the first step and reason kept)."""
    seen: dict[tuple[Needed, str], Need] = {}
    broker_needs: list[Need] = []
    for step in steps:
        for need in step.needs(routes, broker):
            named = Need(need.kind, need.name, need.why, step.name)
            if need.kind is Needed.BROKER:
                broker_needs.append(named)
            else:
                seen.setdefault((need.kind, need.name), named)
    return [*broker_needs, *seen.values()]


class StartCheck:
    """The check of one worker's start: its routes, the steps, and whether it passed (it runs
    on the first connection only; a reconnect consumes at once)."""

    def __init__(
        self, routes: Sequence[Route], spec: str | None = None, steps: Sequence[Step] = STEPS
    ) -> None:
        self.routes = routes
        self.spec = spec
        """The spec file the app was built from, for the command the refusal names."""
        self.steps = steps
        self.passed = False

    def needs(self, broker: BrokerFacts) -> list[Need]:
        return needs_of(self.routes, broker, self.steps)

    def refusal(self, missing: Sequence[Need], vhost: str, broker: str) -> TopologyMissing:
        where = f"vhost {vhost!r} on {broker}"
        message = refusal_text(missing, where, self.spec)
        return TopologyMissing(message, missing=missing, where=where, spec=self.spec)


# -- the refusal ----------------------------------------------------------------------------------


def refusal_text(missing: Sequence[Need], where: str, spec: str | None) -> str:
    """One line: what is missing (each thing named, with why), what makes it, and that
    nothing was consumed."""
    objects = [need for need in missing if need.kind is not Needed.BROKER]
    broker = [need for need in missing if need.kind is Needed.BROKER]
    parts: list[str] = []
    if objects:
        listed = "; ".join(str(need) for need in objects)
        command = f"rabbitry apply {spec}" if spec else "rabbitry apply SPEC"
        parts.append(f"{where} lacks {listed}: run `{command}` to make them")
    parts.extend(str(need) for need in broker)
    return "the worker refused to start (nothing was consumed): " + "; ".join(parts)


# -- gone while the worker runs -------------------------------------------------------------------


def lost_need(
    error: BaseException | None, exchange: str, routing_key: str, why: str
) -> Need | None:
    """What a worker's own publish (a retry or parked copy, published to ``exchange`` with
    ``routing_key`` for the reason ``why``) found gone from the broker: the queue of a publish to
    the default exchange that came back unroutable, the exchange of one refused with 404, or
    delay levels a message reached no queue through. None for any other failure (a nack, a
    channel closed for another reason): those are not about a missing object."""
    from rabbitry.errors import ExchangeNotFound, Unroutable

    if isinstance(error, ExchangeNotFound):
        return Need(Needed.EXCHANGE, exchange, why)
    if not isinstance(error, Unroutable):
        return None
    if exchange == "":
        return Need(Needed.QUEUE, routing_key, why)
    return Need(Needed.EXCHANGE, exchange, f"{why}: a message published into it reached no queue")


def topology_lost(
    missing: Sequence[Need],
    where: str,
    spec: str | None,
    queue: str,
    held: str = "the failed message",
) -> TopologyLost:
    """What a running worker stops with when ``missing`` went away (``lost_text`` says it)."""
    message = lost_text(missing, where, spec, queue, held)
    return TopologyLost(message, missing=missing, where=where, spec=spec, queue=queue)


def lost_text(missing: Sequence[Need], where: str, spec: str | None, queue: str, held: str) -> str:
    """One line: what went away, where the message (``held``) that needed it is, and what
    to run."""
    listed = "; ".join(str(need) for need in missing)
    command = f"rabbitry apply {spec}" if spec else "rabbitry apply SPEC"
    return (
        f"the worker stopped consuming: {where} lacks {listed}, gone while the worker ran;"
        f" {held} of {queue!r} that needed it is back in its queue: run"
        f" `{command}` to make it, then start the worker again"
    )
