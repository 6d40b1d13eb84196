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

import enum
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from rabbitry.errors import PlanError
from rabbitry.provisioner.migration import (
    STEPS,
    estimate_seconds,
    pending_migrations,
    temp_name,
)
from rabbitry.provisioner.ownership import PENDING, SHARED_KINDS, OwnershipRecord, digest
from rabbitry.provisioner.protection import (
    PROTECT,
    RETAIN,
    desired_guards,
    guards_in_force,
    guards_text,
    protection_reason,
)
from rabbitry.provisioner.relayout import DelayRelayout, delay_relayouts, touched_by
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import (
    KIND_ORDER,
    Binding,
    DestinationType,
    Exchange,
    Primitive,
    QueueType,
    ResourceKey,
    Topology,
    User,
    Vhost,
    canonical_json,
    describe_key,
    same_json,
)
from rabbitry.topology.spec.passwords import password_matches
from rabbitry.uri import mask_text


class Action(enum.StrEnum):
    """What a change does to one object."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    ADOPT = "adopt"
    RETAIN = "retain"
    """Left on the broker as it is, and struck from the stack's record (``on_remove: retain``)."""


SYMBOLS = {
    Action.CREATE: "+",
    Action.UPDATE: "~",
    Action.REPLACE: "-/+",
    Action.DELETE: "-",
    Action.ADOPT: "=",
    Action.RETAIN: "|",
}


@dataclass(frozen=True)
class Change:
    """One planned change to one broker object."""

    action: Action
    key: ResourceKey
    desired: Primitive | None = None
    observed: Primitive | None = None
    reasons: tuple[str, ...] = ()
    """Why (fields that differ, or what forced it), one short line each; secrets never included."""
    drift: bool = False
    """The broker differs from what rabbitry last applied: someone changed or deleted it by hand."""
    messages: int | None = None
    consumers: int | None = None
    counted: str = ""
    """Where ``messages`` comes from: ``amqp`` (exact) or ``statistics`` (may lag)."""
    count_note: str = ""
    """Why the count is not exact, when it is not."""
    owners: tuple[str, ...] = ()
    """Other stacks whose ownership records list the object: apply refuses the change unless
    it takes the object over from each of them."""
    protected: bool = False
    """The object is guarded ``protect: true``: apply refuses this delete or replace."""

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def vhost(self) -> str:
        return self.key[1]

    @property
    def title(self) -> str:
        return describe_key(self.key)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action.value,
            "kind": self.kind,
            "vhost": self.vhost or None,
            "key": list(self.key),
            "title": self.title,
            "reasons": list(self.reasons),
            "drift": self.drift,
        }
        if self.messages is not None:
            out["messages"] = self.messages
        if self.counted:
            out["messages_source"] = self.counted
        if self.consumers is not None:
            out["consumers"] = self.consumers
        if self.owners:
            out["owners"] = list(self.owners)
        if self.protected:
            out["protected"] = True
        return out


@dataclass(frozen=True)
class Plan:
    """The ordered changes that bring the broker to the spec, and what apply will record."""

    stack: str
    changes: tuple[Change, ...]
    record: OwnershipRecord
    """The stack's record as read from the broker."""
    warnings: tuple[str, ...] = ()
    desired: Topology | None = None
    """The topology planned for (migrations bind queues with its bindings)."""
    excluded: frozenset[ResourceKey] = frozenset()
    """Changes left out by ``--target``: their objects stay as they are, and so does what the
    ownership record says of them."""
    relayouts: tuple[DelayRelayout, ...] = ()
    """Delays whose levels the plan lays out anew, with what waits in them: apply refuses
    them while messages wait unless allowed (``provisioner.relayout``)."""

    @functools.cached_property
    def desired_digests(self) -> dict[ResourceKey, str]:
        """What apply records for each desired object; only apply needs it (a plan with
        nothing to do would spend a second of 50,000 objects on it)."""
        if self.desired is None:
            return {}
        return {
            key: digest(resource)
            for key, resource in self.desired.resources().items()
            if key not in self.excluded
        }

    @functools.cached_property
    def guards(self) -> dict[ResourceKey, frozenset[str]]:
        """What apply records of each key's guards: the spec's for what it declares (except
        what ``--target`` left out), the record's for the rest (``provisioner.protection``)."""
        wanted = desired_guards(self.desired) if self.desired is not None else {}
        kept = {k: g for k, g in self.record.guards.items() if k not in self.desired_digests}
        return {**kept, **{k: g for k, g in wanted.items() if k in self.desired_digests}}

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    def by_action(self, *actions: Action) -> list[Change]:
        return [c for c in self.changes if c.action in actions]

    def counts(self) -> dict[str, int]:
        return {a.value: len(self.by_action(a)) for a in Action}

    def summary(self) -> str:
        counts = self.counts()
        if not self.changes:
            return "No changes. The broker matches the spec."
        parts = [
            f"{counts['create']} to create",
            f"{counts['update']} to update",
            f"{counts['replace']} to replace",
            f"{counts['delete']} to delete",
        ]
        if counts["adopt"]:
            parts.append(f"{counts['adopt']} to adopt")
        if counts["retain"]:
            parts.append(f"{counts['retain']} to retain (left on the broker, no longer owned)")
        protected = sum(1 for c in self.changes if c.protected)
        if protected:
            parts.append(f"{protected} protected (refused)")
        owned = sum(1 for c in self.changes if c.owners)
        if owned:
            parts.append(f"{owned} owned by another stack")
        return "Plan: " + ", ".join(parts) + "."

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format_version": 1,
            "stack": self.stack,
            "changes": [c.to_json() for c in self.changes],
            "summary": self.counts(),
            "warnings": list(self.warnings),
        }
        if self.relayouts:
            out["delay_relayouts"] = [r.to_json() for r in self.relayouts]
        return out


