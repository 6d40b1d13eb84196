"""``plan``: what apply would change. A module of its own, light to import: ``rabbitry.plan``
starts the broker's reads before the spec model and the provisioner load, so the broker lists a
large vhost while they do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rabbitry.cli.common import EXIT_CHANGES, EXIT_OK, command, err, json_option, target_option
from rabbitry.cli.spec_source import spec_source_options

if TYPE_CHECKING:
    from rabbitry.provisioner.stack import SpecSource
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
@spec_source_options
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
    spec: Path,
    source: SpecSource,
    as_json: bool,
    detailed_exitcode: bool,
    out: Path | None,
    target_version: Version | None,
    targets: tuple[str, ...],
) -> int:
    """Show what apply would change on the broker; changes nothing. SPEC may also be a
    definitions file (.json), read as the spec import-definitions would make of it."""
    from rabbitry.cli.reporting import CommandReporter
    from rabbitry.provisioner.stack import plan

    the_plan = plan(
        spec,
        target_version=target_version,
        targets=targets,
        save_to=out,
        report=CommandReporter(as_json=as_json, plan_json=as_json),
        **source,
    )
    if out is not None and as_json:
        err(json.dumps({"saved_plan": {"file": str(out), "apply": f"rabbitry apply {out}"}}))
    elif out is not None:
        err(f"Saved the plan to {out}: `rabbitry apply {out}` applies exactly it.")
    if detailed_exitcode and the_plan.has_changes:
        return EXIT_CHANGES
    return EXIT_OK
