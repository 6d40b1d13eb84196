"""Checks of policies: patterns, definitions, references, and how they meet queues.

Only one policy applies to an object: the matching one with the highest priority. A queue
argument for the same key then either wins silently or combines with it (the smaller value),
which is rarely what the author of either meant, so overlaps are reported as warnings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from rabbitry.topology.checks.findings import (
    Findings,
    check_pattern,
    check_unchecked,
    effective_queue_type,
    exchange_exists,
    vhosts_of,
)
from rabbitry.topology.primitives import ApplyTo, QueueType
from rabbitry.topology.spec.arguments import (
    ARGUMENT_WINS_KEYS,
    MIN_RESOLVED_KEYS,
    aliases,
    policy_key_argument,
)
from rabbitry.topology.spec.model import OperatorPolicySpec, PolicySpec, Spec
from rabbitry.topology.spec.source_map import Loc

__all__ = ["check_policies", "check_policy_overlaps", "effective_policy", "matching_policies"]


def check_policies(spec: Spec, findings: Findings) -> None:
    """Patterns compile, definitions are not empty, references exist, mirroring is flagged."""
    versioned = spec.broker is not None and spec.broker.version is not None
    for loc, vhost in vhosts_of(spec):
        declared = {e.name for e in vhost.exchanges}
        upstreams = {p.name for p in vhost.parameters if p.component == "federation-upstream"}
        sets = {p.name for p in vhost.parameters if p.component == "federation-upstream-set"}
        if vhost.federation is not None:
            upstreams |= {u.name for u in vhost.federation.upstreams}
            sets |= {u.name for u in vhost.federation.upstream_sets}
        kinds: list[tuple[str, Sequence[PolicySpec | OperatorPolicySpec]]] = [
            ("policies", vhost.policies),
            ("operator_policies", vhost.operator_policies),
        ]
        for key, policies in kinds:
            for i, policy in enumerate(policies):
                ploc = (*loc, key, i)
                check_pattern(policy.pattern, (*ploc, "pattern"), findings)
                definition = policy.definition.as_broker_dict()
                if not definition and not policy.unchecked_definition:
                    findings.error(
                        (*ploc, "definition"),
                        f"policy {policy.name!r} sets nothing: give it at least one key",
                    )
                dloc = (*ploc, "definition")
                _check_policy_references(definition, declared, upstreams, sets, dloc, findings)
                _check_mirroring(definition, dloc, findings, versioned)
                check_unchecked(
                    policy.unchecked_definition,
                    frozenset(aliases(type(policy.definition))),
                    definition,
                    (*ploc, "unchecked_definition"),
                    findings,
                    forbidden={},
                )


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
        if isinstance(name, str) and not exchange_exists(name, declared):
            # a warning: the broker takes it (another stack, or a client, may declare it)
            findings.warning(
                (*loc, key),
                f"{key} {name!r} is not declared in this vhost: messages sent there are"
                " dropped until it exists; declare it under `exchanges`",
            )
    if "federation-upstream" in definition and "federation-upstream-set" in definition:
        findings.error(loc, "set either federation-upstream or federation-upstream-set, not both")
    upstream = definition.get("federation-upstream")
    if isinstance(upstream, str) and upstream not in upstreams:
        findings.warning(
            (*loc, "federation-upstream"),
            f"federation upstream {upstream!r} is declared neither under `federation.upstreams`"
            " nor under `parameters` in this vhost; the policy does nothing until it exists",
        )
    upstream_set = definition.get("federation-upstream-set")
    if isinstance(upstream_set, str) and upstream_set != "all" and upstream_set not in sets:
        findings.warning(
            (*loc, "federation-upstream-set"),
            f"federation upstream set {upstream_set!r} is declared neither under"
            " `federation.upstream_sets` nor under `parameters` in this vhost ('all' means every"
            " upstream)",
        )


def _check_mirroring(
    definition: dict[str, object], loc: Loc, findings: Findings, versioned: bool
) -> None:
    ha_keys = [k for k in definition if k.startswith("ha-")]
    if not ha_keys:
        return
    if not versioned:  # with broker.version, the version table says whether it is refused
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


_LITERAL = re.compile(r"\^((?:[^\\.^$*+?{}\[\]|()]|\\[^A-Za-z0-9])*)\$")
r"""A pattern that matches one name only: ``^orders\.work$`` (escaped punctuation allowed)."""


class _PatternIndex:
    """Policy patterns ready to match many names: a pattern that names one object exactly is a
    dict entry, the others are compiled once. Matching every object of a large vhost against
    every pattern with ``re.search`` was the slowest part of validating it."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.exact: dict[str, list[int]] = {}
        self.searched: list[tuple[int, re.Pattern[str]]] = []
        for index, pattern in enumerate(patterns):
            literal = _LITERAL.fullmatch(pattern)
            if literal is not None:
                name = re.sub(r"\\(.)", r"\1", literal.group(1))
                self.exact.setdefault(name, []).append(index)
                continue
            try:
                self.searched.append((index, re.compile(pattern)))
            except re.error:
                continue  # reported by the policy checks; it matches nothing here

    def matches(self, name: str) -> list[int]:
        found = [i for i, compiled in self.searched if compiled.search(name) is not None]
        exact = self.exact.get(name)
        return sorted(found + exact) if exact else found


