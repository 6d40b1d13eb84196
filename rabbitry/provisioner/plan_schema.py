"""What ``rabbitry plan --json`` (and ``show --json``, and the ``plan`` of ``apply --json``)
prints, as pydantic models: the JSON Schema in ``docs/plan.schema.json`` is generated from them
(``rabbitry schema --plan``), and tests check real output against them, so the documented
format cannot drift from the printed one.

``format_version`` changes only when a field is removed or changes meaning; fields may be added
within a version (tools should ignore fields they do not know).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rabbitry.topology.primitives import ResourceKind
from rabbitry.topology.spec.schema import JSON_SCHEMA_DIALECT

Kind = ResourceKind


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ChangeDocument(_Document):
    """One planned change to one broker object."""

    action: Literal["create", "update", "replace", "delete", "adopt", "retain"]
    """create, update (in place), replace (delete and declare again; queues are migrated),
    delete (only with --prune), adopt (exists and matches: recorded as this stack's, or its
    guards recorded anew), retain (left the spec with `on_remove: retain`: stays on the broker
    and leaves this stack's ownership record)."""
    kind: Kind
    vhost: str | None
    """The vhost the object is in; null for users and global parameters."""
    key: list[str]
    """The object's identity: kind, vhost ('' for cluster-wide objects), then its name parts
    (a binding: source, destination type, destination, routing key, arguments as JSON)."""
    title: str
    """A short human name, as the text plan shows it."""
    reasons: list[str]
    """Why, one short line each (fields that differ, what forced a replace); no secrets."""
    drift: bool
    """The broker differs from what rabbitry last applied: changed or deleted by hand."""
    messages: int | None = None
    """Messages in a queue the change would replace or delete (absent when not counted)."""
    messages_source: Literal["amqp", "statistics"] | None = None
    """amqp: counted exactly; statistics: the management API's figure, seconds stale."""
    consumers: int | None = None
    owners: list[str] | None = None
    """Other stacks whose ownership records list the object (absent when none): apply refuses
    the change unless `--take-over STACK` names each of them."""
    protected: bool | None = None
    """The object is guarded `protect: true` (by the spec, or by the ownership record once it
    left the spec): apply refuses this delete or replace whatever the flags (absent when not)."""


class Summary(_Document):
    """How many changes of each action."""

    create: int
    update: int
    replace: int
    delete: int
    adopt: int
    retain: int


class HeldDocument(_Document):
    """A level queue and the messages waiting in it."""

    queue: str
    messages: int


class DelayRelayoutDocument(_Document):
    """A delay whose levels the plan lays out anew (another unit, max, count, levels or lanes)."""

    vhost: str
    delay: str
    """The delay's name (``vhosts[].delays[].name``)."""
    layout: str
    """The spec's layout, as its marker exchange ``<delay>.layout.<layout>`` names it."""
    previous: list[str]
    """The layouts the broker's levels are marked with (empty: unmarked levels)."""
    messages: int
    """Messages waiting in the delay's level queues: apply refuses the relayout while there
    are any unless `--allow-delay-relayout` (routed for the old layout, they would never be
    delivered)."""
    held: list[HeldDocument]
    uncounted: list[str]
    """Level queues whose count is not exact, with why: apply refuses as if they held some."""
    needs_prune: bool
    """The old layout leaves bindings and its marker that only `--prune` deletes: apply
    refuses the relayout without it."""


class PlanDocument(_Document):
    """A plan: the changes that bring the broker to the spec, in the order apply makes them."""

    format_version: Literal[1]
    stack: str
    """The stack (the spec's name) the plan is for."""
    changes: list[ChangeDocument]
    summary: Summary
    warnings: list[str]
    delay_relayouts: list[DelayRelayoutDocument] | None = None
    """Delays whose levels the plan lays out anew (absent when none)."""
    created: str | None = Field(None, description="`show --json` only: when the plan was made.")
    broker: str | None = Field(
        None, description="`show --json` only: the management API it was made against."
    )
    cluster: str | None = Field(None, description="`show --json` only: the cluster it applies to.")


def plan_json_schema() -> dict[str, Any]:
    schema = PlanDocument.model_json_schema(mode="validation")
    return {"$schema": JSON_SCHEMA_DIALECT, **schema, "title": "rabbitry plan"}


def plan_json_schema_text() -> str:
    """``plan_json_schema()`` as the text of ``docs/plan.schema.json``."""
    return json.dumps(plan_json_schema(), indent=2, ensure_ascii=False) + "\n"


__all__ = ["ChangeDocument", "PlanDocument", "plan_json_schema", "plan_json_schema_text"]