def _same_json_types(a: Any, b: Any) -> bool:
    """For values Python found equal: whether JSON finds them equal too (``True == 1`` in
    Python, not on the wire; 1 and 1.0 are one JSON number)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b)
    if isinstance(a, dict):
        for key, value in a.items():
            # a string equals only a string (most values: names, keys, enum members)
            if not isinstance(value, str) and not _same_json_types(value, b[key]):
                return False
        return True
    if isinstance(a, list | tuple):
        return all(_same_json_types(x, y) for x, y in zip(a, b, strict=True))
    return True


def _field_differences(desired: Primitive, observed: Primitive) -> list[str]:
    """Short human lines naming what differs; argument maps are compared key by key."""
    # Most objects match: equal fields (of a kind whose settings are its fields) say so
    # without writing either out.
    if (
        type(desired).settings is Primitive.settings
        and desired == observed
        and _same_json_types(desired.__dict__, observed.__dict__)
    ):
        return []
    want = desired.settings()
    have = observed.settings()
    lines: list[str] = []
    for name in sorted(set(want) | set(have)):
        a, b = have.get(name), want.get(name)
        if same_json(a, b):
            continue
        if (isinstance(a, dict) and b is None) or (a is None and isinstance(b, dict)):
            a, b = a or {}, b or {}  # a map set on one side only: say which of its keys
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if not same_json(a.get(sub), b.get(sub)):
                    lines.append(f"{name}.{sub}: {_short(a.get(sub))} -> {_short(b.get(sub))}")
        else:
            lines.append(f"{name}: {_short(a)} -> {_short(b)}")
    return lines


def _short(value: Any) -> str:
    if value is None:
        return "(unset)"
    text = mask_text(canonical_json(value))  # parameter values can hold URIs with passwords
    return text if len(text) <= 60 else text[:57] + "..."


def _vhost_differences(desired: Vhost, observed: Vhost) -> list[str]:
    """A broker that keeps no deletion protection (before 4.0.6: the version table warns of
    it) is not asked for it again at every plan."""
    if observed.protected_from_deletion is None:
        desired = desired.model_copy(update={"protected_from_deletion": None})
    return _field_differences(desired, observed)


def _comparable(observed: Primitive, desired: Primitive) -> Primitive:
    """``observed`` as its recorded digest was made: a setting the broker does not keep
    (a vhost's deletion protection before 4.0.6) counts as what was asked, not as drift."""
    if (
        isinstance(observed, Vhost)
        and isinstance(desired, Vhost)
        and observed.protected_from_deletion is None
    ):
        protected = desired.protected_from_deletion
        return observed.model_copy(update={"protected_from_deletion": protected})
    return observed


def _user_differences(desired: User, observed: User, state: BrokerState) -> list[str]:
    lines = _field_differences(desired, observed)
    stored_hash, algorithm = state.password_hashes.get(desired.name, ("", ""))
    if desired.password is not None:
        if not password_matches(desired.password.get_secret_value(), stored_hash, algorithm):
            lines.append("password differs")
    elif desired.password_hash is not None and desired.password_hash != stored_hash:
        lines.append("password_hash differs")
    return lines


REPLACED_KINDS = frozenset({"queue", "exchange"})


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
    if owners and key[0] in SHARED_KINDS and action in (Action.CREATE, Action.ADOPT):
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
    """Compare the desired topology with the broker state; pure, no I/O."""
    want = desired.resources()
    have = state.resources()
    record = state.record
    changes: list[Change] = []
    warnings: list[str] = []

    interrupted = pending_migrations(record.operations)
    wanted_guards = desired_guards(desired)
    for key, resource in want.items():
        existing = have.get(key)
        recorded = record.managed.get(key)
        if key[0] == "queue" and (key[1], key[2]) in interrupted:
            step = interrupted[(key[1], key[2])].step
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
        if key[0] == "binding":
            # a binding's key is all of it, arguments as canonical JSON: found is equal
            differences = []
        elif isinstance(resource, User) and isinstance(existing, User):
            differences = _user_differences(resource, existing, state)
        elif isinstance(resource, Vhost) and isinstance(existing, Vhost):
            differences = _vhost_differences(resource, existing)
        else:
            differences = _field_differences(resource, existing)
        if not differences:
            if recorded is None:
                changes.append(Change(Action.ADOPT, key, resource, existing, ("already matches",)))
            elif pending:
                reason = "made by an apply that stopped half-way; apply records it"
                changes.append(Change(Action.ADOPT, key, resource, existing, (reason,)))
            continue
        drift = applied and recorded != digest(_comparable(existing, resource))
        stats = state.queue_stats.get(key)
        protected = PROTECT in wanted_guards.get(key, ())
        if protected and key[0] in REPLACED_KINDS:
            differences.append(protection_reason(in_spec=True))
        if key[0] in REPLACED_KINDS:
            if key[0] == "queue" and not protected:
                moved = stats.messages if stats else None
                differences.append(
                    f"migrate through {temp_name(key[2])}: {moved or 0} message(s), bindings"
                    f" kept throughout (about {estimate_seconds(moved):.1f} s)"
                )
                differences.append("steps: " + ", ".join(STEPS))
            changes.append(
                Change(
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
            )
        else:
            changes.append(
                Change(Action.UPDATE, key, resource, existing, tuple(differences), drift)
            )
    changes.extend(guard_changes(want, have, record, wanted_guards, {c.key for c in changes}))

    # A migrated queue is unbound and bound again by its migration, with the desired bindings.
    # (a protected one is not: apply refuses it, and its bindings stay as they are)
    replacing = [c for c in changes if c.action is Action.REPLACE and not c.protected]
    migrating = {c.key for c in replacing if c.kind == "queue"}
    changes = [c for c in changes if not _binds_into(c, migrating)]
    # Deleting an exchange drops every binding that touches it: declare them again.
    replaced = {c.key for c in replacing if c.kind == "exchange"}
    if replaced:
        planned = {c.key for c in changes}
        for key, resource in want.items():
            if (
                isinstance(resource, Binding)
                and key not in planned
                and _touches(resource, key[1], replaced)
            ):
                changes.append(
                    Change(Action.CREATE, key, resource, have.get(key), ("re-bound after replace",))
                )

    # Prune candidates: recorded, still on the broker, gone from the spec.
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
            isinstance(existing, Binding) and _touches(existing, key[1], retained)
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
                f"vhost {key[1]!r} is no longer in the spec but the broker protects it from"
                " deletion (protected_from_deletion): it is left in place; to delete it, apply it"
                " with protected_from_deletion: false first"
            )
            continue
        if key[0] == "vhost":
            # Deleting a vhost deletes everything in it: only when all of it is ours to delete.
            strangers = [
                k for k in have if k[1] == key[1] and k[0] != "vhost" and k not in doomed_set
            ]
            if strangers:
                warnings.append(
                    f"vhost {key[1]!r} is no longer in the spec but holds {len(strangers)}"
                    " object(s) rabbitry does not manage (for example "
                    f"{describe_key(strangers[0])}): it is left in place"
                )
                continue
        if isinstance(existing, Binding) and _touches(existing, key[1], replaced | migrating):
            continue  # dropped by the replace or migration already
        changes.append(
            Change(Action.DELETE, key, None, existing, ("no longer in the spec",), **counts)
        )

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
    rank = KIND_ORDER.index(change.kind)
    if change.action is Action.DELETE:
        return (1, -rank, change.key)
    return (0, rank, change.key)


def managed_after(
    plan: Plan, deleted: Iterable[ResourceKey], still_present: Iterable[ResourceKey]
) -> dict[ResourceKey, str]:
    """The record after applying: desired objects, plus recorded ones still on the broker
    (those retained excepted: they leave the record)."""
    managed = dict(plan.desired_digests)
    gone = set(deleted) | {c.key for c in plan.changes if c.action is Action.RETAIN}
    present = set(still_present)
    for key, fingerprint in plan.record.managed.items():
        if key not in managed and key not in gone and key in present:
            managed[key] = fingerprint
    return managed


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
    return (kind, "", *parts) if kind in GLOBAL_KINDS else (kind, *parts)


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
    rebound: dict[ResourceKey, list[ResourceKey]] = {}
    for change in the_plan.changes:
        if change.kind == "binding":
            _, vhost, source, dtype, dest, *_ = change.key
            rebound.setdefault(("exchange", vhost, source), []).append(change.key)
            rebound.setdefault((dtype, vhost, dest), []).append(change.key)
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
    if key[0] != "vhost" and key[1]:
        needs.append(("vhost", key[1]))
    if key[0] == "binding":
        _, vhost, source, dtype, dest, *_ = key
        needs += [("exchange", vhost, source), (dtype, vhost, dest)]
    elif key[0] in ("permission", "topic_permission"):
        needs.append(("user", "", key[2]))
    elif key[0] in REPLACED_KINDS and change.action is Action.REPLACE:
        needs += rebound.get(key, [])
    return needs
