"""What rabbitry manages, recorded on the broker itself (no local state file to lose).

Each stack (the spec's ``name``) owns one global parameter ``rabbitry.stack.<name>`` listing the
keys of the objects it created or adopted. Prune only ever deletes keys listed there, so objects
someone else made are never touched; a listed key that vanished from the broker is drift.
The record is written before changes start (desired keys added) and after they end (pruned keys
removed), so a run that dies half-way still knows everything it may have created.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rabbitry.errors import BrokerError
from rabbitry.topology.primitives import Primitive, ResourceKey, canonical_json

RECORD_PREFIX = "rabbitry.stack."
FORMAT_VERSION = 1


def record_name(stack: str) -> str:
    return RECORD_PREFIX + stack


PENDING = ""
"""The digest of a key recorded before its object was made (intent), not yet confirmed."""


def digest(resource: Primitive) -> str:
    """A short fingerprint of an object's settings, to tell drift from a changed spec."""
    return hashlib.sha256(canonical_json(resource.settings()).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class OwnershipRecord:
    """The managed keys of one stack with the digest of each as last applied."""

    stack: str
    managed: Mapping[ResourceKey, str] = field(default_factory=dict)
    operations: tuple[dict[str, Any], ...] = ()
    """Multi-step operations in flight (queue migrations), so an interrupted run is resumed."""

    @property
    def keys(self) -> frozenset[ResourceKey]:
        return frozenset(self.managed)

    def to_value(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "stack": self.stack,
            "managed": sorted([digest, *key] for key, digest in self.managed.items()),
            "operations": list(self.operations),
        }

    @classmethod
    def from_value(cls, stack: str, value: Any) -> OwnershipRecord:
        if value is None:
            return cls(stack)
        if not isinstance(value, dict) or value.get("format_version") != FORMAT_VERSION:
            raise BrokerError(
                f"global parameter {record_name(stack)!r} is not a rabbitry record of format"
                f" {FORMAT_VERSION}; it was written by another tool or a newer rabbitry:"
                " choose another stack name or remove that parameter"
            )
        managed: dict[ResourceKey, str] = {}
        for entry in value.get("managed", []):
            fingerprint, *key = (str(part) for part in entry)
            managed[tuple(key)] = fingerprint
        return cls(stack, managed, tuple(value.get("operations", [])))

    def replace_managed(self, managed: Mapping[ResourceKey, str]) -> OwnershipRecord:
        return OwnershipRecord(self.stack, dict(managed), self.operations)

    def vhosts(self) -> set[str]:
        """Vhosts this stack has objects in (including ones no longer in the spec)."""
        return {key[1] for key in self.managed if key[1]}
