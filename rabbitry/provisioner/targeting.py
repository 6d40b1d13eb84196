"""``--target``: a plan cut down to the changes some objects need (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import unquote

from rabbitry.errors import PlanError
from rabbitry.provisioner.plans import REPLACED_KINDS, Action, Change, Plan
from rabbitry.provisioner.relayout import touched_by
from rabbitry.topology.kinds import kind_of
from rabbitry.topology.primitives import KIND_ORDER, ResourceKey

GLOBAL_KINDS = frozenset({"user", "global_parameter"})


def parse_target(text: str) -> ResourceKey:
    """``KIND/VHOST/NAME...`` (``user/NAME``, ``vhost/NAME``; a ``/`` inside a name written
    ``%2F``) as the key prefix it selects."""
    kind, *parts = [unquote(part) for part in text.split("/")]
    if kind not in KIND_ORDER or not parts or not all(parts):
        kinds = ", ".join(KIND_ORDER)
        raise PlanError(
            f"--target {text!r} is not KIND/VHOST/NAME (KIND one of {kinds}; user/NAME,"
            " vhost/NAME and global_parameter/NAME name no vhost; e.g. queue/shop/orders.work)"
        )
    return ResourceKey((kind, "", *parts) if kind in GLOBAL_KINDS else (kind, *parts))


def _selects(prefix: ResourceKey, key: ResourceKey) -> bool:
    return key[: len(prefix)] == prefix


def targeted(the_plan: Plan, targets: Sequence[str]) -> Plan:
    """The plan cut down to the changes ``targets`` select and what they need: the vhost they
    are in, a binding's source and destination, a permission's user, and the bindings a replaced
    exchange or queue must be declared again with. Raises ``PlanError`` for a target that names
    nothing in the spec or the plan (a typo must not pass for "nothing to do")."""
    prefixes = [parse_target(t) for t in targets]
    known = list(the_plan.desired.resources()) if the_plan.desired is not None else []
    known += [c.key for c in the_plan.changes]
    for text, prefix in zip(targets, prefixes, strict=True):
        if not any(_selects(prefix, key) for key in known):
            raise PlanError(f"--target {text!r} names nothing in the spec or on the broker")
    by_key = {c.key: c for c in the_plan.changes}
    # what refers to an object (a binding to its ends) is declared again when it is replaced
    rebound: dict[ResourceKey, list[ResourceKey]] = {}
    for change in the_plan.changes:
        for needed in kind_of(change.kind).needs(change.key):
            rebound.setdefault(needed, []).append(change.key)
    selected = {k for k in by_key if any(_selects(p, k) for p in prefixes)}
    frontier = list(selected)
    while frontier:
        change = by_key[frontier.pop()]
        for need in _needs(change, rebound):
            if need in by_key and need not in selected:
                selected.add(need)
                frontier.append(need)
    changes = tuple(c for c in the_plan.changes if c.key in selected)
    return replace(
        the_plan,
        changes=changes,
        excluded=frozenset(k for k in by_key if k not in selected),
        relayouts=touched_by(the_plan.relayouts, changes),
    )


def _needs(change: Change, rebound: dict[ResourceKey, list[ResourceKey]]) -> list[ResourceKey]:
    key = change.key
    needs: list[ResourceKey] = []
    if key.kind != "vhost" and key.vhost:
        needs.append(ResourceKey.of("vhost", key.vhost))
    needs += kind_of(key.kind).needs(key)
    if key.kind in REPLACED_KINDS and change.action is Action.REPLACE:
        needs += rebound.get(key, [])
    return needs


__all__ = ["GLOBAL_KINDS", "parse_target", "targeted"]
