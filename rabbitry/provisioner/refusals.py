"""Why a plan cannot run with the options given: pure, and checked before the first request,
so that a refused apply changes nothing.

- A change to an object another stack owns is refused unless ``take_over`` names that stack.
- What ``protect: true`` guards is never deleted or replaced, whatever the flags.
- Nothing locks out the user the apply is connected as.
- A replace needs ``allow_replace``; a queue's migration cancels consumers only with ``force``,
  and a queue that holds messages is pruned only with ``force``.
- A delay's levels are laid out anew while messages wait in them only when allowed.
"""

from __future__ import annotations

from rabbitry.diagnostics import Address, Diagnostic, listed
from rabbitry.errors import PlanError
from rabbitry.provisioner.apply_options import ApplyOptions
from rabbitry.provisioner.plans import Action, Change, Plan
from rabbitry.provisioner.relayout import relayout_refusals
from rabbitry.topology.primitives import ResourceKey, User


def self_harm(plan: Plan, connected: str | None, prune: bool = True) -> list[Diagnostic]:
    """What the plan would do to the user rabbitry is connected as: delete it, take its
    administrator tag, change its password or remove its permissions in a vhost (deletions
    only with ``prune``). Apply refuses each (a run that locks itself out stops half-way, and
    so does every run after it); the plan says so before."""
    if not connected:
        return []
    problems: list[tuple[Change, str]] = []
    for change in plan.changes:
        if change.action is Action.DELETE and not prune:
            continue
        if change.kind == "user" and change.key.identity == (connected,):
            was, will = change.observed, change.desired
            if change.action is Action.DELETE:
                problems.append((change, f"it deletes user {connected!r}"))
            elif isinstance(was, User) and isinstance(will, User):
                if "administrator" in was.tags and "administrator" not in will.tags:
                    problems.append(
                        (change, f"it takes the administrator tag from user {connected!r}")
                    )
                if {"password differs", "password_hash differs"} & set(change.reasons):
                    problems.append((change, f"it changes the password of user {connected!r}"))
        elif (
            change.kind == "permission"
            and change.key.identity == (connected,)
            and change.action is Action.DELETE
        ):
            problems.append(
                (change, f"it removes the permissions of user {connected!r} in {change.vhost}")
            )
    return [
        refused(
            change,
            "the apply would lock out the user it is connected as",
            f"{problem}, the user this apply is connected as: apply that change as another"
            " administrator (--management-url with other credentials), or leave it out of the"
            " spec",
        )
        for change, problem in problems
    ]


def refused(change: Change, summary: str, detail: str) -> Diagnostic:
    """The refusal of ``change``, addressed to the object it is about."""
    return Diagnostic(summary=summary, detail=detail, address=Address.of_key(change.key))


OWNED_VERBS = {
    Action.CREATE: "declare it again",
    Action.UPDATE: "change it",
    Action.REPLACE: "delete and declare it again",
    Action.DELETE: "delete it",
    Action.ADOPT: "adopt it",
    Action.RETAIN: "give it up",
}


def _runs(change: Change, options: ApplyOptions) -> bool:
    """Whether apply carries the change out (deletions only with prune)."""
    return change.action is not Action.DELETE or options.prune


def ownership_refusals(plan: Plan, options: ApplyOptions) -> list[Diagnostic]:
    """Changes this apply would make to objects other stacks own, without ``take_over``."""
    problems = []
    for change in plan.changes:
        others = [s for s in change.owners if s not in options.take_over]
        if not others or not _runs(change, options):
            continue
        names = " and ".join(repr(s) for s in others)
        flags = " ".join(f"--take-over {s}" for s in others)
        problems.append(
            refused(
                change,
                "owned by another stack",
                f"{change.title} is owned by stack {names} (its ownership record lists it), and"
                f" this apply would {OWNED_VERBS[change.action]}: leave it out of stack"
                f" {plan.stack!r}'s spec, or move it to stack {plan.stack!r} with apply {flags}",
            )
        )
    return problems


