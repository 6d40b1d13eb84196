"""What rabbitry manages, recorded on the broker itself (no local state file to lose).

Each stack (the spec's ``name``) owns one global parameter ``rabbitry.stack.<name>`` listing the
keys of the objects it created or adopted. Prune only ever deletes keys listed there, so objects
someone else made are never touched; a listed key that vanished from the broker is drift.
The record is written before changes start (desired keys added) and after they end (pruned keys
removed), so a run that dies half-way still knows everything it may have created.

Stacks share a broker, and one vhost, without hurting each other: a plan reads every stack's
record (all of them come in one read of the global parameters) and marks each change to an
object another stack's record lists; apply refuses those unless told to take the object over.
Only a vhost may be held by several stacks at once: each stack's objects live in it.

The keys are stored compressed (format 2: the JSON list of ``[digest, kind, vhost, name...]``
entries, zlib-deflated, base64): a stack of 50,000 objects lists 2.9 MB of nested JSON, which the
broker turns into Erlang terms on every write and back into JSON on every read (0.3-0.7 s each
on two cores); as one 1 MB string it takes the broker 0.03-0.05 s. ``rabbitry stacks`` shows
what a record holds; records of format 1 (plain lists) are still read.

A record is broker state anyone with write access to global parameters can set, so it is read
with bounds: it is inflated at most ``MAX_RECORD_BYTES`` (a few MB of zlib can inflate to GBs)
and parsed only when it stays below that. A record past a bound is ``RecordUnreadable``, naming
the stack and the bound; ``records_from`` can set such records aside, so that a plan of one stack
goes on past another stack's broken record (``provisioner.unreadable`` says what it then refuses).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rabbitry.errors import RecordUnreadable as RecordUnreadable
from rabbitry.topology.kinds import describe_key
from rabbitry.topology.primitives import Primitive, ResourceKey, canonical_json

RECORD_PREFIX = "rabbitry.stack."
FORMAT_VERSION = 2
GUARDED_FORMAT = 3
"""The format of a record that keeps guards (``protect``, ``retain``): a rabbitry that does
not know them must not read it, or its prune would delete what they protect."""
READABLE_FORMATS = frozenset({1, 2, 3})
MAX_RECORD_BYTES = 16 * 1024 * 1024
"""The most a record's object list may inflate to (16 MiB: about 280,000 objects; a stack of
50,000 lists 2.9 MB). Bounds what reading one record costs: parsing it takes about ten times its
size in memory."""


def record_name(stack: str) -> str:
    return RECORD_PREFIX + stack


SHARED_KINDS = frozenset({"vhost"})
"""Kinds several stacks may hold at once: two stacks in one vhost both declare it."""


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
    guards: Mapping[ResourceKey, frozenset[str]] = field(default_factory=dict)
    """Managed keys -> their guards (``protect``, ``retain``) as last applied: what still holds
    once the object has left the spec (``provisioner.protection``)."""

    @property
    def keys(self) -> frozenset[ResourceKey]:
        return frozenset(self.managed)

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "stack": self.stack,
            "managed": _pack(sorted([digest, *key] for key, digest in self.managed.items())),
            "operations": list(self.operations),
        }
        guarded = sorted(
            [",".join(sorted(flags)), *key] for key, flags in self.guards.items() if flags
        )
        if guarded:
            value["format_version"] = GUARDED_FORMAT
            value["guards"] = _pack(guarded)
        return value

    @classmethod
    def from_value(cls, stack: str, value: Any) -> OwnershipRecord:
        if value is None:
            return cls(stack)
        if not isinstance(value, dict) or value.get("format_version") not in READABLE_FORMATS:
            # every plan reads every stack's record: one it cannot read could hide objects
            # another stack owns, so it stops rather than guess
            raise RecordUnreadable(
                stack,
                f"global parameter {record_name(stack)!r} is not a rabbitry record of a format"
                f" this rabbitry reads ({', '.join(map(str, sorted(READABLE_FORMATS)))});"
                " it was written by another tool or a newer rabbitry:"
                " upgrade rabbitry if a newer one wrote it; otherwise remove that parameter"
                f" (or, if stack {stack!r} is the one you apply, choose another stack name)",
            )
        entries = value.get("managed", [])
        if isinstance(entries, str):
            entries = _unpack(stack, entries)
        managed: dict[ResourceKey, str] = {}
        for entry in entries:  # [fingerprint, kind, vhost, *identity]; 50,000 at a time
            parts = tuple(map(str, entry))
            if len(parts) < 2:
                raise RecordUnreadable(
                    stack,
                    f"global parameter {record_name(stack)!r} lists an entry that names no object"
                    f" ({entry!r}): it was changed by hand or by another tool; restore"
                    " it from a backup of the broker's definitions, or remove it and adopt the"
                    " stack's objects again",
                )
            managed[ResourceKey(parts[1:])] = parts[0]
        guards: dict[ResourceKey, frozenset[str]] = {}
        packed = value.get("guards")
        for entry in _unpack(stack, packed) if isinstance(packed, str) else ():
            parts = tuple(map(str, entry))
            if len(parts) >= 3:  # [guard,guard, kind, vhost, *identity]
                guards[ResourceKey(parts[1:])] = frozenset(parts[0].split(",")) - {""}
        return cls(stack, managed, tuple(value.get("operations", [])), guards)

    def replace_managed(self, managed: Mapping[ResourceKey, str]) -> OwnershipRecord:
        guards = {k: g for k, g in self.guards.items() if k in managed}
        return OwnershipRecord(self.stack, dict(managed), self.operations, guards)

    def vhosts(self) -> set[str]:
        """Vhosts this stack has objects in (including ones no longer in the spec)."""
        return {key.vhost for key in self.managed if key.vhost}


def _pack(entries: list[list[str]]) -> str:
    text = json.dumps(entries, separators=(",", ":"), ensure_ascii=False)
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def _unpack(stack: str, packed: str) -> Any:
    """The entries of a packed record, inflated and parsed within ``MAX_RECORD_BYTES``."""
    name = record_name(stack)
    fix = (
        "it was changed by hand or by another tool: restore it from a backup of the broker's"
        f" definitions, or remove it (rabbitmqctl clear_global_parameter {name}) and adopt"
        f" stack {stack!r}'s objects again"
    )
    limit = f"{MAX_RECORD_BYTES // (1024 * 1024)} MiB"
    if len(packed) > MAX_RECORD_BYTES:
        raise RecordUnreadable(
            stack,
            f"global parameter {name!r} is {len(packed)} characters long, over the"
            f" {limit} rabbitry reads of an ownership record; {fix}",
        )
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(base64.b64decode(packed, validate=True), MAX_RECORD_BYTES)
        if not inflater.eof and (inflater.unconsumed_tail or len(text) >= MAX_RECORD_BYTES):
            raise RecordUnreadable(
                stack,
                f"global parameter {name!r} inflates past {limit}, the most rabbitry"
                f" reads of an ownership record (it was not inflated further); {fix}",
            )
        if not inflater.eof:
            raise ValueError("the compressed list ends early")
        entries = json.loads(text)
    except (ValueError, zlib.error) as exc:
        raise RecordUnreadable(
            stack,
            f"global parameter {name!r} lists its objects in a form rabbitry cannot"
            f" read ({exc}); {fix}",
        ) from None
    except RecursionError:
        raise RecordUnreadable(
            stack, f"global parameter {name!r} nests its object list too deeply to read; {fix}"
        ) from None
    if not isinstance(entries, list) or not all(isinstance(e, list) for e in entries):
        raise RecordUnreadable(stack, f"global parameter {name!r}: its object list is not a list")
    return entries


def records_from(
    parameters: Iterable[Mapping[str, Any]], unreadable: dict[str, RecordUnreadable] | None = None
) -> dict[str, OwnershipRecord]:
    """Every stack's record among the broker's global parameters (``GET
    /api/global-parameters``), by stack name. A record that cannot be read raises
    ``RecordUnreadable``, unless ``unreadable`` is given: then it goes there, by stack name, and
    the others are read on."""
    records = {}
    for item in parameters:
        name = str(item.get("name", ""))
        if name.startswith(RECORD_PREFIX):
            stack = name[len(RECORD_PREFIX) :]
            try:
                records[stack] = OwnershipRecord.from_value(stack, item.get("value"))
            except RecordUnreadable as exc:
                if unreadable is None:
                    raise
                unreadable[stack] = exc
    return records


def owners_by_key(
    records: Mapping[str, OwnershipRecord], but: str = ""
) -> dict[ResourceKey, tuple[str, ...]]:
    """Key -> the stacks whose records list it (all but stack ``but``), in name order; one pass
    over every record, so a plan's cost stays in proportion to the objects on the broker."""
    owners: dict[ResourceKey, tuple[str, ...]] = {}
    for stack in sorted(records):
        if stack == but:
            continue
        for key in records[stack].managed:
            owners[key] = (*owners.get(key, ()), stack)
    return owners


