"""The planner: a pure function from (desired topology, observed broker state) to a ``Plan``.

Rules the broker imposes, and what the plan does about them:
- policies, operator policies, parameters, users, permissions and vhost metadata change in place
  (``update``);
- a queue's or exchange's type, durability or arguments cannot change in place (the broker answers
  406 PRECONDITION_FAILED), so such a change is a ``replace``: delete and declare again. The plan
  says which fields differ and how many messages the queue holds; the bindings that the delete
  drops are planned again as creations;
- a binding is identified by all of (source, destination, routing key, arguments), so it never
  updates: a changed binding is one deletion plus one creation;
- only objects in this stack's ownership record are ever deleted, and only when asked (prune);
- an object that exists but is not recorded yet is ``adopt``-ed when it already matches;
- a change to an object another stack's record lists (adopt, create, update, replace or delete)
  names that stack in ``owners``: apply refuses it unless told to take the object over. A vhost
  is the exception while it is only declared or adopted: stacks share vhosts;
- a change to how a delay's levels route (``relayout``) is listed with the messages that wait
  in its level queues: routed for the old layout, they would never be delivered;
- an object guarded ``protect: true`` (by the spec, or by the record once it left the spec)
  has its deletes and replaces marked ``protected``: apply refuses them whatever the flags; one
  guarded ``on_remove: retain`` that left the spec is ``retain``-ed: left on the broker and
  struck from the record (``provisioner.protection``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from rabbitry.provisioner import field_diff
from rabbitry.provisioner.field_diff import comparable
from rabbitry.provisioner.migration import (
    STEPS,
    estimate_seconds,
    pending_migrations,
    temp_name,
)
from rabbitry.provisioner.ownership import PENDING, SHARED_KINDS, OwnershipRecord, digest
from rabbitry.provisioner.plans import (
    REPLACED_KINDS,
    SYMBOLS,
    Action,
    Change,
    Plan,
    managed_after,
)
from rabbitry.provisioner.protection import (
    PROTECT,
    RETAIN,
    desired_guards,
    guards_in_force,
    guards_text,
    protection_reason,
)
from rabbitry.provisioner.relayout import delay_relayouts
from rabbitry.provisioner.state import BrokerState
from rabbitry.provisioner.targeting import parse_target, targeted
from rabbitry.topology.kinds import describe_key, rank
from rabbitry.topology.primitives import (
    Binding,
    DestinationType,
    Exchange,
    Primitive,
    QueueType,
    ResourceKey,
    Topology,
    Vhost,
)


def _touches(binding: Binding, vhost: str, replaced: set[ResourceKey]) -> bool:
    source_key = ("exchange", vhost, binding.source)
    dest_key = (binding.destination_type.value, vhost, binding.destination)
    return source_key in replaced or dest_key in replaced


def owners_of(
    action: Action, key: ResourceKey, other_owners: Mapping[ResourceKey, tuple[str, ...]]
) -> tuple[str, ...]:
    """The other stacks a change of ``action`` to ``key`` would act against: those whose
    records list it, except for a vhost only declared or adopted (stacks share vhosts)."""
    owners = other_owners.get(key, ())
    if action is Action.RETAIN:
        return ()  # only this stack's record changes
    if owners and key.kind in SHARED_KINDS and action in (Action.CREATE, Action.ADOPT):
        return ()
    return owners


def ownership_warnings(changes: Iterable[Change]) -> list[str]:
    """One line per other stack whose objects the plan touches, saying what to do."""
    by_stack: dict[str, list[Change]] = {}
    for change in changes:
        for stack in change.owners:
            by_stack.setdefault(stack, []).append(change)
    return [
        f"{len(touched)} change(s) act on objects stack {stack!r} owns (for example"
        f" {touched[0].title}): apply refuses them; leave them out of this spec, or move them"
        f" to this stack with apply --take-over {stack}"
        for stack, touched in sorted(by_stack.items())
    ]


def plan(desired: Topology, state: BrokerState) -> Plan:
    """Compare the desired topology with the broker state; pure, no I/O. In phases: what the
    spec declares (``_declared``), guards to record, bindings a replace drops (``_rebound``),
    what left the spec (``_removed``), then warnings and other stacks' ownership."""
    want = desired.resources()
    have = state.resources()
    record = state.record
    wanted_guards = desired_guards(desired)
    changes = _declared(want, have, state, wanted_guards)
    changes.extend(guard_changes(want, have, record, wanted_guards, {c.key for c in changes}))
    changes, dropped = _rebound(changes, want, have)
    removed, warnings = _removed(want, have, state, dropped)
    changes.extend(removed)
    warnings.extend(replace_warnings(changes))
    if state.other_owners:
        changes = [
            replace(c, owners=owners)
            if (owners := owners_of(c.action, c.key, state.other_owners))
            else c
            for c in changes
        ]
        warnings.extend(ownership_warnings(changes))
    warnings.extend(quorum_placement_warnings(desired, state.node_count))
    relayouts = delay_relayouts(desired, state.topology, changes, state.queue_stats)
    warnings.extend(r.describe() for r in relayouts)
    return Plan(
        stack=desired.name,
        changes=tuple(sorted(changes, key=_order)),
        record=record,
        warnings=tuple(warnings),
        desired=desired,
        relayouts=tuple(relayouts),
    )


