"""``plan``: what apply would change. A module of its own, light to import: the broker's
reads start (``early.read_early``) before the spec model and the provisioner load, so the broker
lists a large vhost while they do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rabbitry.cli.common import (
    EXIT_CHANGES,
    EXIT_OK,
    Activity,
    command,
    err,
    json_option,
    target_option,
    target_options,
)

if TYPE_CHECKING:
    from rabbitry.provisioner.target import Target
    from rabbitry.topology.versions import Version


def _parse_target_version(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> Version | None:
    from rabbitry.topology.versions import release

    try:
        return None if value is None else release(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@command("plan")
@target_options(read_ahead=True)
@json_option
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help="Exit 0 when there is nothing to do, 2 when there are changes, 1 on errors.",
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    metavar="PLANFILE",
    help="Save the plan (mode 0600) for `rabbitry apply PLANFILE` to apply exactly it.",
)
@click.option(
    "--target-version",
    "target_version",
    callback=_parse_target_version,
    metavar="VERSION",
    help="Also list what RabbitMQ VERSION (e.g. 4.3) would refuse or change in this spec:"
    " what an upgrade would break. The plan stays against the live broker.",
)
@target_option
def plan_command(
    target: Target,
    as_json: bool,
    detailed_exitcode: bool,
    out: Path | None,
    target_version: Version | None,
    targets: tuple[str, ...],
) -> int:
    """Show what apply would change on the broker; changes nothing. SPEC may also be a
    definitions file (.json), read as the spec import-definitions would make of it."""
    from rabbitry.cli.provision import plan_text, targeted_plan
    from rabbitry.files import write_private
    from rabbitry.provisioner.planfile import SavedPlan, broker_identity
    from rabbitry.provisioner.queue_counter import AmqpQueueCounter
    from rabbitry.provisioner.stack import plan_topology
    from rabbitry.uri import mask_uri

    topology = target.topology_alone()
    with (
        target.client or target.endpoints.management() as client,
        AmqpQueueCounter(target.endpoints) as counter,
        Activity() as activity,
        activity.step("reading the broker's state"),
    ):
        plan = plan_topology(client, topology, counter, target_version)
        the_plan = targeted_plan(plan, targets)
        made_against = broker_identity(client) if out is not None else None
    if as_json:
        click.echo(json.dumps(the_plan.to_json(), indent=2))
    else:
        click.echo(plan_text(target, the_plan, prune=True))
    if out is not None and made_against is not None:
        broker = mask_uri(target.endpoints.management_url)
        write_private(out, SavedPlan.of(the_plan, made_against, broker).to_text())
        err(f"Saved the plan to {out}: `rabbitry apply {out}` applies exactly it.")
    if detailed_exitcode and the_plan.has_changes:
        return EXIT_CHANGES
    return EXIT_OK
