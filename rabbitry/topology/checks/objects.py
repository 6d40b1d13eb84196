"""Checks of exchanges, queues, bindings, users and permissions against each other.

A queue's arguments must suit its type, references must name declared objects, names must be
unique: the broker would refuse some of these, and silently misbehave on the others (a
dead-letter exchange that does not exist drops every dead-lettered message).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from rabbitry.topology.checks.findings import (
    Findings,
    check_pattern,
    check_unchecked,
    effective_queue_type,
    exchange_exists,
    is_builtin_exchange,
    vhosts_of,
)
from rabbitry.topology.checks.policies import effective_policy
from rabbitry.topology.patterns.sharding import shard_queue_specs
from rabbitry.topology.plugin_objects import RESERVED_QUEUE_PREFIXES, reserved_queue_prefix
from rabbitry.topology.primitives import (
    DestinationType,
    ExchangeType,
    QueueType,
    canonical_json,
)
from rabbitry.topology.spec.arguments import (
    ARGUMENT_TYPE_HINTS,
    OVERFLOW_TYPES,
    QUEUE_ARGUMENT_TYPES,
    ExchangeArguments,
    QueueArguments,
    aliases,
)
from rabbitry.topology.spec.model import ExchangeSpec, QueueSpec, Spec, VhostSpec
from rabbitry.topology.spec.source_map import Loc, format_path
from rabbitry.topology.versions import Kind, added_in, format_version

_QUEUE_ARGUMENT_KEYS = frozenset(aliases(QueueArguments))
_EXCHANGE_ARGUMENT_KEYS = frozenset(aliases(ExchangeArguments))
_X_MATCH = frozenset({"all", "any", "all-with-x", "any-with-x"})

T = TypeVar("T")


def _unique(
    findings: Findings,
    loc: Loc,
    key: str,
    objects: Sequence[T],
    identity: Callable[[T], Hashable],
    describe: Callable[[T], str],
) -> None:
    first: dict[Hashable, int] = {}
    for index, obj in enumerate(objects):
        ident = identity(obj)
        if ident in first:
            findings.error(
                (*loc, key, index),
                f"duplicate {describe(obj)}: already declared at "
                f"{format_path((*loc, key, first[ident]))}",
            )
        else:
            first[ident] = index


def check_unique_names(spec: Spec, findings: Findings) -> None:
    """Two objects with one identity would fight over one broker object."""
    _unique(findings, (), "vhosts", spec.vhosts, lambda v: v.name, lambda v: f"vhost {v.name!r}")
    _unique(findings, (), "users", spec.users, lambda u: u.name, lambda u: f"user {u.name!r}")
    _unique(
        findings,
        (),
        "global_parameters",
        spec.global_parameters,
        lambda p: p.name,
        lambda p: f"global parameter {p.name!r}",
    )
    for loc, vhost in vhosts_of(spec):
        _unique(
            findings,
            loc,
            "exchanges",
            vhost.exchanges,
            lambda e: e.name,
            lambda e: f"exchange {e.name!r}",
        )
        _unique(
            findings, loc, "queues", vhost.queues, lambda q: q.name, lambda q: f"queue {q.name!r}"
        )
        _unique(
            findings,
            loc,
            "policies",
            vhost.policies,
            lambda p: p.name,
            lambda p: f"policy {p.name!r}",
        )
        _unique(
            findings,
            loc,
            "operator_policies",
            vhost.operator_policies,
            lambda p: p.name,
            lambda p: f"operator policy {p.name!r}",
        )
        _unique(
            findings,
            loc,
            "permissions",
            vhost.permissions,
            lambda p: p.user,
            lambda p: f"permissions for user {p.user!r}",
        )
        _unique(
            findings,
            loc,
            "topic_permissions",
            vhost.topic_permissions,
            lambda p: (p.user, p.exchange),
            lambda p: f"topic permissions for user {p.user!r} on exchange {p.exchange!r}",
        )
        _unique(
            findings,
            loc,
            "parameters",
            vhost.parameters,
            lambda p: (p.component, p.name),
            lambda p: f"parameter {p.component}/{p.name}",
        )
        _unique(
            findings,
            loc,
            "bindings",
            vhost.bindings,
            lambda b: (
                b.source,
                b.destination_type,
                b.destination,
                b.routing_key,
                canonical_json(b.arguments) if b.arguments else "{}",
            ),
            lambda b: f"binding {b.source!r} -> {b.destination!r} [{b.routing_key}]",
        )


_AMQ_RESERVED = {
    "exchanges": "exchange names starting with 'amq.' are reserved for the broker's own"
    " exchanges; rename {!r} (bindings may use amq.* as a source)",
    "queues": "queue names starting with 'amq.' are reserved for the broker; rename {!r}",
}
"""What declaring an amq.* exchange or queue is told."""


def check_reserved_names(spec: Spec, findings: Findings) -> None:
    """amq.* names belong to the broker, and the prefixes of its plugins' queues to them
    (``plugin_objects``): declaring one is refused."""
    for loc, vhost in vhosts_of(spec):
        declared = {
            "exchanges": [exchange.name for exchange in vhost.exchanges],
            "queues": [queue.name for queue in vhost.queues],
        }
        for key, names in declared.items():
            for i, name in enumerate(names):
                if name.startswith("amq."):
                    findings.error((*loc, key, i, "name"), _AMQ_RESERVED[key].format(name))
        for i, queue in enumerate(vhost.queues):
            prefix = reserved_queue_prefix(queue.name)
            if prefix is not None:
                findings.error(
                    (*loc, "queues", i, "name"),
                    f"queue names starting with {prefix!r} are the broker's plugins' own"
                    f" ({RESERVED_QUEUE_PREFIXES[prefix]}): rabbitry would never see"
                    f" {queue.name!r} as declared; rename it",
                )


def check_queues(spec: Spec, findings: Findings) -> None:
    """Queue flags and arguments against the queue's type, and arguments against each other."""
    for loc, vhost in vhosts_of(spec):
        for i, queue in enumerate(vhost.queues):
            _check_queue(vhost, queue, (*loc, "queues", i), findings)