def taken_over(plan: Plan, options: ApplyOptions) -> dict[str, set[ResourceKey]]:
    """Stack -> the keys this apply takes from it (changes it carries out on them)."""
    taken: dict[str, set[ResourceKey]] = {}
    for change in plan.changes:
        if _runs(change, options):
            for stack in change.owners:
                if stack in options.take_over:
                    taken.setdefault(stack, set()).add(change.key)
    return taken


def protection_refusals(plan: Plan, options: ApplyOptions) -> list[Diagnostic]:
    """The deletes and replaces of ``protect: true`` objects this apply would carry out: no
    flag allows them (``provisioner.protection``)."""
    return [
        refused(
            change,
            "protected (protect: true)",
            f"{change.title} is protected (protect: true) and this apply would"
            f" {'delete' if change.action is Action.DELETE else 'replace'} it: "
            + "; ".join(r for r in change.reasons if r.startswith("protected")),
        )
        for change in plan.changes
        if change.protected and _runs(change, options)
    ]


def refusals(plan: Plan, options: ApplyOptions, connected: str | None = None) -> list[Diagnostic]:
    """Every reason the plan cannot run with these options, as user ``connected`` (the
    management API's); empty means go."""
    problems = protection_refusals(plan, options)
    problems += self_harm(plan, connected, options.prune)
    problems += ownership_refusals(plan, options)
    problems += relayout_refusals(
        plan.relayouts, prune=options.prune, allow_delay_relayout=options.allow_delay_relayout
    )
    for change in plan.changes:
        if change.protected:
            continue  # refused above, whatever else is said of it
        if change.action is Action.REPLACE:
            why = "; ".join(change.reasons)
            if not options.allow_replace:
                problems.append(
                    refused(
                        change,
                        "a replace not allowed",
                        f"{change.title} cannot change in place ({why}): it must be deleted and"
                        " declared again; run apply with --allow-replace to do that",
                    )
                )
                continue
            # Queue replaces are migrations: messages are moved, not lost. Consumers would be
            # cancelled when the original is deleted, so they need a quiet window or --force.
            if change.kind == "queue" and change.consumers and not options.force:
                problems.append(
                    refused(
                        change,
                        "a migration would cancel consumers",
                        f"{change.title} has {change.consumers} consumer(s) that its migration"
                        " would cancel; stop them first (a quiet window) or add --force",
                    )
                )
            if change.kind == "queue" and change.count_note:
                # found now, not after the migration's first step
                problems.append(
                    refused(
                        change,
                        "messages not counted",
                        f"migrating {change.title} needs exact message counts over AMQP, which"
                        f" the plan could not get ({change.count_note}): fix --url or"
                        " RABBITRY_URL",
                    )
                )
        prune_queue = change.action is Action.DELETE and options.prune and change.kind == "queue"
        if prune_queue and change.count_note and not options.force:
            problems.append(
                refused(
                    change,
                    "messages not counted",
                    f"pruning {change.title} needs its exact message count over AMQP, which the"
                    f" plan could not get ({change.count_note}): fix --url or RABBITRY_URL, or"
                    " add --force",
                )
            )
        if prune_queue and change.messages and not options.force:
            problems.append(
                refused(
                    change,
                    "a prune of a queue that holds messages",
                    f"{change.title} holds {change.messages} message(s): prune refuses to delete"
                    " a queue that is not empty; drain it first, or add --force",
                )
            )
    return problems


def refuse(plan: Plan, options: ApplyOptions, connected: str | None = None) -> None:
    """Raise ``PlanError`` with every refusal (its ``diagnostics``) when there is one."""
    problems = refusals(plan, options, connected)
    if problems:
        raise PlanError(listed("nothing was applied:", problems), problems)


__all__ = [
    "OWNED_VERBS",
    "ownership_refusals",
    "protection_refusals",
    "refusals",
    "refuse",
    "refused",
    "self_harm",
    "taken_over",
]
