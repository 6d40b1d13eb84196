"""Which RabbitMQ version accepts what: queue arguments, policy keys, exchange and queue types.

The table, ``FACTS`` (``rabbitry.topology.version_facts``, re-exported here), is read by
``rabbitry validate`` (against the spec's ``broker.version``) and by ``rabbitry plan``
(against the live broker, or ``--target-version``); this module is the reading.

A refusal that is only a deprecated feature's default (``Fact.deprecated_feature``: an operator
permits it in rabbitmq.conf, and Debian's RabbitMQ 4.3 packages permit transient queues) is
the version's verdict only where no broker says otherwise: a live broker's own state of the
feature (``GET /api/deprecated-features``, passed to ``judge`` as ``deprecated``) decides.

``uses_of_queue`` / ``uses_of_exchange`` / ``uses_of_policy`` say what one object uses;
``judge`` holds those uses against a version. Both are pure: no broker, no spec file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rabbitry.topology.queue_types import QueueType
from rabbitry.topology.version_facts import (
    ABSENT,
    FACTS,
    RETRY_VIA_BROKER,
    SERVER_NAMED_BINDING,
    VHOST_DELETION_PROTECTION,
    Fact,
    Kind,
    Use,
    Version,
)

__all__ = [
    "FACTS",
    "NO_DEPRECATIONS",
    "RETRY_VIA_BROKER",
    "SERIES",
    "SERVER_NAMED_BINDING",
    "VHOST_DELETION_PROTECTION",
    "Fact",
    "Kind",
    "Use",
    "Verdict",
    "Version",
    "added_in",
    "format_version",
    "judge",
    "parse_version",
    "release",
    "uses_of_exchange",
    "uses_of_policy",
    "uses_of_queue",
    "uses_of_vhost",
]


SERIES: tuple[Version, ...] = ((3, 10), (3, 11), (3, 12), (3, 13), (4, 0), (4, 1), (4, 2), (4, 3))
"""The release series the table covers; older and newer versions are judged by the same facts."""


def parse_version(text: str) -> Version:
    """``3.10.8`` -> (3, 10, 8); a pre-release suffix (``4.1.0-beta.2``) is ignored."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(p) for p in match.group().split(".")) if match else ()


def release(text: str) -> Version:
    """A version a user names (``4.3``, ``4.0.5``); ValueError for anything else."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text.strip()):
        raise ValueError(f"{text!r} is not a RabbitMQ version such as 4.3 or 4.0.5")
    return parse_version(text)


def format_version(version: Version) -> str:
    return ".".join(str(p) for p in version)


@dataclass(frozen=True)
class Verdict:
    """What one version does with one use: refuses it (an error) or ignores/changes it."""

    fact: Fact
    use: Use
    version: Version
    state: str
    """``missing`` (too old), ``unknown`` (too old, accepted without effect), ``removed``,
    ``denied`` (a deprecated feature the broker itself reports denied), ``ignored`` or
    ``changed``."""

    @property
    def refused(self) -> bool:
        return self.state in ("missing", "removed", "denied")

    def message(self, where: str = "", runs: str = "the broker runs") -> str:
        """One line: what, which version, what to do; ``runs`` names where the version is from."""
        fact, shown = self.fact, format_version(self.version)
        if self.state == "missing":
            text = f"{fact.label} needs RabbitMQ {format_version(fact.added or ())} or newer"
        elif self.state == "unknown":
            text = (
                f"{fact.label} takes effect from RabbitMQ {format_version(fact.added or ())};"
                " older brokers accept it without effect"
            )
        elif self.state == "removed":
            text = f"RabbitMQ {format_version(fact.removed or ())} and newer refuse {fact.label}"
            if fact.deprecated_feature:
                text += f" by default (deprecated feature {fact.deprecated_feature})"
        elif self.state == "denied":
            text = (
                f"the broker refuses {fact.label}: it reports deprecated feature"
                f" {fact.deprecated_feature} denied"
            )
        elif self.state == "ignored":
            text = (
                f"RabbitMQ {format_version(fact.ignored or ())} and newer accept {fact.label}"
                " without effect"
            )
        else:
            text = f"RabbitMQ {format_version(fact.changed or ())} changed {fact.label}"
        prefix = f"{where}: " if where else ""
        return f"{prefix}{text} ({runs} {shown}); {fact.advice}"


NO_DEPRECATIONS: Mapping[str, bool] = MappingProxyType({})
"""No broker's word on its deprecated features: each version's defaults hold."""


def verdict(
    fact: Fact,
    use: Use,
    version: Version,
    upgrading_from: Version | None = None,
    deprecated: Mapping[str, bool] = NO_DEPRECATIONS,
) -> Verdict | None:
    """What ``version`` does with what ``fact`` is about, or None when it simply accepts it.
    A changed default is news only to an upgrade that crosses it (``upgrading_from`` older).
    ``deprecated``: the broker's deprecated features, each True when permitted; a fact about
    one of them is decided by that state rather than by the version's default."""
    permitted = deprecated.get(fact.deprecated_feature) if fact.deprecated_feature else None
    if permitted is not None:
        return None if permitted else Verdict(fact, use, version, "denied")
    if fact.added is not None and version < fact.added:
        return Verdict(fact, use, version, "unknown" if fact.unchecked_before else "missing")
    if fact.removed is not None and version >= fact.removed:
        return Verdict(fact, use, version, "removed")
    if fact.ignored is not None and version >= fact.ignored:
        return Verdict(fact, use, version, "ignored")
    if fact.changed is not None and upgrading_from is not None and upgrading_from < fact.changed:
        return Verdict(fact, use, version, "changed") if fact.changed <= version else None
    return None