def _declared(
    want: Mapping[ResourceKey, Primitive],
    have: Mapping[ResourceKey, Primitive],
    state: BrokerState,
    wanted_guards: Mapping[ResourceKey, frozenset[str]],
) -> list[Change]:
    """The changes to the objects the spec declares: create, adopt, update or replace (and
    a queue's migration an earlier apply left half-way, finished)."""
    record = state.record
    changes: list[Change] = []
    interrupted = pending_migrations(record.operations)
    for key, resource in want.items():
        existing = have.get(key)
        recorded = record.managed.get(key)
        if key.kind == "queue" and (key.vhost, key.name) in interrupted:
            step = interrupted[(key.vhost, key.name)].step
            reason = f"finish the migration an earlier apply left at step {step!r}"
            changes.append(Change(Action.REPLACE, key, resource, existing, (reason,)))
            continue
        # An empty digest marks an intent: an apply meant to create this and stopped before
        # recording how it went. Neither drift nor finished.
        pending = recorded == PENDING
        applied = recorded is not None and not pending
        if existing is None:
            reasons = ("deleted outside rabbitry",) if applied else ()
            changes.append(Change(Action.CREATE, key, resource, None, reasons, drift=applied))
            continue
        differences = field_diff.differences(resource, existing, state)
        if not differences:
            if recorded is None:
                changes.append(Change(Action.ADOPT, key, resource, existing, ("already matches",)))
            elif pending:
                reason = "made by an apply that stopped half-way; apply records it"
                changes.append(Change(Action.ADOPT, key, resource, existing, (reason,)))
            continue
        drift = applied and recorded != digest(comparable(existing, resource))
        if key.kind in REPLACED_KINDS:
            protected = PROTECT in wanted_guards.get(key, ())
            changes.append(
                _replacement(key, resource, existing, differences, drift, protected, state)
            )
        else:
            changes.append(
                Change(Action.UPDATE, key, resource, existing, tuple(differences), drift)
            )
    return changes


