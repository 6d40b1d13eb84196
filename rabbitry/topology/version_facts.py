"""The table of what each RabbitMQ version does with a queue argument, a policy key, an exchange
or queue type, or a feature: ``FACTS``, one ``Fact`` each, with its source and what to do.

The rows are data, in ``version_facts.json`` beside this module (what a row holds is said at
its top); this module reads them into ``Fact``s. ``rabbitry.topology.versions`` reads those
(which facts a use meets, what a version does with it). Each fact says from which version the
broker has a thing (``added``), accepts it without effect (``ignored``), refuses it
(``removed``) or changes its default (``changed``). Facts that could not be confirmed from
RabbitMQ's release notes or source are left out rather than guessed.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rabbitry.topology.queue_types import QueueType

__all__ = [
    "ABSENT",
    "ANY",
    "FACTS",
    "RETRY_VIA_BROKER",
    "SERVER_NAMED_BINDING",
    "VHOST_DELETION_PROTECTION",
    "Fact",
    "Kind",
    "Use",
    "Version",
]

Version = tuple[int, ...]
"""A RabbitMQ version as numbers: (4, 0, 5)."""


class Kind(enum.StrEnum):
    """What a fact is about."""

    QUEUE_ARGUMENT = "queue argument"
    POLICY_KEY = "policy key"
    OPERATOR_POLICY_KEY = "operator policy key"
    APPLY_TO = "policy apply-to"
    EXCHANGE_TYPE = "exchange type"
    QUEUE_TYPE = "queue type"
    FEATURE = "feature"


ANY = object()
"""A fact about a key whatever its value."""
ABSENT = object()
"""A fact about a key left out (the broker's default applies)."""


@dataclass(frozen=True)
class Use:
    """One thing an object uses: a key (with its value) of some kind, on some queue type."""

    kind: Kind
    key: str
    value: object = ANY
    queue_type: QueueType | None = None


@dataclass(frozen=True)
class Fact:
    """What RabbitMQ versions do with one key (or one value of it)."""

    kind: Kind
    key: str
    source: str
    """Where the fact comes from: release notes version or a file of rabbitmq-server."""
    advice: str
    """What to do about it, said to the user."""
    value: object = ANY
    queue_types: frozenset[QueueType] | None = None
    """The queue types the fact is about (None: any object)."""
    added: Version | None = None
    """First version that has it; older brokers refuse it or lack it."""
    unchecked_before: bool = False
    """Older brokers than ``added`` accept it without effect rather than refuse it (a queue
    argument they do not know and do not check): a warning there, not a refusal."""
    ignored: Version | None = None
    """First version that accepts it without effect."""
    removed: Version | None = None
    """First version that refuses it."""
    changed: Version | None = None
    """Version whose behaviour differs from the one before (a new default)."""
    deprecated_feature: str | None = None
    """The broker's deprecated feature behind a ``removed`` that is only a default (from
    ``removed`` on, denied unless rabbitmq.conf permits it): a broker that reports the feature
    permitted accepts the use, one that reports it denied refuses it, whatever its version."""

    @property
    def label(self) -> str:
        if self.value is ABSENT:
            return f"the default of {self.kind} {self.key}"
        if self.value is ANY:
            return f"{self.kind} {self.key}"
        return f"{self.kind} {self.key}: {self.value}"

    def matches(self, use: Use) -> bool:
        if use.kind is not self.kind or use.key != self.key:
            return False
        if self.value is not ANY and use.value != self.value and use.value is not self.value:
            return False
        return self.queue_types is None or use.queue_type in self.queue_types


RETRY_VIA_BROKER = "quorum queue delayed retry (retry: {via: broker})"
"""The feature a queue that retries through the broker relies on (not a key of its own)."""

SERVER_NAMED_BINDING = "import of a binding to a server-named (amq.gen-*) queue"
"""What the broker's definitions import does with such a binding: it skips the queue (its
client's, gone with it), and from 4.0 refuses the binding to it rather than skip it too."""

VHOST_DELETION_PROTECTION = "vhost deletion protection (protected_from_deletion)"
"""A vhost the broker refuses to delete (its metadata's ``protected_from_deletion``)."""

TABLE = Path(__file__).with_name("version_facts.json")
"""Where the rows are."""

_ROW_FIELDS = frozenset(
    {"kind", "kinds", "key", "keys", "value", "absent", "queue_types", "source", "advice"}
    | {"added", "ignored", "removed", "changed", "unchecked_before", "deprecated_feature", "note"}
)


def _version(row: dict[str, Any], name: str) -> Version | None:
    numbers = row.get(name)
    return tuple(numbers) if numbers is not None else None


def facts_of(table: dict[str, Any]) -> Iterator[Fact]:
    """The facts of ``table`` (``version_facts.json``'s shape), in its order: one a kind and key
    of each row, kinds outermost."""
    prefixes = {f"{{{name}}}": text for name, text in table["prefixes"].items()}
    for row in table["facts"]:
        unknown = row.keys() - _ROW_FIELDS
        if unknown:
            raise ValueError(f"{TABLE.name}: unknown fields {sorted(unknown)} in {row}")
        queue_types = row.get("queue_types")
        for kind in row.get("kinds") or [row["kind"]]:
            for key in row.get("keys") or [row["key"]]:
                said = {**prefixes, "{key}": key}
                source, advice = row["source"], row["advice"]
                for placeholder, text in said.items():
                    source = source.replace(placeholder, text)
                    advice = advice.replace(placeholder, text)
                yield Fact(
                    Kind(kind),
                    key,
                    source=source,
                    advice=advice,
                    value=ABSENT if row.get("absent") else row.get("value", ANY),
                    queue_types=frozenset(map(QueueType, queue_types)) if queue_types else None,
                    added=_version(row, "added"),
                    unchecked_before=row.get("unchecked_before", False),
                    ignored=_version(row, "ignored"),
                    removed=_version(row, "removed"),
                    changed=_version(row, "changed"),
                    deprecated_feature=row.get("deprecated_feature"),
                )


FACTS: tuple[Fact, ...] = tuple(facts_of(json.loads(TABLE.read_text(encoding="utf-8"))))
"""Every fact the checks know, each with its source."""
