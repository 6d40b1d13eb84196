"""Federation: upstreams, upstream sets and federation policies from ``vhosts[].federation``.

An upstream becomes a ``federation-upstream`` parameter (its password percent-encoded into every
URI: the value is a secret the planner and every output mask), a set becomes a
``federation-upstream-set`` parameter, and each ``exchanges`` / ``queues`` entry becomes a policy
that points matching objects at an upstream or a set. ``expected_links`` says which links the
broker should then run, for ``rabbitry status`` to compare with ``/api/federation-links``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rabbitry.topology.patterns.draft import VhostDraft
from rabbitry.topology.primitives import JSON, ApplyTo, Parameter, Policy, Vhost
from rabbitry.topology.spec.model import (
    FederationPolicySpec,
    FederationSpec,
    FederationUpstreamSpec,
    UpstreamSetSpec,
)
from rabbitry.uri import with_password

__all__ = [
    "ALL_UPSTREAMS",
    "FederatedObject",
    "declare_federation",
    "expected_links",
    "policy_name",
    "set_members",
    "upstream_uris",
    "upstream_value",
]

ALL_UPSTREAMS = "all"
"""The implicit upstream set of every upstream in the vhost."""

KINDS = (("exchanges", ApplyTo.EXCHANGES), ("queues", ApplyTo.QUEUES))


def upstream_uris(spec: FederationUpstreamSpec) -> list[str]:
    """The upstream's URIs, with ``password`` put into each (percent-encoded)."""
    password = spec.password.get_secret_value() if spec.password is not None else None
    return with_password(spec.uri, password)


def upstream_value(spec: FederationUpstreamSpec) -> dict[str, JSON]:
    """The ``federation-upstream`` parameter value, in the broker's key names and units."""
    uris = upstream_uris(spec)
    value: dict[str, JSON] = {"uri": uris[0] if len(uris) == 1 else uris}
    if spec.prefetch_count is not None:
        value["prefetch-count"] = spec.prefetch_count
    if spec.reconnect_delay is not None:
        seconds = spec.reconnect_delay / 1000
        value["reconnect-delay"] = int(seconds) if seconds.is_integer() else seconds
    optional: dict[str, JSON] = {
        "ack-mode": spec.ack_mode,
        "trust-user-id": spec.trust_user_id,
        "exchange": spec.exchange,
        "queue": spec.queue,
        "max-hops": spec.max_hops,
        "expires": spec.expires,
        "message-ttl": spec.message_ttl,
        "queue-type": spec.queue_type,
    }
    value.update({k: v for k, v in optional.items() if v is not None})
    return value


def set_value(spec: UpstreamSetSpec) -> list[dict[str, JSON]]:
    members: list[dict[str, JSON]] = []
    for member in spec.upstreams:
        if isinstance(member, str):
            members.append({"upstream": member})
        else:
            members.append(member.model_dump(exclude_none=True))
    return members


def policy_name(kind: str, index: int, spec: FederationPolicySpec) -> str:
    """``federate.exchanges.0`` unless the entry names its policy."""
    return spec.name or f"federate.{kind}.{index}"


def policy_of(kind: str, apply_to: ApplyTo, index: int, spec: FederationPolicySpec) -> Policy:
    definition: dict[str, JSON] = (
        {"federation-upstream": spec.upstream}
        if spec.upstream is not None
        else {"federation-upstream-set": spec.upstream_set}
    )
    return Policy(
        name=policy_name(kind, index, spec),
        pattern=spec.pattern,
        apply_to=apply_to,
        priority=spec.priority,
        definition=definition,
    )


def declare_federation(draft: VhostDraft) -> None:
    federation = draft.spec.federation
    if federation is None:
        return
    for upstream in federation.upstreams:
        draft.parameters.append(
            Parameter(
                component="federation-upstream", name=upstream.name, value=upstream_value(upstream)
            )
        )
    for upstream_set in federation.upstream_sets:
        draft.parameters.append(
            Parameter(
                component="federation-upstream-set",
                name=upstream_set.name,
                value=set_value(upstream_set),
            )
        )
    for kind, apply_to in KINDS:
        for index, spec in enumerate(getattr(federation, kind)):
            draft.policies.append(policy_of(kind, apply_to, index, spec))


def set_members(federation: FederationSpec, name: str) -> list[str]:
    """Upstream names of a set (``all``: every upstream of the vhost)."""
    if name == ALL_UPSTREAMS and not any(s.name == name for s in federation.upstream_sets):
        return [u.name for u in federation.upstreams]
    for upstream_set in federation.upstream_sets:
        if upstream_set.name == name:
            return [m if isinstance(m, str) else m.upstream for m in upstream_set.upstreams]
    return []


@dataclass(frozen=True, order=True)
class FederatedObject:
    """One link the broker should run: a local exchange or queue fed from one upstream."""

    type: str
    """``exchange`` or ``queue``, as /api/federation-links says."""
    name: str
    upstream: str


def expected_links(federation: FederationSpec, vhost: Vhost) -> list[FederatedObject]:
    """Links for every declared exchange/queue that a federation policy of the spec matches.

    Only the highest-priority policy applies to an object, as on the broker; objects matched
    by a user policy of higher priority are not federated and have no link to expect.
    """
    links: set[FederatedObject] = set()
    for kind, apply_to in KINDS:
        link_type = kind[:-1]
        names = [e.name for e in vhost.exchanges] if kind == "exchanges" else []
        if kind == "queues":
            names = [q.name for q in vhost.queues]
        for index, spec in enumerate(getattr(federation, kind)):
            own = policy_name(kind, index, spec)
            upstreams = (
                [spec.upstream]
                if spec.upstream is not None
                else set_members(federation, str(spec.upstream_set))
            )
            for name in names:
                if not re.search(spec.pattern, name):
                    continue
                if _winning_policy(vhost, name, apply_to) != own:
                    continue
                links.update(FederatedObject(link_type, name, u) for u in upstreams)
    return sorted(links)


def _winning_policy(vhost: Vhost, name: str, kind: ApplyTo) -> str | None:
    best: Policy | None = None
    for policy in vhost.policies:
        if policy.apply_to not in (ApplyTo.ALL, kind) and not (
            kind is ApplyTo.QUEUES and policy.apply_to.value.endswith(("queues", "streams"))
        ):
            continue
        try:
            if not re.search(policy.pattern, name):
                continue
        except re.error:
            continue
        if best is None or policy.priority > best.priority:
            best = policy
    return best.name if best is not None else None
