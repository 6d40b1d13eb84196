"""``apply``: make the broker match a spec, or apply a saved plan exactly.

A module of its own, light to import: the stack's lock is claimed (``target_options(lock=True)``)
before the spec model and the provisioner load, so the lock's settle time passes while they do.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from rabbitry.cli.common import (
    EXIT_OK,
    Activity,
    command,
    json_option,
    target_option,
    target_options,
)

if TYPE_CHECKING:
    from rabbitry.management.client import ManagementClient
    from rabbitry.provisioner.planfile import SavedTarget
    from rabbitry.provisioner.plans import Plan
    from rabbitry.provisioner.target import Target


@command("apply")
@target_options(plan_files=True, read_ahead=True, lock=True)
@click.option(
    "--auto-approve",
    is_flag=True,
    help="Apply without asking for confirmation (a saved plan never asks: it was reviewed).",
)
@click.option(
    "--allow-replace",
    is_flag=True,
    help="Delete and re-declare queues/exchanges whose settings cannot change in place.",
)
@click.option("--prune", is_flag=True, help="Delete objects this stack created that left the spec.")
@click.option(
    "--force",
    is_flag=True,
    help="Allow deleting or replacing queues that hold messages or have consumers.",
)
@click.option(
    "--allow-delay-relayout",
    is_flag=True,
    help="Lay a delay's levels out anew (another unit, max, count or levels) although messages"
    " wait in them: those messages are given up (routed for the old layout, they are never"
    " delivered). Without it, apply refuses such a change while the levels hold messages.",
)
@click.option(
    "--take-over",
    "take_over",
    multiple=True,
    metavar="STACK",
    help="Act on objects stack STACK owns (repeatable): they move to this stack. Without it,"
    " apply refuses to adopt, change or delete another stack's objects.",
)
@json_option
@click.option(
    "--lock-timeout",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait this long for another apply of the same stack to finish (0: refuse at once).",
)
@target_option
def apply_command(target: Target | SavedTarget, **options: Any) -> int:
    """Make the broker match the spec, or apply a saved plan exactly (SPEC may be a PLANFILE
    from `rabbitry plan -o`, or a definitions file, .json); one apply per stack at a time."""
    try:
        return _apply(target, **options)
    finally:
        lock = getattr(target, "lock", None)  # a Target's, not a saved plan's
        if lock is not None:
            lock.abandon()  # a run stopped before it acquired the lock it claimed


def _apply(
    target: Target | SavedTarget,
    *,
    auto_approve: bool,
    allow_replace: bool,
    prune: bool,
    force: bool,
    allow_delay_relayout: bool,
    take_over: tuple[str, ...],
    as_json: bool,
    lock_timeout: float,
    targets: tuple[str, ...],
) -> int:
    from rabbitry.cli.provision import apply_json, plan_text, targeted_plan
    from rabbitry.errors import PlanError
    from rabbitry.provisioner.applier import apply_plan
    from rabbitry.provisioner.apply_options import ApplyOptions
    from rabbitry.provisioner.planfile import SavedTarget
    from rabbitry.provisioner.queue_counter import AmqpQueueCounter
    from rabbitry.provisioner.refusals import refusals
    from rabbitry.provisioner.stack import check_saved, locked_plan, plan_topology
    from rabbitry.provisioner.target import Target

    saved = target.saved if isinstance(target, SavedTarget) else None
    if saved is not None and targets:
        raise click.UsageError(
            "--target does not apply to a saved plan: make the plan with --target instead"
        )
    if as_json and not auto_approve and saved is None:
        raise click.UsageError("--json needs --auto-approve: with JSON output nobody is asked")
    options = ApplyOptions(
        allow_replace=allow_replace,
        prune=prune,
        force=force,
        take_over=frozenset(take_over),
        allow_delay_relayout=allow_delay_relayout,
    )
    if saved is not None:
        stack = saved.plan.stack
    else:
        assert isinstance(target, Target)
        topology = target.topology_alone()
        stack = topology.name
    drawn: list[str] = []  # the plan as shown, of the last plan made

    def make_plan(client: ManagementClient) -> Plan:
        with Activity() as activity, activity.step("reading the broker's state"):
            if saved is not None:
                check_saved(client, saved)
                the_plan = saved.plan
            else:
                the_plan = targeted_plan(
                    plan_topology(client, topology, counter, applying=True), targets
                )
        if not as_json:  # drawn now: a large plan takes a while, and the lock settles meanwhile
            drawn[:] = [plan_text(target, the_plan, prune)]
        return the_plan

    with (
        AmqpQueueCounter(target.endpoints) as counter,
        locked_plan(target, stack, make_plan, lock_timeout, take_over) as (client, the_plan),
    ):
        if not as_json:
            click.echo(drawn[-1])
        if not the_plan.has_changes:
            if as_json:
                click.echo(json.dumps(apply_json(the_plan, [], []), indent=2))
            return EXIT_OK
        problems = refusals(the_plan, options, client.username)
        if problems:
            raise PlanError("nothing was applied:\n  " + "\n  ".join(problems))
        if not auto_approve and saved is None:
            if not sys.stdin.isatty():
                raise click.UsageError(
                    "apply needs confirmation: run it in a terminal or pass --auto-approve"
                )
            click.confirm("Apply these changes?", abort=True)
        progress = None if as_json else (lambda line: click.echo(f"  {line}"))
        with Activity() as activity:
            result = apply_plan(
                client, the_plan, options, counter, progress=progress, counted=activity.count
            )
    if as_json:
        click.echo(json.dumps(apply_json(the_plan, result.done, result.skipped), indent=2))
        return EXIT_OK
    click.echo(f"Apply complete: {len(result.done)} change(s) made.")
    if result.skipped:
        click.echo(
            f"{len(result.skipped)} object(s) left the spec but were kept; "
            "run apply --prune to delete them."
        )
    return EXIT_OK
