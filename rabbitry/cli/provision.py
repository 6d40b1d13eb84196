"""``plan``, ``apply`` and ``export``: the spec against a live broker."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from rabbitry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Activity,
    F,
    color_enabled,
    command,
    endpoint_options,
    err,
    json_option,
)
from rabbitry.errors import ObjectNotFound, SpecError, SpecProblem
from rabbitry.files import write_private
from rabbitry.management.endpoints import Endpoints
from rabbitry.provisioner.definitions import (
    read_definitions,
    scoped,
    topology_from_definitions,
)
from rabbitry.provisioner.definitions_check import check_definitions
from rabbitry.provisioner.display import render_plan
from rabbitry.provisioner.exporter import SecretReference, export_text, export_topology
from rabbitry.provisioner.names import stack_name
from rabbitry.provisioner.planfile import SavedPlan
from rabbitry.topology import check_spec, load_spec_text
from rabbitry.topology.document import unknown_to_rabbitry
from rabbitry.topology.primitives import Topology


@command("show")
@click.argument("planfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
def show_command(planfile: Path, as_json: bool) -> int:
    """Print a plan saved by `rabbitry plan -o PLANFILE`; reads no broker."""
    saved = SavedPlan.read(planfile)
    if as_json:
        out = {
            **saved.plan.to_json(),
            "created": saved.created,
            "broker": saved.broker,
            "cluster": saved.cluster,
        }
        click.echo(json.dumps(out, indent=2))
        return EXIT_OK
    click.echo(
        f"Saved plan {planfile}: made {saved.created} against {saved.broker}"
        f" (cluster {saved.cluster})  stack: {saved.plan.stack}"
    )
    click.echo(render_plan(saved.plan, color=color_enabled(), prune=True))
    return EXIT_OK


reveal_option = click.option(
    "--reveal-secrets",
    is_flag=True,
    help="Write the passwords inside parameter URIs (federation upstreams, shovels) as they"
    " are, instead of environment references.",
)
passwords_option = click.option(
    "--passwords-from-env",
    is_flag=True,
    help="Give users `password: {{ env.RABBITRY_USER_<NAME>_PASSWORD }}` instead of their"
    " password hashes.",
)
output_option = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the spec to this file (mode 0600) instead of standard output.",
)


users_option = click.option(
    "--users",
    type=click.Choice(["access", "all"]),
    is_flag=False,
    flag_value="access",
    default=None,
    help="Also take users (with their password hashes): `--users` those with a permission in"
    " the vhosts taken (every user when every vhost is taken: export --all-vhosts,"
    " import-definitions without --vhost); `--users all` every user, those without any"
    " permission too (administrator- or monitoring-only users).",
)


@dataclass(frozen=True)
class SpecOutput:
    """How ``export`` and ``import-definitions`` write their spec: which users it takes
    (``--users``), secrets as they are or as environment references, to a file or stdout."""

    users: str | None
    reveal_secrets: bool
    passwords_from_env: bool
    output: Path | None

    def text(self, topology: Topology) -> tuple[str, list[SecretReference]]:
        """The spec's text, and the environment references it holds for secrets."""
        return export_text(
            topology, reveal_secrets=self.reveal_secrets, passwords_from_env=self.passwords_from_env
        )

    def write(
        self,
        topology: Topology,
        text: str,
        references: list[SecretReference],
        left_out: Iterable[str],
    ) -> None:
        """Write the spec, then name on stderr what it keeps unchecked and what it left out."""
        _write_spec(text, references, self.output)
        _note_unchecked(topology)
        for line in left_out:
            err(f"left out: {line}")


def spec_output_options(func: F) -> F:
    """``--users``, ``--reveal-secrets``, ``--passwords-from-env`` and ``-o``, handed to the
    command as one ``spec_output``."""

    @functools.wraps(func)
    def command(
        users: str | None,
        reveal_secrets: bool,
        passwords_from_env: bool,
        output: Path | None,
        **options: Any,
    ) -> Any:
        spec_output = SpecOutput(users, reveal_secrets, passwords_from_env, output)
        return func(spec_output=spec_output, **options)

    decorated: Any = command
    for option in (output_option, passwords_option, reveal_option, users_option):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


