"""Plans as people read them: one line per change, terraform's symbols, reasons indented."""

from __future__ import annotations

from collections.abc import Callable

import click

from rabbitry.provisioner.plans import SYMBOLS, Action, Change, Plan
from rabbitry.topology.patterns.super_streams import super_streams_in
from rabbitry.topology.primitives import ResourceKey
from rabbitry.uri import mask_text

COLORS = {
    Action.CREATE: "green",
    Action.UPDATE: "yellow",
    Action.REPLACE: "magenta",
    Action.DELETE: "red",
    Action.ADOPT: "cyan",
    Action.RETAIN: "blue",
}


def _annotations(change: Change, prune: bool) -> list[str]:
    notes: list[str] = []
    at_stake = change.kind == "queue" and change.action in (Action.REPLACE, Action.DELETE)
    if at_stake and change.messages is None and change.count_note:
        notes.append(f"message count unknown ({change.count_note})")
    if at_stake and change.messages is not None:
        if change.counted == "amqp":
            notes.append(f"{change.messages} message(s)")
        else:
            why = f"; {change.count_note}" if change.count_note else ""
            notes.append(
                f"about {change.messages} message(s) (management statistics, may lag{why})"
            )
    if change.consumers:
        notes.append(f"{change.consumers} consumer(s)")
    if change.drift:
        notes.append("changed outside rabbitry")
    if change.owners:
        names = " and ".join(repr(s) for s in change.owners)
        notes.append(f"owned by stack {names}: refused without --take-over")
    if change.protected:
        notes.append("protected: refused")
    elif change.action is Action.DELETE and not prune:
        notes.append("only with --prune")
    return notes


def _super_streams(plan: Plan) -> dict[ResourceKey, str]:
    """Changes that make or change a whole super stream, all the same way: the first member's
    key -> the line standing for them all ('' for the other members)."""
    if plan.desired is None:
        return {}
    actions = {c.key: c.action for c in plan.changes}
    order = {key: i for i, key in enumerate(actions)}
    shown: dict[ResourceKey, str] = {}
    for vhost in plan.desired.vhosts:
        for found in super_streams_in(vhost):
            members = [found.exchange, *found.queues, *found.bindings]
            keys = [m.key(vhost.name) for m in members]
            if not all(k in actions for k in keys) or len({actions[k] for k in keys}) != 1:
                continue  # partly changed: each part is shown
            first = min(keys, key=order.__getitem__)
            shown.update(dict.fromkeys(keys, ""))
            partitions = len(found.queues)
            shown[first] = f"super stream {vhost.name}/{found.name} ({partitions} partitions)"
    return shown


def render_plan(plan: Plan, *, color: bool = False, prune: bool = True) -> str:
    """The plan as text; ``prune`` says whether deletions will run (else they are marked). A
    super stream made or changed whole is one line."""
    style: Callable[..., str] = click.style if color else (lambda text, **_kw: text)
    lines: list[str] = []
    width = max((len(SYMBOLS[c.action]) for c in plan.changes), default=1)
    grouped = _super_streams(plan)
    for change in plan.changes:
        title = grouped.get(change.key)
        if title == "":
            continue
        if title is not None:
            symbol = SYMBOLS[change.action].rjust(width)
            lines.append(style(f"  {symbol} {title}", fg=COLORS[change.action]))
            continue
        symbol = SYMBOLS[change.action].rjust(width)
        head = f"  {symbol} {change.title}"
        notes = _annotations(change, prune)
        if notes:
            head += f"  ({', '.join(notes)})"
        lines.append(style(mask_text(head), fg=COLORS[change.action]))
        for reason in change.reasons:
            if change.action is Action.DELETE and reason == "no longer in the spec":
                continue
            if change.drift and reason == "deleted outside rabbitry":
                continue
            lines.append(f"  {' ' * width}     {mask_text(reason)}")
    if plan.warnings:
        lines.append("")
        lines.extend(style(f"warning: {mask_text(w)}", fg="yellow") for w in plan.warnings)
    if lines:
        lines.append("")
    lines.append(style(plan.summary(), bold=True))
    return "\n".join(lines)
