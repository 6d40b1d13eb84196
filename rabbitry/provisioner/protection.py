"""What a spec's ``protect: true`` and ``on_remove: retain`` do to a plan: one pure rule.

Inputs: the guards the spec gives its objects (``Topology`` -> ``desired_guards``), the guards
the stack's ownership record kept from the last apply, and whether an object is in the spec.
Output: the guards in force for an object (``guards_in_force``), and what they forbid
(``protection_refusals``). No clock, no I/O.

- ``protect``: the object is never deleted (prune) nor replaced (delete and declare again),
  whatever the flags: apply refuses the change and says why.
- ``retain``: when the object leaves the spec it stays on the broker, as it is, and leaves the
  stack's ownership record (the plan says ``retain``); no later apply of the stack touches it.

An object in the spec has the guards the spec gives it now (a spec that drops ``protect:
true`` unprotects it). An object that left the spec has the guards the record kept: the spec no
longer mentions it, and without the record ``apply --prune --force`` would delete it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rabbitry.topology.primitives import ResourceKey, Topology

__all__ = [
    "GUARDS",
    "PROTECT",
    "RETAIN",
    "desired_guards",
    "guards_in_force",
    "guards_text",
    "protection_reason",
]

PROTECT = "protect"
"""Never delete or replace the object."""
RETAIN = "retain"
"""Leave the object on the broker, unowned, when it leaves the spec."""
GUARDS = frozenset({PROTECT, RETAIN})


def desired_guards(topology: Topology) -> dict[ResourceKey, frozenset[str]]:
    """Key -> guards, for every object the spec guards."""
    out: dict[ResourceKey, set[str]] = {}
    for vhost in topology.vhosts:
        for kind, name, guard in vhost.guards:
            out.setdefault(ResourceKey.of(kind, vhost.name, name), set()).add(guard)
    return {key: frozenset(flags) for key, flags in out.items()}


def guards_in_force(
    key: ResourceKey,
    in_spec: bool,
    desired: Mapping[ResourceKey, frozenset[str]],
    recorded: Mapping[ResourceKey, frozenset[str]],
) -> frozenset[str]:
    """The guards that hold for ``key``: the spec's while the spec declares the object, the
    record's once it has left the spec."""
    if in_spec:
        return desired.get(key, frozenset())
    return recorded.get(key, frozenset())


def guards_text(guards: Iterable[str]) -> str:
    """How the spec writes them: ``protect: true, on_remove: retain``."""
    words = {PROTECT: "protect: true", RETAIN: "on_remove: retain"}
    return ", ".join(words[g] for g in sorted(guards) if g in words)


def protection_reason(in_spec: bool) -> str:
    """The line a protected change carries in the plan: why apply will not make it."""
    where = "the spec says" if in_spec else "the ownership record kept from the last apply says"
    return (
        f"protected ({where} protect: true): never deleted or replaced, whatever the flags;"
        " to let it go, apply it with protect: false first"
    )
