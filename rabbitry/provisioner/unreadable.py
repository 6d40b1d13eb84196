"""What a plan of one stack does when another stack's ownership record cannot be read (broken,
or past a bound: ``ownership.RecordUnreadable``): it goes on, saying which, since it changes
nothing; an apply goes on as long as it only creates objects or changes this stack's own, and
refuses, naming the record, to adopt or change an object this stack does not own: it may be
that stack's. A broken record of one stack thus stops no other stack's routine applies.
"""

from __future__ import annotations

from rabbitry.errors import PlanError
from rabbitry.provisioner.ownership import SHARED_KINDS
from rabbitry.provisioner.plans import Action, Plan
from rabbitry.provisioner.state import BrokerState


def unknown_owner_warnings(state: BrokerState) -> tuple[str, ...]:
    """One line per other stack whose ownership record cannot be read: the plan goes on (it
    changes nothing), but cannot mark that stack's objects."""
    return tuple(
        f"the ownership record of stack {stack!r} cannot be read, so its objects are not"
        f" marked; apply refuses to adopt or change objects this stack does not own until it"
        f" is repaired or removed: {problem}"
        for stack, problem in sorted(state.unreadable.items())
    )


def refuse_unknown_owners(the_plan: Plan, state: BrokerState) -> None:
    """Refuse, changing nothing, a plan that adopts or changes objects this stack does not own
    while another stack's record cannot be read: they may be that stack's. Creations and
    changes to this stack's own objects go on (a broken record of one stack stops no other)."""
    if not state.unreadable:
        return
    touched = [
        change.title
        for change in the_plan.changes
        if change.observed is not None
        and change.key not in state.record.managed
        and not (change.kind in SHARED_KINDS and change.action in (Action.CREATE, Action.ADOPT))
    ]
    if touched:
        stacks = ", ".join(map(repr, sorted(state.unreadable)))
        shown = ", ".join(touched[:5]) + (
            f" and {len(touched) - 5} more" if len(touched) > 5 else ""
        )
        raise PlanError(
            f"nothing was applied: the ownership record of stack {stacks} cannot be read, so"
            f" whether it owns objects this plan adopts or changes is unknown ({shown}):\n  "
            + "\n  ".join(str(problem) for _, problem in sorted(state.unreadable.items()))
        )


__all__ = ["refuse_unknown_owners", "unknown_owner_warnings"]
