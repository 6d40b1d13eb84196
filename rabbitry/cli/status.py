"""``status``, ``shards check`` and ``stacks``: how the spec's federation links and shards
behave live, and which stacks a broker holds."""

from __future__ import annotations

import json
from collections.abc import Mapping

import click

from rabbitry.cli.common import (
    EXIT_OK,
    color_enabled,
    command,
    endpoint_options,
    group,
    json_option,
)
from rabbitry.cli.spec_source import target_options
from rabbitry.errors import RecordUnreadable, SpecError
from rabbitry.management.endpoints import Endpoints
from rabbitry.provisioner.ownership import StackHoldings, stacks_on
from rabbitry.provisioner.state import read_records
from rabbitry.provisioner.status import (
    LinkStatus,
    ShovelState,
    federation_status,
    measure_distribution,
    sample_keys,
    shovel_status,
)
from rabbitry.provisioner.target import Target
from rabbitry.topology import expand
from rabbitry.topology.kinds import describe_key
from rabbitry.topology.patterns.sharding import Sharding, shardings
from rabbitry.uri import mask_uri

EXIT_NOT_HEALTHY = 3
"""A declared federation link is not running, or shards spread worse than the tolerance."""

STATUS_COLORS = {
    LinkStatus.RUNNING: "green",
    LinkStatus.STARTING: "yellow",
    LinkStatus.ERROR: "red",
    LinkStatus.MISSING: "red",
}


