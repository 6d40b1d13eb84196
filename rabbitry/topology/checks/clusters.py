"""Checks of sharding and federation: counts, names, references and what the broker ignores."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from rabbitry.errors import RabbitryError
from rabbitry.topology.checks.findings import Findings, check_pattern, each_named, vhosts_of
from rabbitry.topology.checks.patterns import check_broker_retry
from rabbitry.topology.patterns.federation import ALL_UPSTREAMS, policy_name
from rabbitry.topology.patterns.retries import VIA_BROKER, VIA_QUEUES
from rabbitry.topology.patterns.sharding import (
    modulus_policy_name,
    shard_queue_name,
    shard_queue_specs,
)
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.model import (
    FederationPolicySpec,
    FederationSpec,
    ShardedExchangeSpec,
    Spec,
    VhostSpec,
)
from rabbitry.topology.spec.source_map import Loc
from rabbitry.uri import mask_with

__all__ = ["check_federation", "check_sharding", "check_sharding_and_federation"]

QUORUM_ONLY = ("x-quorum-initial-group-size", "x-delivery-limit", "x-dead-letter-strategy")


def check_sharding_and_federation(spec: Spec, findings: Findings) -> None:
    """Both checks, registered as one in ``validate.CHECKS``."""
    check_sharding(spec, findings)
    check_federation(spec, findings)


def check_sharding(spec: Spec, findings: Findings) -> None:
    for vloc, vhost in vhosts_of(spec):
        exchanges = {e.name for e in vhost.exchanges}
        queues = {q.name for q in vhost.queues}
        seen_exchanges: set[str] = set()
        seen_queues: set[str] = set()
        for index, sharded in enumerate(vhost.sharded_exchanges):
            loc = (*vloc, "sharded_exchanges", index)
            _check_exchange_name(sharded.name, exchanges, seen_exchanges, (*loc, "name"), findings)
            if (sharded.shards is None) == (sharded.weights is None):
                findings.error(
                    loc, "give `shards` (a count) or `weights` (one per shard), not both"
                )
                continue
            if sharded.hash_header is not None and sharded.hash_property is not None:
                findings.error(
                    (*loc, "hash_property"),
                    "hash one thing: `hash_header` or `hash_property`, not both",
                )
            try:
                names = [shard_queue_name(sharded, i) for i in range(2)]
            except (KeyError, IndexError, ValueError) as exc:
                findings.error(
                    (*loc, "queue_name"),
                    f"queue_name may use {{exchange}} and {{index}} only ({exc!r})",
                )
                continue
            if names[0] == names[1]:
                findings.error(
                    (*loc, "queue_name"), "queue_name must contain {index}: shards need own names"
                )
                continue
            for shard in (q.name for q in shard_queue_specs(sharded)):
                if shard in queues or shard in seen_queues:
                    findings.error(
                        (*loc, "queue_name"),
                        f"shard queue {shard!r} is also declared elsewhere in this vhost",
                    )
                seen_queues.add(shard)
            _check_template(sharded, vhost, loc, findings)
        for index, modulus in enumerate(vhost.modulus_sharding):
            loc = (*vloc, "modulus_sharding", index)
            _check_exchange_name(modulus.name, exchanges, seen_exchanges, (*loc, "name"), findings)
            if modulus_policy_name(modulus) in {p.name for p in vhost.policies}:
                findings.error(
                    (*loc, "policy"),
                    f"policy {modulus_policy_name(modulus)!r} is also declared in `policies`",
                )


def _check_exchange_name(
    name: str, declared: set[str], seen: set[str], loc: Loc, findings: Findings
) -> None:
    if name in declared or name in seen:
        findings.error(
            loc,
            f"exchange {name!r} is declared by sharding and elsewhere in this vhost: sharding"
            " declares its exchange itself",
        )
    seen.add(name)


def _check_template(
    sharded: ShardedExchangeSpec, vhost: VhostSpec, loc: Loc, findings: Findings
) -> None:
    template = sharded.queue
    tloc = (*loc, "queue")
    qtype = template.type or vhost.default_queue_type or QueueType.CLASSIC
    if qtype is not QueueType.QUORUM:
        for key in QUORUM_ONLY:
            if key in template.arguments.as_broker_dict():
                findings.error(
                    (*tloc, "arguments", key), f"{key} applies to quorum queues; shards are {qtype}"
                )
        if template.delivery_limit is not None:
            findings.error(
                (*tloc, "delivery_limit"), f"delivery_limit applies to quorum queues, not {qtype}"
            )
    if template.retry is None:
        return
    if qtype is QueueType.STREAM:
        findings.error((*tloc, "retry"), "streams are not consumed with acks: they cannot retry")
    if template.parking is False:
        findings.error((*tloc, "parking"), "retrying shards need a parking lot")
    via = template.retry.via
    if via == VIA_BROKER:
        # every shard is declared from the template: the first stands for all
        check_broker_retry(shard_queue_specs(sharded)[0], qtype, tloc, findings)
    elif via != VIA_QUEUES and via not in {d.name for d in vhost.delays}:
        findings.error(
            (*tloc, "retry", "via"),
            f"retry via {via!r}: no such delay in this vhost; use `queues` or a `delays` name",
        )


def check_federation(spec: Spec, findings: Findings) -> None:
    for vloc, vhost in vhosts_of(spec):
        if vhost.federation is not None:
            _check_federation(vhost.federation, vhost, (*vloc, "federation"), findings)


def _check_federation(
    federation: FederationSpec, vhost: VhostSpec, loc: Loc, findings: Findings
) -> None:
    upstreams = _check_upstreams(federation, loc, findings)
    sets = _check_upstream_sets(federation, upstreams, loc, findings)
    _check_federation_policies(federation, vhost, upstreams, sets, loc, findings)


def _check_upstreams(federation: FederationSpec, loc: Loc, findings: Findings) -> set[str]:
    """Each upstream once, with URIs the plugin takes; the upstreams' names."""
    for uloc, upstream in each_named(
        federation.upstreams, (*loc, "upstreams"), "upstream", findings
    ):
        uris = [upstream.uri] if isinstance(upstream.uri, str) else upstream.uri
        if not uris:
            findings.error((*uloc, "uri"), "an upstream needs at least one URI")
        for uri in uris:
            _check_upstream_uri(uri, upstream.password is not None, (*uloc, "uri"), findings)
        if upstream.queue_type is not None:
            findings.warning(
                (*uloc, "queue_type"),
                "queue_type needs RabbitMQ 3.13 or newer: older brokers refuse the upstream",
            )
    return {upstream.name for upstream in federation.upstreams}


