"""Delay relayouts: a plan that changes how a delay's levels route, while messages wait in them.

A binary delay's routing keys carry exactly as many bits as it has levels, and its level
patterns count words from the left (``rabbitry.policies.delay``): a message that entered the
levels under one layout (unit, max/count, or the fixed list) is routed by the patterns of the
next as if it meant another delay, or matches nothing at level 0, where a quorum level that
dead-letters at-least-once keeps it for ever. So the planner finds, per delay of the spec:

- whether the plan changes its levels: a level queue or exchange (``<delay>.NN``, a fixed
  delay's entry exchange ``<delay>``) created, replaced or deleted, or a binding from one of
  them created or deleted, while level queues of the delay already exist (a delay declared for
  the first time holds nothing; a binding put back after someone deleted it by hand repairs);
- which layouts the broker is marked with (its ``<delay>.layout.<fingerprint>`` exchanges):
  marked with the spec's layout alone, the routing keys stay the same (a level queue migrated
  to another type, say) and nothing is at stake; levels without any mark (made by an older
  rabbitry) count as another layout;
- how many messages wait in the delay's level queues, exact over AMQP when the counter reaches
  the broker (the same counts the plan shows for a replace or a prune).

Apply refuses a relayout while messages wait (or cannot be counted) unless told
``allow_delay_relayout``, and any relayout without ``prune``: the old layout's bindings would
stay beside the new ones and route every message by both. Pure: the counts come through the
state's lazy ``queue_stats``; no clock, no I/O of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rabbitry.diagnostics import Address, Diagnostic
from rabbitry.policies.delay import is_level_object, parse_layout_exchange
from rabbitry.provisioner.state import QueueStats
from rabbitry.topology.primitives import ResourceKey, Topology

ALLOW_FLAG = "--allow-delay-relayout"


class PlannedChange(Protocol):
    """What the rule reads of a planned change (``planner.Change``)."""

    @property
    def key(self) -> ResourceKey: ...

    @property
    def drift(self) -> bool: ...

    @property
    def action(self) -> Any: ...


@dataclass(frozen=True)
class DelayRelayout:
    """One delay whose levels the plan lays out anew, and what waits in them."""

    vhost: str
    delay: str
    layout: str
    """The spec's layout (``binary-1000ms-23``)."""
    previous: tuple[str, ...]
    """The layouts the broker is marked with; empty when it carries no mark (levels made by
    an older rabbitry or by hand)."""
    held: tuple[tuple[str, int], ...]
    """(level queue, messages) of every level queue holding messages."""
    uncounted: tuple[str, ...] = ()
    """Level queues whose count is not exact, with why (the plan cannot say they are empty)."""
    needs_prune: bool = False
    """The old layout leaves objects that only a prune deletes: level bindings (routing every
    message by both layouts) or its mark (clients of the old spec would still pass)."""

    @property
    def messages(self) -> int:
        return sum(count for _, count in self.held)

    @property
    def at_stake(self) -> bool:
        """Messages wait in the levels, or may (a count that is not exact)."""
        return bool(self.held or self.uncounted)

    def describe(self) -> str:
        was = ", ".join(self.previous) if self.previous else "unmarked levels"
        head = f"delay {self.vhost}/{self.delay} is laid out anew ({was} -> {self.layout})"
        if self.held:
            queues = ", ".join(f"{name}: {count}" for name, count in self.held)
            head += (
                f" while {self.messages} message(s) wait in its level queues ({queues}): routed"
                " for the old layout, they would not be delivered (they wait in a level queue"
                " until the old layout is back); drain the levels first (stop delaying and wait"
                f" for the longest delay), or apply with {ALLOW_FLAG} to give them up"
            )
        elif self.uncounted:
            head += (
                f" and the messages in its level queues could not be counted exactly"
                f" ({'; '.join(self.uncounted)}): fix --url or RABBITRY_URL, or apply with"
                f" {ALLOW_FLAG}"
            )
        else:
            head += ": its level queues are empty (counted exactly)"
        return (
            head + "; publishers and workers started with the old spec must be restarted with"
            " the new one (a new one refuses while the layouts differ)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "vhost": self.vhost,
            "delay": self.delay,
            "layout": self.layout,
            "previous": list(self.previous),
            "messages": self.messages,
            "held": [{"queue": name, "messages": count} for name, count in self.held],
            "uncounted": list(self.uncounted),
            "needs_prune": self.needs_prune,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DelayRelayout:
        return cls(
            vhost=str(data["vhost"]),
            delay=str(data["delay"]),
            layout=str(data["layout"]),
            previous=tuple(str(p) for p in data.get("previous", ())),
            held=tuple((str(h["queue"]), int(h["messages"])) for h in data.get("held", ())),
            uncounted=tuple(str(u) for u in data.get("uncounted", ())),
            needs_prune=bool(data.get("needs_prune", False)),
        )


def _touches_levels(change: PlannedChange, vhost: str, delay: str) -> bool:
    """Whether ``change`` makes, replaces or deletes one of ``delay``'s level queues or
    exchanges, or a binding from one of them (the patterns that read a key live on their
    source; the mark's own bindings into the levels belong to its layout alone)."""
    key = change.key
    if key.vhost != vhost or key.kind not in ("queue", "exchange", "binding"):
        return False
    if str(change.action) == "adopt":
        return False
    if str(change.action) == "create" and change.drift:
        return False  # put back after a hand deletion: the layout it had
    return is_level_object(delay, key.name)  # a queue's or exchange's name, a binding's source


def delay_relayouts(
    desired: Topology,
    observed: Topology,
    changes: Sequence[PlannedChange],
    queue_stats: Mapping[ResourceKey, QueueStats],
) -> list[DelayRelayout]:
    """Every delay of ``desired`` whose levels ``changes`` lay out anew while level queues of
    it exist on the broker (``observed``), with what waits in them."""
    out: list[DelayRelayout] = []
    for vhost in desired.vhosts:
        marks = [parse_layout_exchange(e.name) for e in vhost.exchanges]
        wanted = {mark[0]: mark[1] for mark in marks if mark is not None}
        if not wanted:
            continue
        seen = observed.vhost(vhost.name)
        if seen is None:
            continue
        for delay, layout in sorted(wanted.items()):
            if not any(_touches_levels(c, vhost.name, delay) for c in changes):
                continue
            levels = sorted(q.name for q in seen.queues if is_level_object(delay, q.name))
            if not levels:
                continue
            marked = {p for d, p in _marks(e.name for e in seen.exchanges) if d == delay}
            if marked == {layout}:
                continue  # the same routing keys: a queue migrated or a binding put back
            previous = tuple(sorted(marked - {layout}))
            stale = any(
                str(c.action) == "delete" and _touches_levels(c, vhost.name, delay) for c in changes
            )
            held, uncounted = _counts(vhost.name, levels, queue_stats)
            out.append(
                DelayRelayout(
                    vhost=vhost.name,
                    delay=delay,
                    layout=layout,
                    previous=previous,
                    held=tuple(held),
                    uncounted=tuple(uncounted),
                    needs_prune=stale or bool(previous),
                )
            )
    return out


def touched_by(
    relayouts: Iterable[DelayRelayout], changes: Sequence[PlannedChange]
) -> tuple[DelayRelayout, ...]:
    """The relayouts ``changes`` still make (a plan cut down by ``--target``)."""
    return tuple(r for r in relayouts if any(_touches_levels(c, r.vhost, r.delay) for c in changes))


def _marks(names: Iterable[str]) -> list[tuple[str, str]]:
    return [mark for mark in map(parse_layout_exchange, names) if mark is not None]


def _counts(
    vhost: str, queues: Iterable[str], queue_stats: Mapping[ResourceKey, QueueStats]
) -> tuple[list[tuple[str, int]], list[str]]:
    held: list[tuple[str, int]] = []
    uncounted: list[str] = []
    for name in queues:
        stats = queue_stats.get(ResourceKey.of("queue", vhost, name))
        if stats is None:
            continue  # gone since the read: holds nothing
        if stats.source != "amqp":
            uncounted.append(f"{name}: {stats.note or 'management statistics only'}")
        if stats.messages:
            held.append((name, stats.messages))
    return held, uncounted


def relayout_refusals(
    relayouts: Iterable[DelayRelayout], *, prune: bool, allow_delay_relayout: bool
) -> list[Diagnostic]:
    """Why apply must not lay these delays out anew with these options (empty: go), each
    addressed to its delay (kind ``delay``)."""
    problems: list[Diagnostic] = []
    for relayout in relayouts:
        where = f"delay {relayout.vhost}/{relayout.delay}"
        address = Address("delay", relayout.vhost, relayout.delay)
        if relayout.needs_prune and not prune:
            detail = (
                f"{where} is laid out anew ({relayout.layout}): without --prune the old"
                " layout's level bindings and mark stay beside the new ones (messages routed by"
                " both layouts, clients of the old spec let through); apply with --prune"
            )
            problems.append(Diagnostic("a delay relayout without --prune", detail, address=address))
        if relayout.at_stake and not allow_delay_relayout:
            summary = "a delay relayout while messages may wait"
            problems.append(Diagnostic(summary, relayout.describe(), address=address))
    return problems


__all__ = ["ALLOW_FLAG", "DelayRelayout", "delay_relayouts", "relayout_refusals", "touched_by"]