@functools.lru_cache(maxsize=64)
def _pattern_index(patterns: tuple[str, ...]) -> _PatternIndex:
    return _PatternIndex(patterns)


_INDEX_OF: dict[int, tuple[Sequence[PolicySpec], _PatternIndex]] = {}


def _index_for(policies: Sequence[PolicySpec]) -> _PatternIndex:
    """The pattern index of one vhost's policies, found by the list itself: asked once per
    object of the vhost, so it must not walk the policies each time (that made the checks
    grow with objects x policies)."""
    found = _INDEX_OF.get(id(policies))
    if found is not None and found[0] is policies:
        return found[1]
    index = _pattern_index(tuple(p.pattern for p in policies))
    if len(_INDEX_OF) >= 64:
        _INDEX_OF.clear()
    _INDEX_OF[id(policies)] = (policies, index)
    return index


def matching_policies(
    policies: Sequence[PolicySpec], name: str, qtype: QueueType | None
) -> list[tuple[int, PolicySpec]]:
    """The policies whose pattern matches ``name`` and that apply to its kind, in spec order."""
    index = _index_for(policies)
    return [(i, policies[i]) for i in index.matches(name) if _applies_to(policies[i], qtype)]


def effective_policy(
    policies: Sequence[PolicySpec], name: str, qtype: QueueType | None
) -> PolicySpec | None:
    """The one policy the broker applies: the matching policy with the highest priority."""
    return _effective(matching_policies(policies, name, qtype))


def _effective(matching: list[tuple[int, PolicySpec]]) -> PolicySpec | None:
    return max(matching, key=lambda m: m[1].priority)[1] if matching else None


def check_policy_overlaps(spec: Spec, findings: Findings) -> None:
    """Queue arguments that shadow a policy, and objects two policies fight over."""
    for loc, vhost in vhosts_of(spec):
        for i, queue in enumerate(vhost.queues):
            qtype = effective_queue_type(queue, vhost)
            matching = matching_policies(vhost.policies, queue.name, qtype)
            if not matching:  # most objects of a large spec: nothing to compare
                continue
            qloc = (*loc, "queues", i)
            _check_shadowed(
                _effective(matching), queue.name, queue.arguments.as_broker_dict(), qloc, findings
            )
            _check_ties(matching, queue.name, "queue", qloc, findings)
        for i, exchange in enumerate(vhost.exchanges):
            matching = matching_policies(vhost.policies, exchange.name, None)
            if not matching:
                continue
            eloc = (*loc, "exchanges", i)
            if exchange.alternate_exchange is not None:
                policy = _effective(matching)
                if policy is not None and policy.definition.alternate_exchange is not None:
                    findings.warning(
                        (*eloc, "alternate_exchange"),
                        f"policy {policy.name!r} also sets alternate-exchange for exchange "
                        f"{exchange.name!r}; the exchange's own alternate_exchange wins and the "
                        "policy's value is ignored: keep one of them (policies can be changed "
                        "without re-declaring the exchange)",
                    )
            _check_ties(matching, exchange.name, "exchange", eloc, findings)


def _check_shadowed(
    policy: PolicySpec | None,
    name: str,
    args: dict[str, object],
    qloc: Loc,
    findings: Findings,
) -> None:
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
    matching: list[tuple[int, PolicySpec]], name: str, kind: str, loc: Loc, findings: Findings
) -> None:
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