@dataclass(frozen=True)
class StackHoldings:
    """What one stack owns, as ``rabbitry stacks`` lists it."""

    stack: str
    counts: Mapping[str, Mapping[str, int]]
    """Vhost ('' for users and global parameters) -> kind -> how many objects."""
    pending: int
    """Keys recorded before their object was made, by an apply that has not finished."""
    operations: int
    """Multi-step operations (queue migrations) in flight."""

    @property
    def total(self) -> int:
        return sum(n for kinds in self.counts.values() for n in kinds.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "objects": self.total,
            "vhosts": [
                {"vhost": vhost or None, "counts": dict(sorted(kinds.items()))}
                for vhost, kinds in sorted(self.counts.items())
            ],
            "pending": self.pending,
            "operations": self.operations,
        }


def holdings(record: OwnershipRecord, vhosts: Iterable[str] = ()) -> StackHoldings:
    """Count a stack's objects by vhost and kind (only in ``vhosts`` when given; cluster-wide
    objects then too)."""
    only = set(vhosts)
    counts: dict[str, Counter[str]] = {}
    pending = 0
    for key, fingerprint in record.managed.items():
        vhost = key.vhost
        if only and vhost and vhost not in only:
            continue
        counts.setdefault(vhost, Counter())[key.kind] += 1
        pending += fingerprint == PENDING
    return StackHoldings(
        record.stack,
        {vhost: dict(kinds) for vhost, kinds in counts.items()},
        pending,
        len(record.operations),
    )


