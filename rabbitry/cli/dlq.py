"""``rabbitry dlq list|show|replay|purge``: the parking lots of a vhost."""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rabbitry.cli.common import endpoint_options, group, json_option, live_progress, parse_vars
from rabbitry.consumer.dlq import (
    PARKING_SUFFIXES,
    Parked,
    ParkingLot,
    Selection,
    parking_lots_of,
    parse_matches,
    refuse_unless_parking_lot,
)
from rabbitry.errors import DlqError, RabbitryError
from rabbitry.management.endpoints import Endpoints
from rabbitry.provisioner.queue_counter import AmqpQueueCounter


def _console(quiet: bool = False) -> Console:
    """Where tables and progress go: the terminal; nothing at all with ``quiet`` (--json)."""
    console = Console(highlight=False, quiet=quiet)
    if not console.is_terminal and not quiet:
        console = Console(highlight=False, width=160)  # logs and pipes: no wrapped cells
    return console


@dataclass(frozen=True)
class LotTarget:
    """The parking lot a command works on, the broker it is on, and which of its messages."""

    queue: str
    vhost: str
    endpoints: Endpoints
    selection: Selection

    def open(
        self, *, any_queue: bool = False, parking_lots: frozenset[str] | None = None
    ) -> ParkingLot:
        return ParkingLot(
            self.endpoints.amqp_url_for(self.vhost),
            self.queue,
            any_queue=any_queue,
            parking_lots=parking_lots,
        )


def guard_options(func: Any) -> Any:
    """``--any-queue`` and ``--spec`` (with ``--var``): what may be replayed or purged, handed
    to the command as ``parking_lots`` (None: by name) and ``any_queue``."""

    @functools.wraps(func)
    def command(
        target: LotTarget, spec: Path | None, variables: tuple[str, ...], **options: Any
    ) -> Any:
        lots = None
        if spec is not None:
            from rabbitry.topology import load_spec  # only when asked: the spec model is heavy

            lots = parking_lots_of(load_spec(spec, parse_vars(variables)), target.vhost)
        return func(target, parking_lots=lots, **options)

    decorated = click.option(
        "--var",
        "variables",
        multiple=True,
        metavar="KEY=VALUE",
        help="Template variable of --spec.",
    )(command)
    decorated = click.option(
        "--spec",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The spec: its parking lots and dead-letter queues are what may be acted on.",
    )(decorated)
    return click.option(
        "--any-queue",
        is_flag=True,
        help="Act on the queue even if it is not a parking lot (a live work queue).",
    )(decorated)


def vhost_option(func: Any) -> Any:
    return click.option("--vhost", help="The vhost (default: the one the AMQP URL names, else /).")(
        func
    )


def lot_vhost(endpoints: Endpoints, vhost: str | None) -> str:
    """The vhost a command acts on: ``--vhost``, else the one the AMQP URL names, else ``/``.
    A URL naming another vhost than ``--vhost`` is an error, as in every client
    (``amqp.settings.url_for_vhost``): a parking lot of one vhost is never replayed or purged
    in another."""
    from rabbitry.amqp.settings import named_vhost, url_for_vhost

    if vhost is None:
        return named_vhost(endpoints.amqp_url) or "/"
    url_for_vhost(endpoints.amqp_url, vhost)  # raises when the URL names another vhost
    return vhost


def lot_options(func: Any) -> Any:
    """``QUEUE``, the broker options, ``--vhost`` and the selection (``--count``, ``--id``,
    ``--match``), handed to the command as one ``lot``."""

    @functools.wraps(func)
    def command(
        queue: str,
        endpoints: Endpoints,
        vhost: str | None,
        count: int | None,
        ids: tuple[str, ...],
        match: tuple[str, ...],
        **options: Any,
    ) -> Any:
        try:
            selection = Selection(count=count, ids=frozenset(ids), match=parse_matches(match))
        except DlqError as exc:
            raise click.UsageError(str(exc)) from None
        target = LotTarget(queue, lot_vhost(endpoints, vhost), endpoints, selection)
        return func(target, **options)

    decorated = click.option(
        "--match", multiple=True, metavar="KEY=VALUE", help="Only messages with this header."
    )(command)
    decorated = click.option(
        "--id", "ids", multiple=True, help="Only this message id (repeatable)."
    )(decorated)
    decorated = click.option("--count", type=int, help="At most this many messages, oldest first.")(
        decorated
    )
    return click.argument("queue")(endpoint_options(vhost_option(decorated)))


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _row(p: Parked) -> dict[str, Any]:
    return {
        "position": p.position,
        "message_id": p.message_id,
        "origin": p.origin,
        "attempts": p.attempts,
        "reason": p.reason,
        "last_error": p.last_error,
        "parked_at": _when(p.parked_at_ms),
        "headers": {k: (v.decode() if isinstance(v, bytes) else v) for k, v in p.headers.items()},
        "body": p.body.decode("utf-8", "replace"),
    }


@group("dlq")
def dlq() -> None:
    """Parking lots: list them, show, replay or purge their messages."""