def judge(
    uses: Iterable[Use],
    version: Version,
    upgrading_from: Version | None = None,
    deprecated: Mapping[str, bool] = NO_DEPRECATIONS,
) -> list[Verdict]:
    """Each fact a use meets at ``version`` (one verdict per fact); empty when all is well.
    ``upgrading_from``: the version the broker runs now, when ``version`` is an upgrade's.
    ``deprecated``: what a live broker reports of its deprecated features (name -> permitted),
    over the version's defaults (``verdict``).

    Most objects of a large spec use the same things (a thousand durable classic queues with
    the same arguments): their judgement is remembered, by uses and the types of their values
    (``True == 1``, but a fact may tell them apart)."""
    uses = tuple(uses)
    said = tuple(sorted(deprecated.items()))
    try:
        memo = (tuple((use, type(use.value)) for use in uses), version, upgrading_from, said)
        known = _JUDGED.get(memo)
    except TypeError:  # a value that cannot be hashed (a list in a policy): judged each time
        return _judge(uses, version, upgrading_from, deprecated)
    if known is None:
        if len(_JUDGED) >= _JUDGED_MAX:
            _JUDGED.clear()
        known = _JUDGED[memo] = tuple(_judge(uses, version, upgrading_from, deprecated))
    return list(known)


_JUDGED: dict[object, tuple[Verdict, ...]] = {}
_JUDGED_MAX = 4096


def _judge(
    uses: Iterable[Use],
    version: Version,
    upgrading_from: Version | None,
    deprecated: Mapping[str, bool],
) -> list[Verdict]:
    found: dict[int, Verdict] = {}  # by the fact's place in FACTS
    for use in uses:
        for index, fact in _BY_KEY.get((use.kind, use.key), ()):
            if index not in found and fact.matches(use):
                seen = verdict(fact, use, version, upgrading_from, deprecated)
                if seen is not None:
                    found[index] = seen
    return [found[index] for index in sorted(found)]


def _by_key(facts: tuple[Fact, ...]) -> dict[tuple[Kind, str], tuple[tuple[int, Fact], ...]]:
    """The facts about each (kind, key), with their places: a spec of 50,000 objects asks
    about 100,000 uses, and most keys have no fact at all."""
    out: dict[tuple[Kind, str], list[tuple[int, Fact]]] = {}
    for index, fact in enumerate(facts):
        out.setdefault((fact.kind, fact.key), []).append((index, fact))
    return {key: tuple(found) for key, found in out.items()}


_BY_KEY = _by_key(FACTS)


def added_in(kind: Kind, key: str) -> Version | None:
    """The first version that has ``key`` (of ``kind``), when the table knows it."""
    return next((f.added for f in FACTS if f.kind is kind and f.key == key and f.added), None)


def uses_of_queue(
    queue_type: QueueType,
    durable: bool,
    arguments: Mapping[str, object],
    retried_by_broker: bool = False,
) -> Iterator[Use]:
    """What a queue uses: its type, its arguments (with values), the defaults it relies on,
    and the broker's delayed retry when its retries depend on it (``retry: {via: broker}``)."""
    yield Use(Kind.QUEUE_TYPE, str(queue_type), queue_type=queue_type)
    if not durable:
        yield Use(Kind.FEATURE, "non-durable non-exclusive queues", queue_type=queue_type)
    if retried_by_broker:
        yield Use(Kind.FEATURE, RETRY_VIA_BROKER, queue_type=queue_type)
    for key, value in arguments.items():
        yield Use(Kind.QUEUE_ARGUMENT, key, value, queue_type)
    if "x-delivery-limit" not in arguments:
        yield Use(Kind.QUEUE_ARGUMENT, "x-delivery-limit", ABSENT, queue_type)


def uses_of_vhost(protected_from_deletion: bool | None) -> Iterator[Use]:
    """What a vhost's own settings use: deletion protection, when set."""
    if protected_from_deletion:
        yield Use(Kind.FEATURE, VHOST_DELETION_PROTECTION)


def uses_of_exchange(exchange_type: str) -> Iterator[Use]:
    yield Use(Kind.EXCHANGE_TYPE, str(exchange_type))


def uses_of_policy(
    apply_to: str, definition: Mapping[str, object], operator: bool = False
) -> Iterator[Use]:
    """What a policy uses: its apply-to value and each key of its definition."""
    yield Use(Kind.APPLY_TO, str(apply_to))
    kind = Kind.OPERATOR_POLICY_KEY if operator else Kind.POLICY_KEY
    for key, value in definition.items():
        yield Use(kind, key, value)
