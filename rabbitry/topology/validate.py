"""Checks that need the whole spec: names, references, queue types and policy overlaps.

The model checks the shape of each object; these checks compare objects with each other and
with what the broker will do, which is where most silent mistakes hide (a dead-letter exchange
that does not exist drops messages; a queue argument overrides a policy without a word). Every
check runs and every problem is reported, so one ``rabbitry validate`` shows them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from rabbitry.errors import SpecProblem
from rabbitry.topology.arguments import (
    ARGUMENT_WINS_KEYS,
    MIN_RESOLVED_KEYS,
    OVERFLOW_TYPES,
    QUEUE_ARGUMENT_TYPES,
    ExchangeArguments,
    QueueArguments,
    aliases,
    policy_key_argument,
)
from rabbitry.topology.primitives import (
    ApplyTo,
    DestinationType,
    ExchangeType,
    QueueType,
    canonical_json,
)
from rabbitry.topology.problems import by_position
from rabbitry.topology.source_map import Loc, format_path
from rabbitry.topology.spec import (
    ExchangeSpec,
    OperatorPolicySpec,
    PolicySpec,
    QueueSpec,
    Spec,
    VhostSpec,
)

__all__ = ["effective_queue_type", "is_builtin_exchange", "validate"]

ERROR = "error"
WARNING = "warning"

_QUEUE_ARGUMENT_KEYS = frozenset(aliases(QueueArguments))
_EXCHANGE_ARGUMENT_KEYS = frozenset(aliases(ExchangeArguments))
_X_MATCH = frozenset({"all", "any", "all-with-x", "any-with-x"})

T = TypeVar("T")


@dataclass
class Findings:
    """Problems collected by the checks, by location in the document."""

    items: list[tuple[Loc, str, str]] = field(default_factory=list)

    def error(self, loc: Loc, message: str) -> None:
        self.items.append((loc, message, ERROR))

    def warning(self, loc: Loc, message: str) -> None:
        self.items.append((loc, message, WARNING))


Check = Callable[[Spec, Findings], None]


def validate(spec: Spec) -> list[SpecProblem]:
    """Every semantic problem of ``spec`` (errors and warnings), in file order when known."""
    findings = Findings()
    for check in CHECKS:
        check(spec, findings)
    source = spec.source
    problems = [
        source.problem(loc, message, severity)
        if source is not None
        else SpecProblem(message, path=format_path(loc), severity=severity)
        for loc, message, severity in findings.items
    ]
    return sorted(problems, key=by_position)


def is_builtin_exchange(name: str) -> bool:
    """The default exchange ('') and the amq.* exchanges exist in every vhost."""
    return name == "" or name.startswith("amq.")


def effective_queue_type(queue: QueueSpec, vhost: VhostSpec) -> QueueType:
    """The type the broker gives the queue: its own, else the vhost default, else classic."""
    return queue.type or vhost.default_queue_type or QueueType.CLASSIC


def _vhosts(spec: Spec) -> Iterator[tuple[Loc, VhostSpec]]:
    for index, vhost in enumerate(spec.vhosts):
        yield ("vhosts", index), vhost


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
    for loc, vhost in _vhosts(spec):
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
                canonical_json(b.arguments),
            ),
            lambda b: f"binding {b.source!r} -> {b.destination!r} [{b.routing_key}]",
        )


def check_reserved_names(spec: Spec, findings: Findings) -> None:
    """amq.* names belong to the broker: declaring one is refused."""
    for loc, vhost in _vhosts(spec):
        for i, exchange in enumerate(vhost.exchanges):
            if exchange.name.startswith("amq."):
                findings.error(
                    (*loc, "exchanges", i, "name"),
                    f"exchange names starting with 'amq.' are reserved for the broker's own "
                    f"exchanges; rename {exchange.name!r} (bindings may use amq.* as a source)",
                )
        for i, queue in enumerate(vhost.queues):
            if queue.name.startswith("amq."):
                findings.error(
                    (*loc, "queues", i, "name"),
                    f"queue names starting with 'amq.' are reserved for the broker; "
                    f"rename {queue.name!r}",
                )


def check_queues(spec: Spec, findings: Findings) -> None:
    """Queue flags and arguments against the queue's type, and arguments against each other."""
    for loc, vhost in _vhosts(spec):
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
            findings.error(
                (*args_loc, key),
                f"{key} does not apply to a {type_text}; it is valid for: {names}",
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
    _check_unchecked(
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
    policy = _effective_policy(vhost.policies, queue.name, qtype)
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


def _check_unchecked(
    unchecked: dict[str, object],
    known: frozenset[str],
    checked: dict[str, object],
    loc: Loc,
    findings: Findings,
    forbidden: dict[str, str],
) -> None:
    for key in unchecked:
        if key in forbidden:
            findings.error((*loc, key), forbidden[key])
        elif key in checked:
            findings.error(
                (*loc, key),
                f"{key} is set both in the checked keys and here; keep only the checked one",
            )
        elif key in known:
            findings.warning(
                (*loc, key),
                f"{key} is a key rabbitry checks: move it out of the unchecked keys so its "
                "value is validated (and durations and sizes accept units)",
            )


def check_exchanges(spec: Spec, findings: Findings) -> None:
    """Plugin arguments on the right exchange type; alternate exchanges that exist."""
    for loc, vhost in _vhosts(spec):
        declared = {e.name for e in vhost.exchanges}
        for i, exchange in enumerate(vhost.exchanges):
            _check_exchange(exchange, declared, (*loc, "exchanges", i), findings)


def _check_exchange(
    exchange: ExchangeSpec, declared: set[str], loc: Loc, findings: Findings
) -> None:
    args = exchange.arguments.as_broker_dict()
    if args and exchange.type is not ExchangeType.CONSISTENT_HASH:
        for key in args:
            findings.error(
                (*loc, "arguments", key),
                f"{key} only applies to x-consistent-hash exchanges, this one is "
                f"{exchange.type.value}",
            )
    if "hash-header" in args and "hash-property" in args:
        findings.error(
            (*loc, "arguments"),
            "set either hash-header or hash-property, not both: the exchange hashes one value",
        )
    alternate = exchange.alternate_exchange
    if alternate is not None and not _exchange_exists(alternate, declared):
        findings.error(
            (*loc, "alternate_exchange"),
            f"alternate exchange {alternate!r} is not declared in this vhost: unroutable "
            "messages would be dropped; declare it under `exchanges`",
        )
    if alternate == exchange.name:
        findings.error((*loc, "alternate_exchange"), "an exchange cannot be its own alternate")
    _check_unchecked(
        exchange.unchecked_arguments,
        _EXCHANGE_ARGUMENT_KEYS,
        args,
        (*loc, "unchecked_arguments"),
        findings,
        forbidden={
            "alternate-exchange": "set the alternate exchange with `alternate_exchange:`",
        },
    )


def _exchange_exists(name: str, declared: set[str]) -> bool:
    return name in declared or is_builtin_exchange(name)


def check_bindings(spec: Spec, findings: Findings) -> None:
    """Both ends of every binding exist; routing keys fit the source exchange."""
    for loc, vhost in _vhosts(spec):
        exchanges = {e.name: e for e in vhost.exchanges}
        queues = {q.name for q in vhost.queues}
        for i, binding in enumerate(vhost.bindings):
            bloc = (*loc, "bindings", i)
            if binding.source == "":
                findings.error(
                    (*bloc, "source"),
                    "the default exchange cannot be bound: it already routes to every queue "
                    "by queue name",
                )
            elif not _exchange_exists(binding.source, set(exchanges)):
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
            elif binding.destination == "" or not _exchange_exists(
                binding.destination, set(exchanges)
            ):
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
    for loc, vhost in _vhosts(spec):
        declared = {e.name for e in vhost.exchanges}
        for i, queue in enumerate(vhost.queues):
            dlx = queue.arguments.dead_letter_exchange
            if dlx is not None and not _exchange_exists(dlx, declared):
                findings.error(
                    (*loc, "queues", i, "arguments", "x-dead-letter-exchange"),
                    f"dead-letter exchange {dlx!r} is not declared in this vhost: dead-lettered "
                    "messages would be dropped; declare it under `exchanges`",
                )


def check_policies(spec: Spec, findings: Findings) -> None:
    """Patterns compile, definitions are not empty, references exist, mirroring is flagged."""
    for loc, vhost in _vhosts(spec):
        declared = {e.name for e in vhost.exchanges}
        upstreams = {p.name for p in vhost.parameters if p.component == "federation-upstream"}
        sets = {p.name for p in vhost.parameters if p.component == "federation-upstream-set"}
        kinds: list[tuple[str, Sequence[PolicySpec | OperatorPolicySpec]]] = [
            ("policies", vhost.policies),
            ("operator_policies", vhost.operator_policies),
        ]
        for key, policies in kinds:
            for i, policy in enumerate(policies):
                ploc = (*loc, key, i)
                _check_pattern(policy.pattern, (*ploc, "pattern"), findings)
                definition = policy.definition.as_broker_dict()
                if not definition and not policy.unchecked_definition:
                    findings.error(
                        (*ploc, "definition"),
                        f"policy {policy.name!r} sets nothing: give it at least one key",
                    )
                dloc = (*ploc, "definition")
                _check_policy_references(definition, declared, upstreams, sets, dloc, findings)
                _check_mirroring(definition, dloc, findings)
                _check_unchecked(
                    policy.unchecked_definition,
                    frozenset(aliases(type(policy.definition))),
                    definition,
                    (*ploc, "unchecked_definition"),
                    findings,
                    forbidden={},
                )


def _check_pattern(pattern: str, loc: Loc, findings: Findings) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        findings.error(loc, f"not a valid regular expression: {exc}")


def _check_policy_references(
    definition: dict[str, object],
    declared: set[str],
    upstreams: set[str],
    sets: set[str],
    loc: Loc,
    findings: Findings,
) -> None:
    for key in ("dead-letter-exchange", "alternate-exchange"):
        name = definition.get(key)
        if isinstance(name, str) and not _exchange_exists(name, declared):
            findings.error(
                (*loc, key),
                f"{key} {name!r} is not declared in this vhost; declare it under `exchanges`",
            )
    if "federation-upstream" in definition and "federation-upstream-set" in definition:
        findings.error(loc, "set either federation-upstream or federation-upstream-set, not both")
    upstream = definition.get("federation-upstream")
    if isinstance(upstream, str) and upstream not in upstreams:
        findings.warning(
            (*loc, "federation-upstream"),
            f"federation upstream {upstream!r} is not declared under `parameters` in this "
            "vhost; the policy does nothing until it exists",
        )
    upstream_set = definition.get("federation-upstream-set")
    if isinstance(upstream_set, str) and upstream_set != "all" and upstream_set not in sets:
        findings.warning(
            (*loc, "federation-upstream-set"),
            f"federation upstream set {upstream_set!r} is not declared under `parameters` in "
            "this vhost ('all' means every upstream)",
        )


def _check_mirroring(definition: dict[str, object], loc: Loc, findings: Findings) -> None:
    ha_keys = [k for k in definition if k.startswith("ha-")]
    if not ha_keys:
        return
    findings.warning(
        (*loc, ha_keys[0]),
        "classic queue mirroring (ha-*) is deprecated and removed in RabbitMQ 4.0; "
        "use quorum queues for replication",
    )
    mode, params = definition.get("ha-mode"), definition.get("ha-params")
    if mode is None:
        findings.error((*loc, ha_keys[0]), "ha-* keys need ha-mode (all, exactly or nodes)")
    elif mode == "exactly" and not isinstance(params, int):
        findings.error((*loc, "ha-mode"), "ha-mode exactly needs ha-params: <replica count>")
    elif mode == "nodes" and not isinstance(params, list):
        findings.error((*loc, "ha-mode"), "ha-mode nodes needs ha-params: [<node name>, ...]")
    elif mode == "all" and params is not None:
        findings.error((*loc, "ha-params"), "ha-mode all takes no ha-params")


def check_access(spec: Spec, findings: Findings) -> None:
    """Permission regexes compile; users and topic exchanges they name exist."""
    users = {u.name for u in spec.users}
    for loc, vhost in _vhosts(spec):
        exchanges = {e.name: e for e in vhost.exchanges}
        for i, perm in enumerate(vhost.permissions):
            ploc = (*loc, "permissions", i)
            for key in ("configure", "write", "read"):
                _check_pattern(getattr(perm, key), (*ploc, key), findings)
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
                    f"is {exchange.type.value}",
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


def _applies_to(policy: PolicySpec | OperatorPolicySpec, qtype: QueueType | None) -> bool:
    """Whether the policy's apply_to covers a queue of ``qtype`` (None: an exchange)."""
    apply_to = policy.apply_to
    if qtype is None:
        return apply_to in (ApplyTo.ALL, ApplyTo.EXCHANGES)
    by_type = {
        ApplyTo.CLASSIC_QUEUES: QueueType.CLASSIC,
        ApplyTo.QUORUM_QUEUES: QueueType.QUORUM,
        ApplyTo.STREAMS: QueueType.STREAM,
    }
    if apply_to in by_type:
        return by_type[apply_to] is qtype
    return apply_to in (ApplyTo.ALL, ApplyTo.QUEUES)


def _matching(
    policies: Iterable[PolicySpec], name: str, qtype: QueueType | None
) -> list[tuple[int, PolicySpec]]:
    out = []
    for index, policy in enumerate(policies):
        try:
            matches = re.search(policy.pattern, name) is not None
        except re.error:
            continue
        if matches and _applies_to(policy, qtype):
            out.append((index, policy))
    return out


def _effective_policy(
    policies: Iterable[PolicySpec], name: str, qtype: QueueType | None
) -> PolicySpec | None:
    """The one policy the broker applies: the matching policy with the highest priority."""
    matching = _matching(policies, name, qtype)
    return max(matching, key=lambda m: m[1].priority)[1] if matching else None


def check_policy_overlaps(spec: Spec, findings: Findings) -> None:
    """Queue arguments that shadow a policy, and objects two policies fight over."""
    for loc, vhost in _vhosts(spec):
        for i, queue in enumerate(vhost.queues):
            qtype = effective_queue_type(queue, vhost)
            qloc = (*loc, "queues", i)
            _check_shadowed(
                vhost, queue.name, qtype, queue.arguments.as_broker_dict(), qloc, findings
            )
            _check_ties(vhost, queue.name, qtype, "queue", qloc, findings)
        for i, exchange in enumerate(vhost.exchanges):
            eloc = (*loc, "exchanges", i)
            if exchange.alternate_exchange is not None:
                policy = _effective_policy(vhost.policies, exchange.name, None)
                if policy is not None and policy.definition.alternate_exchange is not None:
                    findings.warning(
                        (*eloc, "alternate_exchange"),
                        f"policy {policy.name!r} also sets alternate-exchange for exchange "
                        f"{exchange.name!r}; the exchange's own alternate_exchange wins and the "
                        "policy's value is ignored: keep one of them (policies can be changed "
                        "without re-declaring the exchange)",
                    )
            _check_ties(vhost, exchange.name, None, "exchange", eloc, findings)


def _check_shadowed(
    vhost: VhostSpec,
    name: str,
    qtype: QueueType,
    args: dict[str, object],
    qloc: Loc,
    findings: Findings,
) -> None:
    policy = _effective_policy(vhost.policies, name, qtype)
    if policy is None:
        return
    for key, value in policy.definition.as_broker_dict().items():
        argument = policy_key_argument(key)
        if argument is None or argument not in args:
            continue
        if key in MIN_RESOLVED_KEYS:
            outcome = "the broker applies the smaller of the two values"
        elif key in ARGUMENT_WINS_KEYS:
            outcome = "the queue argument wins and the policy's value is silently ignored"
        else:
            outcome = "the queue argument takes precedence over the policy"
        findings.warning(
            (*qloc, "arguments", argument),
            f"policy {policy.name!r} sets {key}: {value!r} for queue {name!r}, which also "
            f"sets {argument}: {args[argument]!r}; {outcome}. A queue argument cannot change "
            "without deleting the queue: prefer the policy and drop the argument",
        )


def _check_ties(
    vhost: VhostSpec, name: str, qtype: QueueType | None, kind: str, loc: Loc, findings: Findings
) -> None:
    matching = _matching(vhost.policies, name, qtype)
    if len(matching) < 2:
        return
    top = max(p.priority for _, p in matching)
    tied = [p.name for _, p in matching if p.priority == top]
    if len(tied) > 1:
        findings.warning(
            (*loc, "name"),
            f"policies {', '.join(map(repr, tied))} all match {kind} {name!r} with priority "
            f"{top}; the broker applies only one of them, unpredictably: give them different "
            "priorities or non-overlapping patterns",
        )


CHECKS: tuple[Check, ...] = (
    check_unique_names,
    check_reserved_names,
    check_queues,
    check_exchanges,
    check_bindings,
    check_dead_letter_exchanges,
    check_policies,
    check_access,
    check_users,
    check_policy_overlaps,
)
"""Every check, in order; later issues append pattern checks (delays, retries, sharding)."""