@dataclass(frozen=True)
class StacksOnBroker:
    """The stacks on a broker with what each owns, and objects several of them own."""

    stacks: tuple[StackHoldings, ...]
    contested: Mapping[ResourceKey, tuple[str, ...]]
    """Objects (vhosts aside) that more than one stack's record lists: each of those stacks
    may change or delete them under the others (records written before rabbitry refused)."""
    unreadable: Mapping[str, str] = field(default_factory=dict)
    """Stacks whose records cannot be read (what they own is unknown) -> why."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "stacks": [s.to_json() for s in self.stacks],
            "contested": [
                {"key": list(key), "title": describe_key(key), "stacks": list(stacks)}
                for key, stacks in sorted(self.contested.items())
            ],
            "unreadable": [
                {"stack": stack, "problem": problem}
                for stack, problem in sorted(self.unreadable.items())
            ],
        }


def stacks_on(
    records: Mapping[str, OwnershipRecord],
    vhosts: Iterable[str] = (),
    unreadable: Mapping[str, RecordUnreadable] | None = None,
) -> StacksOnBroker:
    """What ``records`` (every stack's, ``records_from``) say each stack owns; with ``vhosts``,
    only the stacks owning something there, counted there. ``unreadable``: the records
    ``records_from`` set aside, named whatever ``vhosts`` says (they may own anything)."""
    only = set(vhosts)
    held = [holdings(records[name], only) for name in sorted(records)]
    if only:
        held = [h for h in held if any(vhost in only for vhost in h.counts)]
    contested = {
        key: stacks
        for key, stacks in owners_by_key(records).items()
        if len(stacks) > 1
        and key.kind not in SHARED_KINDS
        and (not only or key.vhost in only or not key.vhost)
    }
    broken = {stack: str(problem) for stack, problem in (unreadable or {}).items()}
    return StacksOnBroker(tuple(held), contested, broken)
