"""A plan's data: what a change does to one object (``Action``, ``Change``) and the ordered
changes of one stack (``Plan``), with what apply records after them (``managed_after``).

Made by ``planner.plan`` (the diff), cut down by ``targeting.targeted`` (``--target``), saved
by ``planfile``, drawn by ``display`` and carried out by ``applier``; nothing here reads the
broker or diffs anything.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.protection import desired_guards
from rabbitry.provisioner.relayout import DelayRelayout
from rabbitry.topology.kinds import describe_key
from rabbitry.topology.primitives import Primitive, ResourceKey, Topology


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
    """Which object: ``(kind, vhost, *identity)``, read by name (``key.kind``, ...)."""
    desired: Primitive | None = None
    """What the spec wants (None: a deletion or a retain)."""
    observed: Primitive | None = None
    """What the broker holds (None: nothing yet)."""
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

    def __post_init__(self) -> None:
        if type(self.key) is not ResourceKey:  # the plain tuple of its parts, named
            object.__setattr__(self, "key", ResourceKey(self.key))

    if TYPE_CHECKING:

        @property
        def kind(self) -> str: ...

        @property
        def vhost(self) -> str: ...

    else:  # its key's, read at every change of a large plan: getters in C
        kind = property(attrgetter("key.kind"))
        vhost = property(attrgetter("key.vhost"))

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


REPLACED_KINDS = frozenset({"queue", "exchange"})
"""Kinds whose settings cannot change in place: a change to them is a replace."""


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


__all__ = ["REPLACED_KINDS", "SYMBOLS", "Action", "Change", "Plan", "managed_after"]