@command("status")
@target_options
@json_option
def status_command(
    target: Target,
    as_json: bool,
) -> int:
    """Show the state of every federation link and shovel the spec declares.

    Exit 0 when every declared link and shovel is running, 3 when one is not (starting, error,
    missing), 1 on errors.
    """
    model, endpoints = target.spec, target.endpoints
    with endpoints.management() as client:
        client.overview()  # a status of a broker that does not answer is an error, not "healthy"
        links = federation_status(client, model, expand(model))
        shovels = shovel_status(client, model)
    healthy = all(link.running for link in links if link.declared) and all(
        shovel.healthy for shovel in shovels if shovel.declared
    )
    if as_json:
        payload = {
            "format_version": 1,
            "healthy": healthy,
            "federation_links": [link.to_json() for link in links],
            "shovels": [shovel.to_json() for shovel in shovels],
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(f"Broker: {mask_uri(endpoints.management_url)}")
        _show_shovels(shovels)
        if not links and not shovels:
            click.echo("No federation links or shovels declared.")
        for link in links:
            state = f"{link.status.value:<8}"
            if color_enabled():  # NO_COLOR and pipes get plain text
                state = click.style(state, fg=STATUS_COLORS.get(link.status, "yellow"))
            extra = "" if link.declared else "  (not in the spec)"
            reason = f"  {link.reason}" if link.reason else ""
            if link.status is LinkStatus.MISSING:
                reason = "  no link: is the policy applied and the federation plugin enabled?"
            click.echo(
                f"  {state} {link.vhost}/{link.type} {link.name} <- {link.upstream}{reason}{extra}"
            )
        down = [link for link in links if link.declared and not link.running]
        if links or not shovels:
            click.echo(
                f"{len(links) - len(down)} of {len(links)} link(s) running."
                if not down
                else f"{len(down)} declared link(s) not running."
            )
    return EXIT_OK if healthy else EXIT_NOT_HEALTHY


def _show_shovels(shovels: list[ShovelState]) -> None:
    if not shovels:
        return
    for shovel in shovels:
        state = f"{shovel.status:<10}"
        if color_enabled():
            state = click.style(state, fg="green" if shovel.healthy else "red")
        extra = "" if shovel.declared else "  (not in the spec)"
        reason = f"  {shovel.reason}" if shovel.reason else ""
        if shovel.status == "missing":
            reason = "  not running: is the rabbitmq_shovel plugin enabled? (apply declares it)"
        click.echo(f"  {state} shovel {shovel.vhost}/{shovel.name}{reason}{extra}")
    down = [s for s in shovels if s.declared and not s.healthy]
    click.echo(
        f"{len(shovels)} shovel(s), all running."
        if not down
        else f"{len(down)} declared shovel(s) not running."
    )


@group("shards")
def shards_group() -> None:
    """Consistent-hash sharding against the live broker."""


@shards_group.command("check")
@target_options
@click.option("--exchange", help="Only this sharded exchange (default: all of them).")
@click.option(
    "--sample", default=10_000, show_default=True, type=click.IntRange(1), help="Sample keys."
)
@click.option(
    "--tolerance",
    default=0.15,
    show_default=True,
    type=click.FloatRange(0),
    help="Largest relative deviation of a shard's share from its weight's share.",
)
@json_option
def shards_check_command(
    target: Target,
    exchange: str | None,
    sample: int,
    tolerance: float,
    as_json: bool,
) -> int:
    """Measure how evenly random keys spread over the shards, and that each key sticks to one.

    Publishes each key twice through a temporary copy of each sharded exchange (same hash
    source, weights bound in the same order, to temporary queues): the real shard queues are
    not touched. Exit 0 when every shard is within the tolerance and no key reached two
    shards, 3 otherwise, 1 on errors.
    """
    model, endpoints = target.spec, target.endpoints
    targets: list[tuple[str, Sharding]] = [
        (vhost.name, sharding)
        for vhost in model.vhosts
        for sharding in shardings(vhost)
        if exchange is None or sharding.exchange == exchange
    ]
    if not targets:
        raise SpecError(
            f"no sharded exchange {exchange!r} in the spec"
            if exchange
            else "the spec declares no sharded_exchanges"
        )
    reports = []
    for vhost, sharding in targets:
        report = measure_distribution(endpoints.amqp_url_for(vhost), sharding, sample_keys(sample))
        reports.append((vhost, report))
    healthy = all(report.within(tolerance) for _, report in reports)
    if as_json:
        payload = {
            "format_version": 1,
            "healthy": healthy,
            "tolerance": tolerance,
            "exchanges": [{"vhost": vhost, **report.to_json()} for vhost, report in reports],
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        for vhost, report in reports:
            click.echo(
                f"{vhost}/{report.sharding.exchange}: {report.sample} keys,"
                f" hashing the {report.sharding.source.value.replace('_', ' ')}"
                + (f" {report.sharding.field}" if report.sharding.field else "")
            )
            for shard in report.to_json()["shards"]:
                click.echo(
                    f"  {shard['queue']:<24} weight {shard['weight']:<4}"
                    f" expected {shard['expected']:>9.1f}  observed {shard['observed']:>7}"
                    f"  {shard['deviation']:+.1%}".replace("+", "")
                )
            split = len(report.split_keys)
            click.echo(
                "  every key reached exactly one shard"
                if not split
                else f"  {split} key(s) reached more than one shard, e.g. {report.split_keys[0]}"
            )
        click.echo(
            f"Within {tolerance:.0%} of the weights' shares."
            if healthy
            else f"Not within {tolerance:.0%} of the weights' shares (or keys split)."
        )
    return EXIT_OK if healthy else EXIT_NOT_HEALTHY


__all__ = ["EXIT_NOT_HEALTHY"]


def _held(kinds: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in sorted(kinds.items()))


def _stack_lines(held: StackHoldings) -> list[str]:
    lines = [f"stack {held.stack}: {held.total} object(s)"]
    for vhost, kinds in sorted(held.counts.items()):
        where = f"vhost {vhost}" if vhost else "cluster-wide"
        lines.append(f"  {where}: {_held(kinds)}")
    if held.pending:
        lines.append(f"  {held.pending} recorded by an apply that stopped half-way")
    if held.operations:
        lines.append(f"  {held.operations} queue migration(s) in flight")
    return lines


@command("stacks")
@endpoint_options
@click.option(
    "--vhost",
    "vhosts",
    multiple=True,
    help="Only stacks owning objects in this vhost (repeatable).",
)
@json_option
def stacks_command(endpoints: Endpoints, vhosts: tuple[str, ...], as_json: bool) -> int:
    """List the stacks on the broker (per vhost) with what each owns, from their ownership
    records; objects several stacks own are listed last. Reads no spec."""
    with endpoints.management() as client:
        unreadable: dict[str, RecordUnreadable] = {}
        found = stacks_on(read_records(client, unreadable), vhosts, unreadable)
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2))
        return EXIT_OK
    click.echo(f"Broker: {mask_uri(endpoints.management_url)}")
    if not found.stacks:
        where = f" in {', '.join(vhosts)}" if vhosts else ""
        click.echo(f"No stacks{where}: rabbitry apply makes one (named by the spec's name).")
    for held in found.stacks:
        click.echo("\n".join(_stack_lines(held)))
    if found.contested:
        click.echo("")
        for key, owners in sorted(found.contested.items()):
            names = " and ".join(owners)
            click.secho(
                f"warning: {describe_key(key)} is owned by stacks {names}: leave it out of all"
                " but one spec, or move it with apply --take-over STACK",
                fg="yellow" if color_enabled() else None,
            )
    for stack, problem in sorted(found.unreadable.items()):
        click.secho(
            f"warning: stack {stack}: its ownership record cannot be read: {problem}",
            fg="yellow" if color_enabled() else None,
        )
    return EXIT_OK