def _check_queue(vhost: VhostSpec, queue: QueueSpec, loc: Loc, findings: Findings) -> None:
    qtype = effective_queue_type(queue, vhost)
    from_vhost = queue.type is None and vhost.default_queue_type is not None
    type_text = f"{qtype.value} queue" + (" (the vhost's default type)" if from_vhost else "")
    if queue.exclusive:
        findings.error(
            (*loc, "exclusive"),
            "exclusive queues cannot be declared in a spec: an exclusive queue belongs to the "
            "connection that declares it and is deleted with it; declare it in the client "
            "(or use a non-exclusive queue with x-single-active-consumer)",
        )
    if qtype is not QueueType.CLASSIC:
        if not queue.durable:
            findings.error(
                (*loc, "durable"),
                f"a {type_text} is always durable: remove `durable: false` or use type: classic",
            )
        if queue.auto_delete:
            findings.error(
                (*loc, "auto_delete"),
                f"a {type_text} cannot be auto-delete: remove `auto_delete: true` or use "
                "type: classic (or x-expires to delete it when unused)",
            )
    args = queue.arguments.as_broker_dict()
    args_loc = (*loc, "arguments")
    for key in args:
        valid = QUEUE_ARGUMENT_TYPES[key]
        if qtype not in valid:
            names = ", ".join(t.value for t in QueueType if t in valid)
            hint = ARGUMENT_TYPE_HINTS.get((key, qtype))
            findings.error(
                (*args_loc, key),
                f"{key} does not apply to a {type_text}; "
                + (hint if hint else f"it is valid for: {names}"),
            )
    overflow = args.get("x-overflow")
    if overflow is not None and qtype not in OVERFLOW_TYPES[overflow]:
        findings.error(
            (*args_loc, "x-overflow"),
            f"x-overflow {overflow} is not supported by a {type_text}; use drop-head or "
            "reject-publish",
        )
    if "x-dead-letter-routing-key" in args and "x-dead-letter-exchange" not in args:
        findings.error(
            (*args_loc, "x-dead-letter-routing-key"),
            "x-dead-letter-routing-key needs x-dead-letter-exchange (the broker refuses the "
            "queue otherwise); use x-dead-letter-exchange: '' to dead-letter through the "
            "default exchange",
        )
    if args.get("x-dead-letter-strategy") == "at-least-once":
        _check_at_least_once(vhost, queue, qtype, args, args_loc, findings)
    _check_delayed_retry(args, args_loc, findings)
    check_unchecked(
        queue.unchecked_arguments,
        _QUEUE_ARGUMENT_KEYS,
        args,
        (*loc, "unchecked_arguments"),
        findings,
        forbidden={"x-queue-type": "set the queue type with `type:` instead of x-queue-type"},
    )


