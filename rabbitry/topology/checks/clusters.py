"""Checks of sharding and federation: counts, names, references and what the broker ignores."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from rabbitry.errors import RabbitryError
from rabbitry.topology.checks.findings import Findings, check_pattern, vhosts_of
from rabbitry.topology.checks.patterns import check_broker_retry
from rabbitry.topology.patterns.federation import ALL_UPSTREAMS, policy_name
from rabbitry.topology.patterns.retries import VIA_BROKER, VIA_QUEUES
from rabbitry.topology.patterns.sharding import (
    modulus_policy_name,
    shard_queue_name,
    shard_queue_specs,
)
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.model import FederationSpec, ShardedExchangeSpec, Spec, VhostSpec
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
    upstreams: set[str] = set()
    for index, upstream in enumerate(federation.upstreams):
        uloc = (*loc, "upstreams", index)
        if upstream.name in upstreams:
            findings.error((*uloc, "name"), f"upstream {upstream.name!r} is declared twice")
        upstreams.add(upstream.name)
        uris = [upstream.uri] if isinstance(upstream.uri, str) else upstream.uri
        if not uris:
            findings.error((*uloc, "uri"), "an upstream needs at least one URI")
        for uri in uris:
            try:
                parts = urlsplit(uri)
                scheme, username = parts.scheme, parts.username
            except ValueError as exc:
                findings.error((*uloc, "uri"), f"not a URI: {mask_with(str(exc), uri)}")
                continue
            if scheme not in ("amqp", "amqps"):
                findings.error((*uloc, "uri"), "an upstream URI starts with amqp:// or amqps://")
            if upstream.password is not None and not username:
                findings.error(
                    (*uloc, "uri"),
                    "with `password`, the URI names the user: amqp://USER@host:5672/%2F",
                )
        if upstream.queue_type is not None:
            findings.warning(
                (*uloc, "queue_type"),
                "queue_type needs RabbitMQ 3.13 or newer: older brokers refuse the upstream",
            )
    sets: set[str] = set()
    for index, upstream_set in enumerate(federation.upstream_sets):
        sloc = (*loc, "upstream_sets", index)
        if upstream_set.name in sets:
            findings.error((*sloc, "name"), f"upstream set {upstream_set.name!r} is declared twice")
        sets.add(upstream_set.name)
        for m_index, member in enumerate(upstream_set.upstreams):
            name = member if isinstance(member, str) else member.upstream
            if name not in upstreams:
                findings.error(
                    (*sloc, "upstreams", m_index),
                    f"upstream {name!r} is not declared in `federation.upstreams`",
                )
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
            for policy in vhost.policies:
                if policy.priority < entry.priority or policy.apply_to.value not in (
                    "all",
                    kind,
                ):
                    continue
                try:
                    shadowed = [o for o in matched if re.search(policy.pattern, o)]
                except re.error:
                    continue
                if shadowed:
                    findings.warning(
                        (*ploc, "priority"),
                        f"policy {policy.name!r} also matches {shadowed[0]!r} with priority"
                        f" {policy.priority} >= {entry.priority}: only one policy applies to an"
                        " object, so it may not be federated (raise `priority`)",
                    )
