"""Checks of the delay and retry patterns: references, queue types, generated-name clashes."""

from __future__ import annotations

from rabbitry.errors import RabbitryError
from rabbitry.policies.delay import BinaryDelays
from rabbitry.topology.checks.findings import (
    Findings,
    each_named,
    effective_queue_type,
    exchange_exists,
    vhosts_of,
)
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.expand import expand
from rabbitry.topology.patterns.retries import (
    BROKER_RETRY_ARGUMENTS,
    VIA_BROKER,
    VIA_QUEUES,
    dead_letter_queue_of,
    linear_problem,
    parking_queue_of,
    retry_policy,
)
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.model import (
    DelaySpec,
    ExponentialBackoffSpec,
    QueueSpec,
    RetrySpec,
    Spec,
    VhostSpec,
)
from rabbitry.topology.spec.source_map import Loc

__all__ = ["check_broker_retry", "check_delays", "check_generated_names", "check_retries"]


def check_delays(spec: Spec, findings: Findings) -> None:
    for vloc, vhost in vhosts_of(spec):
        queues = {q.name for q in vhost.queues}
        exchanges = {e.name for e in vhost.exchanges}
        for loc, delay in each_named(vhost.delays, (*vloc, "delays"), "delay", findings):
            binary_only = [k for k in ("unit", "max", "count") if k in delay.model_fields_set]
            if delay.levels != "binary" and binary_only:
                findings.error(
                    (*loc, binary_only[0]),
                    f"`{binary_only[0]}` applies to binary levels only; fixed levels are the"
                    " list under `levels`",
                )
            if delay.max is not None and delay.count is not None:
                findings.error((*loc, "count"), "give `max` or `count`, not both")
            try:
                delay_scheme(delay)
            except RabbitryError as exc:
                findings.error((*loc, "levels"), str(exc))
            addresses: set[str] = set()
            for t_index, target in enumerate(delay.targets):
                t_loc = (*loc, "targets", t_index)
                if target.address in addresses:
                    findings.error(t_loc, f"delay target {target.address!r} appears twice")
                addresses.add(target.address)
                if any(c in target.address for c in "*#"):
                    findings.error(t_loc, "a delay target's address must not contain '*' or '#'")
                if target.queue is not None and target.queue not in queues:
                    findings.error(
                        (*t_loc, "queue"),
                        f"delay target queue {target.queue!r} is not declared in this vhost",
                    )
                if target.exchange is not None and not exchange_exists(target.exchange, exchanges):
                    findings.error(
                        (*t_loc, "exchange"),
                        f"delay target exchange {target.exchange!r} is not declared in this vhost",
                    )


def check_retries(spec: Spec, findings: Findings) -> None:
    for vloc, vhost in vhosts_of(spec):
        delays = {d.name: d for d in vhost.delays}
        for index, queue in enumerate(vhost.queues):
            loc = (*vloc, "queues", index)
            qtype = effective_queue_type(queue, vhost)
            declared_dlx = queue.arguments.as_broker_dict().get("x-dead-letter-exchange")
            if queue.delivery_limit is not None and qtype is not QueueType.QUORUM:
                findings.error(
                    (*loc, "delivery_limit"),
                    f"delivery_limit applies to quorum queues; {queue.name!r} is {qtype}",
                )
            if dead_letter_queue_of(queue) is not None and declared_dlx is not None:
                findings.error(
                    (*loc, "dead_letter"),
                    f"queue {queue.name!r} sets x-dead-letter-exchange and has a dead_letter"
                    " target (parking lot or dead-letter queue): keep one; set"
                    " `dead_letter: false` to keep your own dead-letter exchange",
                )
            if queue.periodic is not None:
                check_periodic(queue, qtype, delays, loc, findings)
            retry = queue.retry
            if retry is None:
                continue
            if qtype is QueueType.STREAM:
                findings.error(
                    (*loc, "retry"),
                    f"queue {queue.name!r} is a stream: streams are not consumed with acks,"
                    " so they cannot retry",
                )
            if parking_queue_of(queue) is None:
                findings.error(
                    (*loc, "parking"),
                    "a retrying queue needs a parking lot for what exhausts its retries:"
                    " remove `parking: false`",
                )
            if retry.faults is not None:
                check_fault_exchange(retry.faults.exchange, vhost, loc, findings)
            if retry.via == VIA_QUEUES:
                if isinstance(retry.backoff, ExponentialBackoffSpec) and retry.backoff.jitter:
                    findings.error(
                        (*loc, "retry", "backoff", "jitter"),
                        "jitter needs per-message delays: TTL tier queues give every message"
                        " the same delay; retry `via:` a binary delay of this vhost instead",
                    )
            elif retry.via == VIA_BROKER:
                check_broker_retry(queue, qtype, loc, findings)
            elif retry.via not in delays:
                known = ", ".join(sorted(delays)) or "none declared"
                findings.error(
                    (*loc, "retry", "via"),
                    f"retry via {retry.via!r}: no such delay in this vhost (delays: {known});"
                    " use `queues` or the name of a `delays` entry",
                )
            else:
                problem = retry_delay_problem(retry, delays[retry.via])
                if problem is not None:
                    findings.error((*loc, "retry", "backoff"), problem)
                elif (
                    delays[retry.via].levels != "binary"
                    and isinstance(retry.backoff, ExponentialBackoffSpec)
                    and retry.backoff.jitter
                ):
                    findings.warning(
                        (*loc, "retry", "backoff", "jitter"),
                        f"delay {retry.via!r} has fixed levels: jittered delays are rounded up"
                        " to the next level",
                    )


