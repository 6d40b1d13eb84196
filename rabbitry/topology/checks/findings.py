"""What every spec check shares: the collector of findings and the broker's fixed rules.

Checks append findings by location (a path into the document); ``validate`` turns them into
``SpecProblem``s with file:line once, so no check deals with positions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.model import QueueSpec, Spec, VhostSpec
from rabbitry.topology.spec.source_map import Loc

ERROR = "error"
WARNING = "warning"


@dataclass
class Findings:
    """Problems collected by the checks, by location in the document."""

    items: list[tuple[Loc, str, str]] = field(default_factory=list)

    def error(self, loc: Loc, message: str) -> None:
        self.items.append((loc, message, ERROR))

    def warning(self, loc: Loc, message: str) -> None:
        self.items.append((loc, message, WARNING))


Check = Callable[[Spec, Findings], None]
"""One semantic check: reads the spec, adds findings."""


def is_builtin_exchange(name: str) -> bool:
    """The default exchange ('') and the amq.* exchanges exist in every vhost."""
    return name == "" or name.startswith("amq.")


def exchange_exists(name: str, declared: set[str]) -> bool:
    """Declared in the vhost, or one the broker always has."""
    return name in declared or is_builtin_exchange(name)


def effective_queue_type(queue: QueueSpec, vhost: VhostSpec) -> QueueType:
    """The type the broker gives the queue: its own, else the vhost default, else classic."""
    return queue.type or vhost.default_queue_type or QueueType.CLASSIC


def vhosts_of(spec: Spec) -> Iterator[tuple[Loc, VhostSpec]]:
    """Each vhost with its location."""
    for index, vhost in enumerate(spec.vhosts):
        yield ("vhosts", index), vhost


class Named(Protocol):
    """An entry of a list whose names must differ (delays, upstreams, upstream sets)."""

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def each_named(
    entries: Iterable[N], loc: Loc, what: str, findings: Findings
) -> Iterator[tuple[Loc, N]]:
    """Each entry of the list at ``loc`` with its location; a name given again is an error
    (``what`` says what the entries are: ``delay``, ``upstream``)."""
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        entry_loc = (*loc, index)
        if entry.name in seen:
            findings.error((*entry_loc, "name"), f"{what} {entry.name!r} is declared twice")
        seen.add(entry.name)
        yield entry_loc, entry


def check_pattern(pattern: str, loc: Loc, findings: Findings) -> None:
    """Patterns are Erlang regexes on the broker; Python's re is close enough to catch typos."""
    try:
        re.compile(pattern)
    except re.error as exc:
        findings.error(loc, f"not a valid regular expression: {exc}")


def check_unchecked(
    unchecked: dict[str, object],
    known: frozenset[str],
    checked: dict[str, object],
    loc: Loc,
    findings: Findings,
    forbidden: dict[str, str],
) -> None:
    """Unchecked keys must not hide checked ones: those belong where their values are checked."""
    for key in unchecked:
        if key in forbidden:
            findings.error((*loc, key), forbidden[key])
        elif key in checked:
            findings.error(
                (*loc, key),
                f"{key} is set both in the checked keys and here; keep only the checked one",
            )
        elif key in known:
            findings.warning(
                (*loc, key),
                f"{key} is a key rabbitry checks: move it out of the unchecked keys so its "
                "value is validated (and durations and sizes accept units)",
            )