def _check_at_least_once(
    vhost: VhostSpec,
    queue: QueueSpec,
    qtype: QueueType,
    args: dict[str, object],
    args_loc: Loc,
    findings: Findings,
) -> None:
    policy = effective_policy(vhost.policies, queue.name, qtype)
    policy_keys = policy.definition.as_broker_dict() if policy else {}
    overflow = args.get("x-overflow", policy_keys.get("overflow"))
    strategy_loc = (*args_loc, "x-dead-letter-strategy")
    if "x-overflow" in args and overflow != "reject-publish":
        findings.error(
            strategy_loc,
            f"x-dead-letter-strategy at-least-once needs x-overflow reject-publish, not "
            f"{overflow}: with any other overflow the broker falls back to at-most-once",
        )
    elif overflow != "reject-publish":
        findings.warning(
            strategy_loc,
            "x-dead-letter-strategy at-least-once only works with x-overflow reject-publish; "
            "without it the broker silently uses at-most-once: add x-overflow: reject-publish",
        )
    if "x-dead-letter-exchange" not in args and "dead-letter-exchange" not in policy_keys:
        findings.warning(
            strategy_loc,
            "x-dead-letter-strategy has no effect without a dead-letter exchange: "
            "add x-dead-letter-exchange",
        )


def check_exchanges(spec: Spec, findings: Findings) -> None:
    """Plugin arguments on the right exchange type; alternate exchanges that exist."""
    for loc, vhost in vhosts_of(spec):
        declared = {e.name for e in vhost.exchanges}
        for i, exchange in enumerate(vhost.exchanges):
            _check_exchange(exchange, declared, (*loc, "exchanges", i), findings)


def _check_exchange(
    exchange: ExchangeSpec, declared: set[str], loc: Loc, findings: Findings
) -> None:
    if not isinstance(exchange.type, ExchangeType):
        since = added_in(Kind.EXCHANGE_TYPE, exchange.type)
        broker = (
            f"RabbitMQ {format_version(since)} and newer have it built in"
            if since
            else "the broker refuses it unless the plugin that provides it is enabled"
        )
        findings.warning(
            (*loc, "type"),
            f"exchange type {exchange.type!r} is not one rabbitry knows: it is declared as"
            f" written, and its arguments and the routing keys bound to it go unchecked; {broker}",
        )
    args = exchange.arguments.as_broker_dict()
    if args and exchange.type is not ExchangeType.CONSISTENT_HASH:
        for key in args:
            findings.error(
                (*loc, "arguments", key),
                f"{key} only applies to x-consistent-hash exchanges, this one is {exchange.type}",
            )
    if "hash-header" in args and "hash-property" in args:
        findings.error(
            (*loc, "arguments"),
            "set either hash-header or hash-property, not both: the exchange hashes one value",
        )
    alternate = exchange.alternate_exchange
    if alternate is not None and not exchange_exists(alternate, declared):
        # a warning: the broker takes it (another stack, or a client, may declare it)
        findings.warning(
            (*loc, "alternate_exchange"),
            f"alternate exchange {alternate!r} is not declared in this vhost: unroutable "
            "messages are dropped until it exists; declare it under `exchanges`",
        )
    if alternate == exchange.name:
        findings.error((*loc, "alternate_exchange"), "an exchange cannot be its own alternate")
    check_unchecked(
        exchange.unchecked_arguments,
        _EXCHANGE_ARGUMENT_KEYS,
        args,
        (*loc, "unchecked_arguments"),
        findings,
        forbidden={
            "alternate-exchange": "set the alternate exchange with `alternate_exchange:`",
        },
    )


def check_bindings(spec: Spec, findings: Findings) -> None:
    """Both ends of every binding exist; routing keys fit the source exchange."""
    for loc, vhost in vhosts_of(spec):
        exchanges = {e.name: e for e in vhost.exchanges}
        queues = {q.name for q in vhost.queues}
        # Sharding declares exchanges (and shard queues) too: binding into them is legitimate.
        names = set(exchanges) | {s.name for s in vhost.sharded_exchanges}
        names |= {m.name for m in vhost.modulus_sharding}
        for sharded in vhost.sharded_exchanges:
            try:
                queues |= {q.name for q in shard_queue_specs(sharded)}
            except (KeyError, IndexError, ValueError):
                continue  # a bad queue_name template: the sharding checks report where
        for i, binding in enumerate(vhost.bindings):
            bloc = (*loc, "bindings", i)
            if binding.source == "":
                findings.error(
                    (*bloc, "source"),
                    "the default exchange cannot be bound: it already routes to every queue "
                    "by queue name",
                )
            elif not exchange_exists(binding.source, names):
                findings.error(
                    (*bloc, "source"),
                    f"source exchange {binding.source!r} is not declared in this vhost; "
                    "declare it under `exchanges`",
                )
            if binding.destination_type is DestinationType.QUEUE:
                if binding.destination not in queues:
                    findings.error(
                        (*bloc, "destination"),
                        f"destination queue {binding.destination!r} is not declared in this "
                        "vhost; declare it under `queues` (or set destination_type: exchange)",
                    )
            elif binding.destination == "" or not exchange_exists(binding.destination, names):
                findings.error(
                    (*bloc, "destination"),
                    f"destination exchange {binding.destination!r} is not declared in this "
                    "vhost; declare it under `exchanges`",
                )
            source = exchanges.get(binding.source)
            if source is not None:
                _check_binding_for(source, binding.routing_key, binding.arguments, bloc, findings)