def _replacement(
    key: ResourceKey,
    resource: Primitive,
    existing: Primitive,
    differences: list[str],
    drift: bool,
    protected: bool,
    state: BrokerState,
) -> Change:
    """The replace of a queue or exchange whose settings cannot change in place: a queue's is
    a migration through a temporary queue, said with its steps and the messages it moves."""
    stats = state.queue_stats.get(key)
    if protected:
        differences.append(protection_reason(in_spec=True))
    elif key.kind == "queue":
        moved = stats.messages if stats else None
        differences.append(
            f"migrate through {temp_name(key.name)}: {moved or 0} message(s), bindings"
            f" kept throughout (about {estimate_seconds(moved):.1f} s)"
        )
        differences.append("steps: " + ", ".join(STEPS))
    return Change(
        Action.REPLACE,
        key,
        resource,
        existing,
        tuple(differences),
        drift=drift,
        messages=stats.messages if stats else None,
        consumers=stats.consumers if stats else None,
        counted=stats.source if stats else "",
        count_note=stats.note if stats else "",
        protected=protected,
    )


def _rebound(
    changes: list[Change],
    want: Mapping[ResourceKey, Primitive],
    have: Mapping[ResourceKey, Primitive],
) -> tuple[list[Change], set[ResourceKey]]:
    """The changes with the bindings a replace drops: a migrated queue is unbound and bound
    again by its migration, with the desired bindings (a protected one is not: apply refuses
    it, and its bindings stay as they are); deleting an exchange drops every binding that
    touches it, so they are declared again. Also the keys of the replaced queues and
    exchanges (their bindings need no deletion of their own)."""
    replacing = [c for c in changes if c.action is Action.REPLACE and not c.protected]
    migrating = {c.key for c in replacing if c.kind == "queue"}
    changes = [c for c in changes if not _binds_into(c, migrating)]
    replaced = {c.key for c in replacing if c.kind == "exchange"}
    if replaced:
        planned = {c.key for c in changes}
        for key, resource in want.items():
            if (
                isinstance(resource, Binding)
                and key not in planned
                and _touches(resource, key.vhost, replaced)
            ):
                changes.append(
                    Change(Action.CREATE, key, resource, have.get(key), ("re-bound after replace",))
                )
    return changes, replaced | migrating


def _removed(
    want: Mapping[ResourceKey, Primitive],
    have: Mapping[ResourceKey, Primitive],
    state: BrokerState,
    dropped: set[ResourceKey],
) -> tuple[list[Change], list[str]]:
    """What this stack recorded, is still on the broker and left the spec: deleted (on prune),
    retained (``on_remove: retain``, with the bindings to it) or refused (``protect: true``);
    a vhost that holds objects of no one's is left in place, with a warning. ``dropped``:
    queues and exchanges replaced, whose bindings go with them."""
    record = state.record
    changes: list[Change] = []
    warnings: list[str] = []
    doomed = [key for key in record.managed if key not in want and key in have]
    guarded = {k: g for k in doomed if (g := guards_in_force(k, False, {}, record.guards))}
    retained = {k for k, g in guarded.items() if RETAIN in g}
    doomed_set = {k for k in doomed if k not in guarded}
    for key in doomed:
        existing = have[key]
        stats = state.queue_stats.get(key)
        counts: dict[str, Any] = {
            "messages": stats.messages if stats else None,
            "consumers": stats.consumers if stats else None,
            "counted": stats.source if stats else "",
            "count_note": stats.note if stats else "",
        }
        if key in retained or (
            isinstance(existing, Binding) and _touches(existing, key.vhost, retained)
        ):
            reason = (
                "on_remove: retain: stays on the broker as it is, no longer owned by this stack"
            )
            if key not in retained:
                reason = "binds a retained object: stays on the broker, no longer owned"
            changes.append(Change(Action.RETAIN, key, None, existing, (reason,), **counts))
            continue
        if key in guarded:  # protect: true, kept by the record
            why = ("no longer in the spec", protection_reason(in_spec=False))
            changes.append(
                Change(Action.DELETE, key, None, existing, why, protected=True, **counts)
            )
            continue
        if isinstance(existing, Vhost) and existing.protected_from_deletion:
            warnings.append(
                f"vhost {key.vhost!r} is no longer in the spec but the broker protects it from"
                " deletion (protected_from_deletion): it is left in place; to delete it, apply it"
                " with protected_from_deletion: false first"
            )
            continue
        if key.kind == "vhost":
            # Deleting a vhost deletes everything in it: only when all of it is ours to delete.
            strangers = [
                k
                for k in have
                if k.vhost == key.vhost and k.kind != "vhost" and k not in doomed_set
            ]
            if strangers:
                warnings.append(
                    f"vhost {key.vhost!r} is no longer in the spec but holds {len(strangers)}"
                    " object(s) rabbitry does not manage (for example "
                    f"{describe_key(strangers[0])}): it is left in place"
                )
                continue
        if isinstance(existing, Binding) and _touches(existing, key.vhost, dropped):
            continue  # dropped by the replace or migration already
        changes.append(
            Change(Action.DELETE, key, None, existing, ("no longer in the spec",), **counts)
        )
    return changes, warnings