def check_fault_exchange(name: str, vhost: VhostSpec, loc: Loc, findings: Findings) -> None:
    """``retry.faults.exchange``: rabbitry declares it (a topic exchange) unless the spec does;
    events are routed by the work queue's name, which a built-in or a headers exchange would
    not route as the spec means."""
    where = (*loc, "retry", "faults", "exchange")
    if name.startswith("amq."):
        findings.error(
            where, f"fault exchange {name!r}: amq.* names are the broker's; pick another"
        )
        return
    declared = next((e for e in vhost.exchanges if e.name == name), None)
    if declared is not None and declared.type == "headers":
        findings.error(
            where,
            f"fault exchange {name!r} is declared as a headers exchange: fault events are routed"
            " by the work queue's name; declare it topic, direct or fanout, or drop its"
            " declaration and rabbitry declares a topic exchange",
        )


def check_broker_retry(queue: QueueSpec, qtype: QueueType, loc: Loc, findings: Findings) -> None:
    """``retry: {via: broker}``: a quorum queue whose retry arguments rabbitry sets itself, which
    dead-letters into its parking lot, and a back-off the broker's linear delay can hold."""
    retry = queue.retry
    assert retry is not None
    if qtype is not QueueType.QUORUM:
        findings.error(
            (*loc, "retry", "via"),
            f"retry via broker is the quorum queues' own delayed retry; {queue.name!r} is"
            f" {qtype}: declare it with `type: quorum`, or retry `via: queues`",
        )
    if queue.delivery_limit is not None:
        findings.error(
            (*loc, "delivery_limit"),
            f"retry via broker sets the delivery limit from retry.attempts ({retry.attempts}"
            f" deliveries: x-delivery-limit {retry.attempts - 1}): remove delivery_limit",
        )
    given = {
        **{k: "unchecked_arguments" for k in queue.unchecked_arguments},
        **{k: "arguments" for k in queue.arguments.as_broker_dict()},
    }
    for key in BROKER_RETRY_ARGUMENTS:
        if key in given:
            findings.error(
                (*loc, given[key], key),
                f"retry via broker sets {key} from `retry` (attempts and backoff): remove it",
            )
    parking = parking_queue_of(queue)
    if parking is not None and dead_letter_queue_of(queue) != parking:
        findings.error(
            (*loc, "dead_letter"),
            "retry via broker: the broker dead-letters what exhausts its attempts, so the"
            f" queue must dead-letter into its parking lot {parking!r}: remove `dead_letter`"
            " or set it to `parking`",
        )
    _check_broker_backoff(retry, (*loc, "retry", "backoff"), findings)


def _check_broker_backoff(retry: RetrySpec, loc: Loc, findings: Findings) -> None:
    """A back-off the broker's linear delay can hold: the same delay for every message of a
    delivery (no jitter), at least 1ms, tiers a ramp (exponential ones only approximated)."""
    exponential = isinstance(retry.backoff, ExponentialBackoffSpec)
    if isinstance(retry.backoff, ExponentialBackoffSpec) and retry.backoff.jitter:
        findings.error(
            (*loc, "jitter"),
            "retry via broker cannot spread delays: the broker gives every message the same"
            " delay for the same delivery; remove jitter, or retry `via:` a binary delay",
        )
        return
    if not exponential and 0 in retry_policy(retry).backoff.schedule_ms(retry.attempts - 1):
        findings.error(
            loc,
            "retry via broker waits at least 1ms (x-delayed-retry-min): a tier of 0 cannot be"
            " expressed; use 1ms, or retry `via: queues`",
        )
        return
    problem = linear_problem(retry)
    if problem is None:
        return
    if exponential:
        findings.warning(
            loc,
            f"retry via broker approximates the exponential back-off: {problem}; write"
            " the tiers as a ramp to say so, or retry `via: queues` for exponential delays",
        )
    else:
        findings.error(
            loc,
            f"retry via broker cannot hold these tiers: {problem}; write them as a ramp"
            " ([d, 2d, 3d, ..., up to a longest delay]) or retry `via: queues`",
        )