def _check_binding_for(
    source: ExchangeSpec,
    routing_key: str,
    arguments: dict[str, object],
    loc: Loc,
    findings: Findings,
) -> None:
    if source.type is ExchangeType.CONSISTENT_HASH and not routing_key.isdigit():
        findings.error(
            (*loc, "routing_key"),
            f"bindings from x-consistent-hash exchange {source.name!r} take a weight as "
            f"routing key (a positive integer such as '1'), got {routing_key!r}",
        )
    x_match = arguments.get("x-match")
    if x_match is not None and x_match not in _X_MATCH:
        findings.error(
            (*loc, "arguments", "x-match"),
            f"x-match must be one of {', '.join(sorted(_X_MATCH))}, got {x_match!r}",
        )
    if source.type is ExchangeType.HEADERS and routing_key:
        findings.warning(
            (*loc, "routing_key"),
            f"headers exchange {source.name!r} ignores routing keys; match on `arguments`",
        )


def check_dead_letter_exchanges(spec: Spec, findings: Findings) -> None:
    """A dead-letter exchange that does not exist drops every dead-lettered message."""
    for loc, vhost in vhosts_of(spec):
        declared = {e.name for e in vhost.exchanges}
        for i, queue in enumerate(vhost.queues):
            dlx = queue.arguments.dead_letter_exchange
            if dlx is not None and not exchange_exists(dlx, declared):
                # a warning: the broker takes it (another stack, or a client, may declare it)
                findings.warning(
                    (*loc, "queues", i, "arguments", "x-dead-letter-exchange"),
                    f"dead-letter exchange {dlx!r} is not declared in this vhost: dead-lettered "
                    "messages are dropped until it exists; declare it under `exchanges`",
                )


def check_access(spec: Spec, findings: Findings) -> None:
    """Permission regexes compile; users and topic exchanges they name exist."""
    users = {u.name for u in spec.users}
    for loc, vhost in vhosts_of(spec):
        exchanges = {e.name: e for e in vhost.exchanges}
        for i, perm in enumerate(vhost.permissions):
            ploc = (*loc, "permissions", i)
            for key in ("configure", "write", "read"):
                check_pattern(getattr(perm, key), (*ploc, key), findings)
            if perm.user not in users:
                findings.warning(
                    (*ploc, "user"),
                    f"user {perm.user!r} is not declared under `users`; it must already "
                    "exist on the broker",
                )
        for i, tperm in enumerate(vhost.topic_permissions):
            ploc = (*loc, "topic_permissions", i)
            if tperm.user not in users:
                findings.warning(
                    (*ploc, "user"),
                    f"user {tperm.user!r} is not declared under `users`; it must already "
                    "exist on the broker",
                )
            exchange = exchanges.get(tperm.exchange)
            if exchange is None and not is_builtin_exchange(tperm.exchange):
                findings.warning(
                    (*ploc, "exchange"),
                    f"exchange {tperm.exchange!r} is not declared in this vhost",
                )
            elif exchange is not None and exchange.type is not ExchangeType.TOPIC:
                findings.warning(
                    (*ploc, "exchange"),
                    f"topic permissions only apply to topic exchanges; {tperm.exchange!r} "
                    f"is {exchange.type}",
                )


def check_users(spec: Spec, findings: Findings) -> None:
    """A hashing algorithm only describes a given hash."""
    for i, user in enumerate(spec.users):
        if user.hashing_algorithm is not None and user.password_hash is None:
            findings.warning(
                ("users", i, "hashing_algorithm"),
                "hashing_algorithm only applies to password_hash; the broker hashes a plain "
                "password with its own default",
            )


def _check_delayed_retry(args: dict[str, object], loc: Loc, findings: Findings) -> None:
    """The broker turns delayed retry off, silently, without a minimum delay; a maximum below
    the minimum is refused (rabbit_quorum_queue.erl, 4.3)."""
    kind = args.get("x-delayed-retry-type")
    low, high = args.get("x-delayed-retry-min"), args.get("x-delayed-retry-max")
    if kind not in (None, "disabled") and low is None:
        findings.error(
            (*loc, "x-delayed-retry-type"),
            f"x-delayed-retry-type {kind} does nothing without x-delayed-retry-min: add it",
        )
    if isinstance(low, int) and isinstance(high, int) and high < low:
        findings.error(
            (*loc, "x-delayed-retry-max"),
            "x-delayed-retry-max is below x-delayed-retry-min: raise it or leave it out",
        )