def replace_warnings(changes: Iterable[Change]) -> list[str]:
    """What publishers meet while the plan's replaces run (those protected do not run)."""
    warnings = []
    for change in changes:
        if change.protected:
            continue
        if change.action is Action.REPLACE and change.kind == "queue":
            warnings.append(
                f"{change.title} is migrated: publishers that address it through the default"
                " exchange by name find no queue for a moment (publish through an exchange)"
            )
        if change.action is Action.REPLACE and isinstance(change.observed, Exchange):
            warnings.append(
                f"{change.title} is deleted and declared again: publishes to it fail for a moment"
            )
    return warnings


def guard_changes(
    want: Mapping[ResourceKey, Primitive],
    have: Mapping[ResourceKey, Primitive],
    record: OwnershipRecord,
    wanted: Mapping[ResourceKey, frozenset[str]],
    planned: set[ResourceKey],
) -> list[Change]:
    """An object that matches but whose guards the record does not keep yet (or keeps no
    longer) is adopted again, so that apply records them: protection that lives only in the
    spec would be lost with the object's lines."""
    out = []
    for key, resource in want.items():
        if key in planned or key not in record.managed or key not in have:
            continue
        now = wanted.get(key, frozenset())
        before = record.guards.get(key, frozenset())
        if now != before:
            reason = (
                f"the ownership record keeps {guards_text(now)}"
                if now
                else f"the ownership record no longer keeps {guards_text(before)}"
            )
            out.append(Change(Action.ADOPT, key, resource, have[key], (reason,)))
    return out


def quorum_placement_warnings(desired: Topology, node_count: int | None) -> list[str]:
    """Quorum queues asking for more replicas than the cluster has nodes get only that many."""
    if node_count is None:
        return []
    out = []
    for vhost in desired.vhosts:
        for queue in vhost.queues:
            size = queue.arguments.get("x-quorum-initial-group-size")
            if queue.type is QueueType.QUORUM and isinstance(size, int) and size > node_count:
                out.append(
                    f"queue {vhost.name}/{queue.name} wants {size} replicas"
                    f" (x-quorum-initial-group-size) but the cluster has {node_count}"
                    f" node(s): it gets {node_count}; add nodes or lower the group size"
                )
    return out


def _binds_into(change: Change, queues: set[ResourceKey]) -> bool:
    binding = change.desired or change.observed
    if not isinstance(binding, Binding) or binding.destination_type is not DestinationType.QUEUE:
        return False
    return ("queue", change.vhost, binding.destination) in queues


def _order(change: Change) -> tuple[int, int, ResourceKey]:
    place = rank(change.kind)
    if change.action is Action.DELETE:
        return (1, -place, change.key)
    return (0, place, change.key)


__all__ = [
    "SYMBOLS",
    "Action",
    "Change",
    "Plan",
    "guard_changes",
    "managed_after",
    "owners_of",
    "ownership_warnings",
    "parse_target",
    "plan",
    "quorum_placement_warnings",
    "targeted",
]