def check_periodic(
    queue: QueueSpec,
    qtype: QueueType,
    delays: dict[str, DelaySpec],
    loc: Loc,
    findings: Findings,
) -> None:
    """A periodic queue: its delay exists, it is consumed with acks, by one worker at a time."""
    if queue.periodic not in delays:
        known = ", ".join(sorted(delays)) or "none declared"
        findings.error(
            (*loc, "periodic"),
            f"periodic: {queue.periodic!r} is not a delay of this vhost (delays: {known});"
            " name the `delays` entry that carries the occurrences",
        )
    if qtype is QueueType.STREAM:
        findings.error(
            (*loc, "periodic"),
            f"queue {queue.name!r} is a stream: periodic jobs need a queue consumed with acks",
        )
    if queue.arguments.single_active_consumer is False:
        findings.error(
            (*loc, "arguments", "x-single-active-consumer"),
            f"periodic queue {queue.name!r} is consumed by one worker at a time (that worker"
            " tells copies of an occurrence apart): remove `x-single-active-consumer: false`",
        )


def retry_delay_problem(retry: RetrySpec, delay: DelaySpec) -> str | None:
    """Why the delay ``retry`` goes through cannot hold one of its back-offs (None: it can).

    A worker would otherwise find out only when a message fails that often, and could not
    schedule its retry.
    """
    policy = retry_policy(retry)
    backoff = policy.backoff
    schedule = backoff.schedule_ms(policy.retries)
    if not schedule:
        return None
    longest = max(schedule)
    upper = backoff.longest_ms(policy.retries)
    scheme = delay_scheme(delay)
    if isinstance(scheme, BinaryDelays):
        limit = scheme.max_delay_ms
    else:
        limit = scheme.levels_ms[-1]
        if not scheme.round_up:
            off = sorted({ms for ms in schedule if ms not in scheme.levels_ms})
            if off:
                return (
                    f"back-offs {off} ms are not levels of delay {delay.name!r}, which rejects"
                    f" other delays (round: reject): use its levels {list(scheme.levels_ms)} ms"
                    " or `round: up`"
                )
    if upper <= limit:
        return None
    jittered = f" ({longest} ms with {backoff.jitter:g} jitter)" if backoff.jitter else ""
    return (
        f"the longest back-off, {upper} ms{jittered}, exceeds the {limit} ms delay"
        f" {delay.name!r} can hold: raise that delay's `max` (or levels), or lower the"
        " back-off"
    )


LONG_NAME = 200
"""Bytes past which a declared name may make a generated one (name + suffix) too long."""


def _long_names(vhost: VhostSpec) -> bool:
    names = [q.name for q in vhost.queues] + [e.name for e in vhost.exchanges]
    names += [d.name for d in vhost.delays] + [x.name for x in vhost.sharded_exchanges]
    return any(len(name.encode("utf-8")) > LONG_NAME for name in names)


def _check_made_names(spec: Spec, vloc: Loc, vhost: VhostSpec, findings: Findings) -> None:
    try:
        made = expand(spec.model_copy(update={"vhosts": [vhost]})).vhosts[0]
    except RabbitryError:
        return  # what stops the expansion is reported by the other checks
    named: list[tuple[str, str]] = [("queue", q.name) for q in made.queues]
    named += [("exchange", e.name) for e in made.exchanges]
    for kind, name in named:
        size = len(name.encode("utf-8"))
        if size > 255:
            findings.error(
                (*vloc, "name"),
                f"the patterns name a {kind} {name[:40]!r}... of {size} bytes; AMQP names are"
                " at most 255 bytes: shorten the name it is made from",
            )


def check_generated_names(spec: Spec, findings: Findings) -> None:
    """Objects the patterns declare must not clash with declared ones (or with each other),
    and their names must fit AMQP's 255 bytes."""
    for vloc, vhost in vhosts_of(spec):
        if _long_names(vhost):
            _check_made_names(spec, vloc, vhost, findings)
        if not vhost.delays and not any(
            q.retry or q.parking or q.dead_letter for q in vhost.queues
        ):
            continue
        declared_queues = {q.name for q in vhost.queues}
        declared_exchanges = {e.name for e in vhost.exchanges}
        single = spec.model_copy(update={"vhosts": [vhost]})
        try:
            expanded = expand(single).vhosts[0]
        except RabbitryError:
            continue  # what stops the expansion is reported by the checks above
        spec._expanded[id(vhost)] = (vhost, expanded)
        generated_queues = [q.name for q in expanded.queues[len(vhost.queues) :]]
        generated_exchanges = [e.name for e in expanded.exchanges[len(vhost.exchanges) :]]
        for kind, names, declared in (
            ("queue", generated_queues, declared_queues),
            ("exchange", generated_exchanges, declared_exchanges),
        ):
            seen: set[str] = set()
            for name in names:
                if name in declared or name in seen:
                    findings.error(
                        (*vloc, "name"),
                        f"the delay/retry patterns declare {kind} {name!r}, which is also"
                        " declared elsewhere in this vhost: rename one of them",
                    )
                seen.add(name)