def _check_upstream_uri(uri: str, with_password: bool, loc: Loc, findings: Findings) -> None:
    try:
        parts = urlsplit(uri)
        scheme, username = parts.scheme, parts.username
    except ValueError as exc:
        findings.error(loc, f"not a URI: {mask_with(str(exc), uri)}")
        return
    if scheme not in ("amqp", "amqps"):
        findings.error(loc, "an upstream URI starts with amqp:// or amqps://")
    if with_password and not username:
        findings.error(loc, "with `password`, the URI names the user: amqp://USER@host:5672/%2F")


def _check_upstream_sets(
    federation: FederationSpec, upstreams: set[str], loc: Loc, findings: Findings
) -> set[str]:
    """Each upstream set once, of declared upstreams; the sets' names."""
    sets = each_named(federation.upstream_sets, (*loc, "upstream_sets"), "upstream set", findings)
    for sloc, upstream_set in sets:
        for m_index, member in enumerate(upstream_set.upstreams):
            name = member if isinstance(member, str) else member.upstream
            if name not in upstreams:
                findings.error(
                    (*sloc, "upstreams", m_index),
                    f"upstream {name!r} is not declared in `federation.upstreams`",
                )
    return {upstream_set.name for upstream_set in federation.upstream_sets}


def _check_federation_policies(
    federation: FederationSpec,
    vhost: VhostSpec,
    upstreams: set[str],
    sets: set[str],
    loc: Loc,
    findings: Findings,
) -> None:
    """The policies federation generates: named once, of declared upstreams and sets, with a
    pattern that matches something and no user policy that would win over them."""
    declared_policies = {p.name for p in vhost.policies}
    generated: set[str] = set()
    for kind in ("exchanges", "queues"):
        objects = (
            {e.name for e in vhost.exchanges} | {s.name for s in vhost.sharded_exchanges}
            if kind == "exchanges"
            else {q.name for q in vhost.queues}
        )
        for index, entry in enumerate(getattr(federation, kind)):
            ploc = (*loc, kind, index)
            name = policy_name(kind, index, entry)
            if name in declared_policies or name in generated:
                findings.error(ploc, f"policy {name!r} is declared twice")
            generated.add(name)
            if entry.upstream is not None and entry.upstream not in upstreams:
                findings.error((*ploc, "upstream"), f"upstream {entry.upstream!r} is not declared")
            if (
                entry.upstream_set is not None
                and entry.upstream_set not in sets
                and entry.upstream_set != ALL_UPSTREAMS
            ):
                findings.error(
                    (*ploc, "upstream_set"), f"upstream set {entry.upstream_set!r} is not declared"
                )
            check_pattern(entry.pattern, (*ploc, "pattern"), findings)
            try:
                matched = [o for o in sorted(objects) if re.search(entry.pattern, o)]
            except (re.error, RabbitryError):
                continue
            if not matched:
                findings.warning(
                    (*ploc, "pattern"),
                    f"federation pattern {entry.pattern!r} matches no {kind[:-1]} of this spec",
                )
            _check_shadowing_policies(entry, kind, matched, vhost, ploc, findings)


def _check_shadowing_policies(
    entry: FederationPolicySpec,
    kind: str,
    matched: list[str],
    vhost: VhostSpec,
    loc: Loc,
    findings: Findings,
) -> None:
    """A user policy of at least the same priority on a federated object wins over
    federation's: only one policy applies to an object."""
    for policy in vhost.policies:
        if policy.priority < entry.priority or policy.apply_to.value not in ("all", kind):
            continue
        try:
            shadowed = [o for o in matched if re.search(policy.pattern, o)]
        except re.error:
            continue
        if shadowed:
            findings.warning(
                (*loc, "priority"),
                f"policy {policy.name!r} also matches {shadowed[0]!r} with priority"
                f" {policy.priority} >= {entry.priority}: only one policy applies to an"
                " object, so it may not be federated (raise `priority`)",
            )
