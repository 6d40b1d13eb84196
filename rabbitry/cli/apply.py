"""``apply``: make the broker match a spec, or apply a saved plan exactly.

A module of its own, light to import: ``rabbitry.apply`` claims the stack's lock before the spec
model and the provisioner load, so the lock's settle time passes while they do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rabbitry.cli.common import EXIT_OK, command, json_option, target_option
from rabbitry.cli.spec_source import spec_source_options

if TYPE_CHECKING:
    from rabbitry.provisioner.stack import SpecSource


@command("apply")
@spec_source_options
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
    help="Lay a delay's levels out anew (another unit, max, count, levels or lanes) although"
    " messages wait in them: those messages are given up (routed for the old layout, they are never"
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
def apply_command(
    spec: Path,
    source: SpecSource,
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
    """Make the broker match the spec, or apply a saved plan exactly (SPEC may be a PLANFILE
    from `rabbitry plan -o`, or a definitions file, .json); one apply per stack at a time."""
    templated = bool(source.get("variables") or source.get("var_files"))
    if templated or targets or (as_json and not auto_approve):
        _refuse_usage(spec, templated, bool(targets), as_json and not auto_approve)
    from rabbitry.cli.reporting import CommandReporter
    from rabbitry.provisioner.stack import apply

    result = apply(
        spec,
        allow_replace=allow_replace,
        prune=prune,
        force=force,
        allow_delay_relayout=allow_delay_relayout,
        take_over=take_over,
        targets=targets,
        lock_timeout=lock_timeout,
        report=CommandReporter(as_json=as_json, prune=prune, auto_approve=auto_approve),
        **source,
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return EXIT_OK
    if result.plan is None or not result.plan.has_changes:
        return EXIT_OK
    click.echo(f"Apply complete: {len(result.done)} change(s) made.")
    if result.skipped:
        click.echo(
            f"{len(result.skipped)} object(s) left the spec but were kept; "
            "run apply --prune to delete them."
        )
    return EXIT_OK


def _refuse_usage(spec: Path, variables: bool, targets: bool, unasked: bool) -> None:
    """Options that cannot go together: a saved plan was rendered and cut when it was made,
    and with JSON output nobody is asked."""
    from rabbitry.provisioner.planfile import is_plan_file

    saved = is_plan_file(spec)
    if saved and variables:
        raise click.UsageError(
            f"{spec} is a saved plan: its spec was rendered when the plan was"
            " made, so --var and --var-file do not apply"
        )
    if saved and targets:
        raise click.UsageError(
            "--target does not apply to a saved plan: make the plan with --target instead"
        )
    if unasked and not saved:
        raise click.UsageError("--json needs --auto-approve: with JSON output nobody is asked")