@command("export")
@endpoint_options
@click.option("--vhost", "vhosts", multiple=True, help="Vhost to export (repeatable).")
@click.option("--all-vhosts", is_flag=True, help="Export every vhost of the broker.")
@click.option(
    "--name",
    help="Stack name written into the spec (default: the first vhost; `broker` with --all-vhosts).",
)
@spec_output_options
def export_command(
    endpoints: Endpoints,
    vhosts: tuple[str, ...],
    all_vhosts: bool,
    name: str | None,
    spec_output: SpecOutput,
) -> int:
    """Write a spec of existing vhosts (adopt a broker rabbitry did not create).

    Users are left out unless --users (--users all, or --all-vhosts --users, for every user of
    the broker, those without a permission too): applying an export puts what it holds under
    the stack, and the broker's own operators rarely belong there. What rabbitry does not know
    (exchange types of plugins, arguments no check covers) is kept unchecked; what the broker
    made for its own plugins (federation links' queues and exchanges, the queues of MQTT and
    STOMP clients' subscriptions) is left out, with its bindings. Both are named on stderr.
    With --all-vhosts, a vhost deleted while the export runs is left out whole, with a warning.
    """
    users = spec_output.users
    if bool(vhosts) == all_vhosts:
        raise click.UsageError("give --vhost V (repeatable) or --all-vhosts")
    omitted: list[str] = []
    # every vhost is listed first, then read: one deleted meanwhile is left out, not an error
    vanished: list[str] | None = [] if all_vhosts else None
    with endpoints.management() as client:
        if all_vhosts:
            vhosts = tuple(sorted(v["name"] for v in client.vhosts()))
            name = name or "broker"
        with Activity() as activity, activity.step(f"reading {', '.join(vhosts)}"):
            topology = export_topology(
                client,
                vhosts,
                name=name or stack_name(vhosts[0], "default"),
                include_users=users is not None,
                all_users=users == "all" or (users is not None and all_vhosts),
                left_out=omitted,
                vanished=vanished,
            )
        for gone in vanished or ():
            err(
                f"warning: vhost {gone!r} was deleted while the export ran: it is left out of"
                " the spec"
            )
        connected = client.username
        if not users:
            holders: set[str] = set()
            for vhost in topology.vhosts:
                try:
                    holders.update(p["user"] for p in client.permissions(vhost.name))
                except ObjectNotFound:
                    if vanished is None:
                        raise
            left_out = sorted(holders)
            if left_out:
                shown = ", ".join(left_out[:5]) + (" ..." if len(left_out) > 5 else "")
                err(
                    f"note: {len(left_out)} user(s) with access were left out ({shown}):"
                    " --users exports them (permissions of users left out are left out too)"
                )
    if any(user.name == connected for user in topology.users):
        err(
            f"warning: the export holds user {connected!r}, the one this command connected as:"
            " applying it puts that user under the stack, and apply --prune would delete it"
            " once it leaves the spec"
        )
    text, references = spec_output.text(topology)
    spec_output.write(topology, text, references, omitted)
    return EXIT_OK


def _write_spec(text: str, references: list[SecretReference], output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
    else:
        write_private(output, text)
        err(f"wrote {output} (mode 0600: it may hold password hashes)")
    if references:
        err(
            f"note: {len(references)} password(s) were written as environment references;"
            " set them before applying this spec (a password inside a URI as it appears there,"
            " percent-encoded):"
        )
        for reference in references:
            err(f"  {reference.variable}  ({reference.where})")


@command("import-definitions")
@click.argument("definitions", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--vhost",
    "vhosts",
    multiple=True,
    help="Take only this vhost of the file (repeatable; default: every vhost, and the"
    " global parameters).",
)
@click.option("--name", help="Stack name written into the spec (default: the file's name).")
@spec_output_options
def import_definitions_command(
    definitions: Path,
    vhosts: tuple[str, ...],
    name: str | None,
    spec_output: SpecOutput,
) -> int:
    """Turn a definitions file (rabbitmqctl export_definitions, GET /api/definitions; RabbitMQ
    3.8 on) into a spec that makes the same definitions on an empty broker. Reads no broker.
    (validate, plan and apply also take the file itself, with every user.)

    Users follow the rules of `export`: left out unless --users (those with a permission in
    the vhosts taken; without --vhost, or with --users all, every user of the file), and
    with a user left out, its permissions too. Exchanges of types rabbitry does not know are
    kept, passed through unchecked. What a spec cannot hold (plugin-internal objects, other
    runtime parameters) is left out and named on stderr, never dropped silently.
    """
    stack = name or stack_name(definitions.stem, "imported")
    users = spec_output.users
    data = read_definitions(definitions)
    check_definitions(data, str(definitions))
    user_scope = "all" if users == "all" or (users and not vhosts) else users or "none"
    taken = scoped(data, vhosts, user_scope, str(definitions))
    if users is None and data.get("users"):
        err(
            f"note: {len(data['users'])} user(s) of the file were left out: --users takes them"
            " (permissions of users left out are left out too)"
        )
    imported = topology_from_definitions(taken, stack, str(definitions))
    text, references = spec_output.text(imported.topology)
    # the spec must load and pass rabbitry's checks as written, or nothing is written
    placeholders = {reference.variable: "placeholder" for reference in references}
    try:
        check_spec(load_spec_text(text, str(spec_output.output or "<spec>"), environ=placeholders))
    except SpecError as exc:
        raise SpecError(
            [
                SpecProblem(
                    f"the spec made of {definitions} does not pass rabbitry's checks;"
                    " nothing was written",
                    file=str(definitions),
                ),
                *exc.problems,
            ]
        ) from None
    spec_output.write(imported.topology, text, references, imported.left_out)
    return EXIT_OK


def _note_unchecked(topology: Topology) -> None:
    """Name what the spec keeps that rabbitry does not know: kept, but nothing checks it."""
    for line in unknown_to_rabbitry(topology):
        err(f"kept unchecked: {line}")


__all__ = ["EXIT_ERROR"]