@dlq.command("list")
@endpoint_options
@vhost_option
@json_option
def list_command(endpoints: Endpoints, vhost: str | None, as_json: bool) -> None:
    """Parking lots (queues named *.parking or *.dead) and how many messages each holds."""
    vhost = lot_vhost(endpoints, vhost)
    with endpoints.management() as client:
        queues = client.queue_stats(vhost)
    # management statistics lag by seconds: ask each parking lot itself for its count
    lots: list[dict[str, Any]] = []
    with AmqpQueueCounter(endpoints) as counter:
        for q in queues:
            name = str(q["name"])
            if not name.endswith(PARKING_SUFFIXES):
                continue
            try:
                messages, consumers = counter(vhost, name)
            except RabbitryError:
                messages, consumers = int(q.get("messages") or 0), int(q.get("consumers") or 0)
            lots.append(
                {
                    "name": name,
                    "messages": messages,
                    "consumers": consumers,
                    "type": q.get("type", ""),
                }
            )
    lots.sort(key=lambda q: str(q["name"]))
    if as_json:
        click.echo(json.dumps({"format_version": 1, "vhost": vhost, "parking_lots": lots}))
        return
    table = Table("parking lot", "messages", "consumers", title=f"vhost {vhost}")
    for lot in lots:
        table.add_row(str(lot["name"]), str(lot["messages"]), str(lot["consumers"]))
    _console().print(table)


@dlq.command("show")
@lot_options
@click.option("--limit", default=20, show_default=True, help="Show at most this many.")
@json_option
def show_command(target: LotTarget, limit: int, as_json: bool) -> None:
    """Parked messages with their failure headers; they stay in the queue."""
    queue = target.queue
    with target.open() as lot:
        depth = lot.depth
        parked = lot.peek(target.selection, limit=limit)
    if as_json:
        rows = [_row(p) for p in parked]
        click.echo(
            json.dumps({"format_version": 1, "queue": queue, "depth": depth, "messages": rows})
        )
        return
    table = Table(
        "#",
        "message id",
        "from",
        "attempts",
        "why",
        "last error",
        "parked at (UTC)",
        title=f"{queue}: {depth} message(s)",
    )
    for p in parked:
        table.add_row(
            str(p.position),
            p.message_id or "",
            p.origin or "",
            "" if p.attempts is None else str(p.attempts),
            p.reason,
            p.last_error[:80],
            _when(p.parked_at_ms),
        )
    _console().print(table)


@dlq.command("replay")
@lot_options
@guard_options
@click.option("--all", "take_all", is_flag=True, help="Replay every message (no selection).")
@click.option("--exchange", help="Publish here instead of each message's original queue.")
@click.option("--routing-key", help="With --exchange (default: the parked message's key).")
@json_option
def replay_command(
    target: LotTarget,
    parking_lots: frozenset[str] | None,
    any_queue: bool,
    take_all: bool,
    exchange: str | None,
    routing_key: str | None,
    as_json: bool,
) -> None:
    """Send parked messages back, each confirmed before its parked copy is removed.

    At least once, never lost: a replay cut short may leave up to 256 messages (the confirm
    window) in both queues, with the same message id; the rest stay parked.

    Only a parking lot (named *.parking or *.dead, or declared so by --spec) unless --any-queue.
    """
    queue, selection = target.queue, target.selection
    if selection.everything and not take_all:
        raise click.UsageError("say which messages: --count, --id, --match, or --all")
    if not any_queue:
        refuse_unless_parking_lot(queue, "replay", parking_lots)
    console = _console(quiet=as_json)
    with (
        target.open(any_queue=any_queue, parking_lots=parking_lots) as lot,
        Progress(
            TextColumn("replaying"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=not console.is_terminal,
            disable=as_json or not console.is_terminal or not live_progress(),
        ) as progress,
    ):
        task = progress.add_task("replay", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = lot.replay(
            selection, exchange=exchange, routing_key=routing_key, on_progress=on_progress
        )
    if as_json:
        payload = {
            "format_version": 1,
            "queue": queue,
            "vhost": target.vhost,
            "to": exchange,
            "scanned": report.scanned,
            "moved": report.moved,
            "kept": report.kept,
            "failed": [{"message_id": mid, "why": why} for mid, why in report.failed],
        }
        click.echo(json.dumps(payload, indent=2))
        if report.failed:
            raise SystemExit(1)
        return
    to = exchange if exchange is not None else "their original queues"
    console.print(
        f"replayed {report.moved} of {report.scanned} message(s) from {queue} to {to};"
        f" {report.kept} left in {queue}"
    )
    for message_id, why in report.failed:
        console.print(f"  not moved: {message_id}: {why}")
    if report.failed:
        raise SystemExit(1)


@dlq.command("purge")
@lot_options
@guard_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def purge_command(
    target: LotTarget,
    parking_lots: frozenset[str] | None,
    any_queue: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete parked messages: the selected ones, or all of them.

    Only a parking lot (named *.parking or *.dead, or declared so by --spec) unless --any-queue.
    """
    queue = target.queue
    what = "ALL messages" if target.selection.everything else "the selected messages"
    if as_json and not yes:
        raise click.UsageError("--json needs --yes: with JSON output nobody is asked")
    if not any_queue:
        refuse_unless_parking_lot(queue, "purge", parking_lots)
    if not yes:
        click.confirm(f"Delete {what} of {queue} in vhost {target.vhost}?", abort=True)
    with target.open(any_queue=any_queue, parking_lots=parking_lots) as lot:
        removed = lot.purge(target.selection)
    if as_json:
        payload = {"format_version": 1, "queue": queue, "vhost": target.vhost, "deleted": removed}
        click.echo(json.dumps(payload, indent=2))
        return
    _console().print(f"deleted {removed} message(s) from {queue}")
